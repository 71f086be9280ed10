// docs/operations.md "Moving from the embedded database to an external PostgreSQL", followed:
// a burrowd on its embedded database with a seed key, a user, a key and a team; the new database
// gets burrow's tables from a burrowd started on it once; the doc's copy block runs verbatim (its
// D= line pointed at this test's data directory); burrowd on the new database with the same data
// directory then prints the same seed key, and every key and row still works.
//
// The new database is another embedded cluster on the embedded pass, a database of its own on
// the machine's PostgreSQL on the PostgreSQL pass.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect, type Sql } from '../../src/db/sql.js';
import { withDeadline } from '../helpers/deadline.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { LISTENING_RE, MAIN } from '../helpers/server.js';
import { waitFor } from '../cli/harness.js';

const DOC = readFileSync(fileURLToPath(new URL('../../../docs/operations.md', import.meta.url)), 'utf8');
const hasPsql = spawnSync('psql', ['--version'], { stdio: 'ignore' }).status === 0;
const START_TIMEOUT_MS = 60_000;

const work = mkdtempSync(join(tmpdir(), 'burrow-move-'));
const dataDir = join(work, 'data');
const children: ChildProcess[] = [];
let target: { url: string; sql: Sql; stop(): Promise<void> } | null = null;

test.after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await target?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** The database to move to: a fresh one, never a schema (the copy names burrow's tables unqualified). */
async function newDatabase(): Promise<typeof target & object> {
  const pg = process.env.TEST_DATABASE_URL;
  if (!pg) {
    const db: TestDatabase = await startDatabase();
    return { url: db.url, sql: db.sql, stop: () => db.stop() };
  }
  const name = `burrow_move_${randomBytes(4).toString('hex')}`;
  const admin = connect(pg, { max: 1, applicationName: 'burrow-test' });
  await admin.unsafe(`create database ${name}`);
  const u = new URL(pg);
  u.pathname = `/${name}`;
  const sql = connect(u.toString(), { max: 2, applicationName: 'burrow-test' });
  return {
    url: u.toString(),
    sql,
    async stop() {
      await sql.end({ timeout: 1 });
      await admin.unsafe(`drop database if exists ${name} with (force)`);
      await admin.end({ timeout: 1 });
    },
  };
}

interface Running {
  proc: ChildProcess;
  port: number;
  firstLine: string;
  stop(): Promise<number | null>;
}

async function burrowd(args: string[]): Promise<Running> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('BURROW_') && k !== 'DATABASE_URL'));
  const proc = spawn(process.execPath, [MAIN, '--port', '0', '--host', '127.0.0.1', '--workers', '1', '--shutdown-timeout', '2000', '--log-level', 'warn', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(proc);
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((r) => proc.once('exit', (c) => r(c)));
  const port = Number(await waitFor(() => (proc.exitCode !== null ? 'exited' : LISTENING_RE.exec(out)?.[1]), START_TIMEOUT_MS, `burrowd ${args.join(' ')} start; stderr:\n${err}`));
  assert.ok(port > 0, `burrowd exited before listening: ${err}`);
  return { proc, port, firstLine: out.split('\n')[0]!, stop: () => (proc.kill('SIGTERM'), withDeadline(exited, 20_000, 'burrowd stop')) };
}

async function api(port: number, key: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await withDeadline(
    fetch(`http://127.0.0.1:${port}/api/v1${path}`, { method, headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined }),
    10_000,
    `${method} ${path}`,
  );
  return { status: res.status, json: await res.json() };
}

/** The copy block of the doc, its lines unindented, with this test's data directory. */
function copyBlock(): string {
  const m = /```sh manual: the suite runs this block[^\n]*\n([\s\S]*?)\n\s*```/.exec(DOC);
  assert.ok(m, 'docs/operations.md has the copy block');
  const body = m![1]!.replace(/^ {3}/gm, '');
  assert.match(body, /^D=\/var\/lib\/burrow$/m);
  return body.replace(/^D=\/var\/lib\/burrow$/m, `D='${dataDir}'`);
}

test('the documented move keeps every user, key, team and the seed key', async () => {
  if (!hasPsql) return void console.log('skipped: psql is not installed (Debian: apt-get install postgresql-client)');
  // The embedded burrowd with some data; it keeps running during the copy (the doc's step 2).
  const before = await burrowd(['--seed-api-key', '--data-dir', dataDir]);
  const seedKey = before.firstLine;
  const bob = await api(before.port, seedKey, 'POST', '/users', { email: 'bob@example.com', name: 'Bob' });
  assert.is(bob.status, 201);
  const bobKey = await api(before.port, seedKey, 'POST', `/users/${bob.json.id}/keys`, { name: 'laptop', scopes: ['tunnels'] });
  assert.is(bobKey.status, 201);
  assert.is((await api(before.port, seedKey, 'POST', '/teams', { name: 'web' })).status, 201);

  // Step 1: the new database gets burrow's tables from a burrowd started on it once.
  target = await newDatabase();
  const once = await burrowd(['--database-url', target.url, '--data-dir', join(work, 'scratch')]);
  assert.is(await once.stop(), 0);

  // Step 3, verbatim.
  const copy = spawnSync('bash', ['-euo', 'pipefail', '-c', copyBlock()], { env: { ...process.env, DST: target.url }, encoding: 'utf8', timeout: 60_000 });
  assert.is(copy.status, 0, `${copy.stdout}\n${copy.stderr}`);
  assert.is(await before.stop(), 0);

  // Every table but the migrations', the transient OAuth ones and the server's own secrets
  // (made anew on the new database) is in the doc's TABLES.
  const tables = (await target.sql<{ table_name: string }[]>`select table_name from information_schema.tables where table_schema = current_schema() and table_type = 'BASE TABLE'`).map((r) => r.table_name);
  const documented = /^TABLES="([^"]+)"/m.exec(copyBlock())![1]!.split(' ');
  // cluster_*: a running cluster's live state (leases, live tunnels), empty on the embedded database;
  // acme_*: certificates whose keys the old server secret encrypted, obtained again (the doc says so).
  assert.equal(tables.filter((t) => t !== 'schema_migrations' && t !== 'server_secrets' && !t.startsWith('oauth_') && !t.startsWith('cluster_') && !t.startsWith('acme_')).sort(), [...documented].sort(), 'TABLES names every table of burrow');

  // Step 4: the same data directory, the new database.
  const after = await burrowd(['--seed-api-key', '--database-url', target.url, '--data-dir', dataDir]);
  assert.is(after.firstLine, seedKey, 'the same seed key');
  const me = await api(after.port, bobKey.json.key as string, 'GET', '/me');
  assert.is(me.status, 200);
  assert.is(me.json.email, 'bob@example.com');
  const teams = await api(after.port, seedKey, 'GET', '/teams');
  assert.equal((teams.json as { name: string }[]).map((t) => t.name), ['web']);
  assert.is(await after.stop(), 0);
});

test.run();
