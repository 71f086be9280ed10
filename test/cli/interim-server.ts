// INTERIM: stands in for test/helpers/server.ts + fixtures.ts (the lead's, not landed yet) with
// the same shapes, so the suites switch by changing one import. Runs the real burrowd on a fresh
// PostgreSQL database (127.0.0.1:5432, dropped afterwards).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import argon2 from 'argon2';
import postgres from 'postgres';
import { generateKey } from '../../src/auth/key-format.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const PG_ADMIN_URL = process.env.TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const START_DEADLINE_MS = 30_000;

export interface TestServer {
  url: string;
  port: number;
  domain: string;
  adminKey: string;
  sql: postgres.Sql;
  stderr(): string;
  stop(): Promise<number>;
}

export async function startServer(opts: { args?: string[]; env?: Record<string, string> } = {}): Promise<TestServer> {
  const db = `burrow_cli_${randomBytes(6).toString('hex')}`;
  const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => undefined });
  await admin.unsafe(`create database ${db}`);
  const dbUrl = new URL(PG_ADMIN_URL);
  dbUrl.pathname = `/${db}`;
  const child = spawn(process.execPath, [MAIN, '--port', '0', '--seed-api-key', '--workers', '2', '--database-url', dbUrl.toString(), '--log-level', 'warn', ...(opts.args ?? [])], {
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const started = await new Promise<{ key: string; port: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`burrowd did not start in ${START_DEADLINE_MS} ms: ${err}`)), START_DEADLINE_MS);
    child.stdout.on('data', (d) => {
      out += d;
      const m = /^(bk_\S+)\n.*listening on http:\/\/[^:]+:(\d+)/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ key: m[1]!, port: Number(m[2]) });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`burrowd exited ${code}: ${err}`));
    });
  });
  const sql = postgres(dbUrl.toString(), { max: 2, onnotice: () => undefined });
  return {
    url: `http://127.0.0.1:${started.port}`,
    port: started.port,
    domain: 'localhost',
    adminKey: started.key,
    sql,
    stderr: () => err,
    async stop() {
      await sql.end({ timeout: 1 });
      const code = await new Promise<number>((resolve) => {
        if (child.exitCode !== null) return resolve(child.exitCode);
        const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
        child.once('exit', (c) => {
          clearTimeout(kill);
          resolve(c ?? -1);
        });
        child.kill('SIGTERM');
      });
      await admin.unsafe(`drop database if exists ${db} with (force)`);
      await admin.end({ timeout: 1 });
      return code;
    },
  };
}

export async function createUser(t: TestServer, o: { email?: string; role?: 'admin' | 'member'; deactivated?: boolean } = {}): Promise<{ id: string; email: string }> {
  const email = o.email ?? `user-${randomBytes(4).toString('hex')}@example.com`;
  const [row] = await t.sql<{ id: string }[]>`
    insert into users (email, name, role, deactivated_at)
    values (${email}, ${email.split('@')[0]!}, ${o.role ?? 'member'}, ${o.deactivated ? new Date() : null})
    returning id`;
  return { id: row!.id, email };
}

export async function createKeyFor(t: TestServer, userId: string, o: { scopes?: string[]; expiresAt?: Date | null; name?: string } = {}): Promise<string> {
  const { key, prefix } = generateKey();
  const hash = await argon2.hash(key, { type: argon2.argon2id, memoryCost: 19_456, timeCost: 2, parallelism: 1 });
  await t.sql`
    insert into api_keys (user_id, name, key_prefix, key_hash, scopes, expires_at)
    values (${userId}, ${o.name ?? `k-${prefix.slice(3, 9)}`}, ${prefix}, ${hash}, ${o.scopes ?? ['tunnels', 'management']}, ${o.expiresAt ?? null})`;
  return key;
}
