import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startDatabase, type TestDatabase } from './database.js';
import type { Sql } from '../../src/db/sql.js';
import { withDeadline } from './deadline.js';

// Starts the real burrowd (node dist/src/main.js) on port 0 against a fresh database and
// reads the seed key and port from its stdout, as a user's script would. Each server gets a
// --data-dir of its own (a temp dir), where --seed-api-key keeps its key: servers of one
// test never see each other's seed key.
export const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
export const CLI = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 20_000;

export interface TestServer {
  url: string;
  port: number;
  domain: string;
  adminKey: string;
  sql: Sql;
  db: TestDatabase;
  /** Its --data-dir (holds the kept seed key). */
  dataDir: string;
  proc: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** SIGTERM, wait for exit; returns the exit code. Stops the database (and removes a data dir of its own) unless kept. */
  stop(opts?: { keepDatabase?: boolean }): Promise<number | null>;
}

export interface StartOptions {
  args?: string[];
  env?: Record<string, string>;
  workers?: number;
  /** Reuse a database (e.g. to restart a server on the same data). */
  db?: TestDatabase;
  /** Reuse a data dir (with `db`: a restart that keeps the seed key). The caller removes it. */
  dataDir?: string;
}

/** Matches the start-up line; the address may be an IPv6 one in brackets. */
export const LISTENING_RE = /listening on https?:\/\/(?:\[[^\]]+\]|[^:/\s]+):(\d+)/;

export async function startServer(opts: StartOptions = {}): Promise<TestServer> {
  const db = opts.db ?? (await startDatabase());
  const ownDataDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'burrow-test-data-'));
  const removeDataDir = () => {
    if (ownDataDir) rmSync(dataDir, { recursive: true, force: true });
  };
  const args = [
    MAIN, '--port', '0', '--host', '127.0.0.1', '--seed-api-key', '--workers', String(opts.workers ?? 2),
    '--database-url', db.url, '--data-dir', dataDir, '--log-level', 'info', '--shutdown-timeout', '3000', ...(opts.args ?? []),
  ];
  const proc = spawn(process.execPath, args, {
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const started = new Promise<{ key: string; port: number }>((resolve, reject) => {
    const check = () => {
      const m = LISTENING_RE.exec(out);
      if (m) resolve({ key: out.split('\n')[0]!.trim(), port: Number(m[1]) });
    };
    proc.stdout!.on('data', check);
    void exited.then((code) => reject(new Error(`burrowd exited with ${code} before listening:\n${err.slice(-2000)}`)));
  });
  let key: string;
  let port: number;
  try {
    ({ key, port } = await withDeadline(started, START_TIMEOUT_MS, 'burrowd start'));
  } catch (e) {
    proc.kill('SIGKILL');
    if (!opts.db) await db.stop();
    removeDataDir();
    throw e;
  }
  return {
    url: `${/listening on https:/.test(out) ? 'https' : 'http'}://127.0.0.1:${port}`,
    port,
    domain: 'localhost',
    adminKey: key,
    sql: db.sql,
    db,
    dataDir,
    proc,
    stdout: () => out,
    stderr: () => err,
    async stop(o = {}) {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const code = await withDeadline(exited, STOP_TIMEOUT_MS, 'burrowd stop').catch(() => {
        proc.kill('SIGKILL');
        return null;
      });
      if (!o.keepDatabase && !opts.db) await db.stop();
      if (!o.keepDatabase) removeDataDir();
      return code;
    },
  };
}
