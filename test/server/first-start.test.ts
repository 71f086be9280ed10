// What an operator reads at burrowd's first start: a database with no user, started without
// --seed-api-key or --initial-admin-email (contrib/burrowd.service as copied), gets a warning
// that says so and how to fix it; once a user exists it is gone. --log-format pretty gives
// readable lines; off a terminal the default stays one JSON object per line.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { withDeadline } from '../helpers/fixtures.js';
import { LISTENING_RE, MAIN } from '../helpers/server.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { prettyLine } from '../../src/log-pretty.js';

const START_TIMEOUT_MS = 60_000;
let db: TestDatabase;
let dataDir: string;

test.before(async () => {
  db = await startDatabase();
  dataDir = mkdtempSync(join(tmpdir(), 'burrow-first-start-'));
});

test.after(async () => {
  await db?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** Starts burrowd, waits until it listens and has logged "burrowd ready", stops it; its stderr. */
async function startAndStop(args: string[]): Promise<{ stdout: string; stderr: string }> {
  const p = spawn(process.execPath, [MAIN, '--port', '0', '--host', '127.0.0.1', '--workers', '1', '--database-url', db.url, '--data-dir', dataDir, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  p.stdout.on('data', (d) => (stdout += d));
  p.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  try {
    await withDeadline(
      new Promise<void>((resolve, reject) => {
        const check = () => LISTENING_RE.test(stdout) && stderr.includes('burrowd ready') && resolve();
        p.stdout.on('data', check);
        p.stderr.on('data', check);
        void exited.then(() => reject(new Error(`burrowd exited: ${stderr.slice(-1000)}`)));
      }),
      START_TIMEOUT_MS,
      `burrowd start: ${stderr.slice(-500)}`,
    );
  } finally {
    p.kill('SIGTERM');
    await withDeadline(exited, 20_000, 'burrowd stop').catch(() => p.kill('SIGKILL'));
  }
  return { stdout, stderr };
}

test('no user, no seed key, no initial admin: a warning naming both ways to the first admin (pretty lines)', async () => {
  const { stderr } = await startAndStop(['--log-format', 'pretty']);
  const lines = stderr.split('\n').filter(Boolean);
  assert.ok(lines.every((l) => !l.startsWith('{')), `pretty: no JSON line\n${stderr}`);
  const warning = lines.find((l) => / WARN  no user exists/.test(l));
  assert.ok(warning, stderr);
  assert.match(warning!, /^\d\d:\d\d:\d\d\.\d{3} WARN  no user exists and neither --seed-api-key \(BURROW_SEED_API_KEY=1\) nor --initial-admin-email/);
  assert.match(warning!, /Set BURROW_SEED_API_KEY=1 \(under systemd: in \/etc\/burrow\/burrowd\.env\) and restart/);
  assert.match(warning!, /BURROW_INITIAL_ADMIN_EMAIL/);
  // The fields follow the message as key=value, the ready line's among them.
  assert.ok(lines.some((l) => /^\d\d:\d\d:\d\d\.\d{3} INFO  burrowd ready  .*\bhost=127\.0\.0\.1 port=\d+ /.test(l)), stderr);
  assert.not.match(stderr, /\x1b\[/, 'no colour off a terminal');
});

test('--initial-admin-email set: no warning; JSON lines by default off a terminal', async () => {
  const { stderr } = await startAndStop(['--initial-admin-email', 'ops@example.test']);
  const lines = stderr.split('\n').filter(Boolean);
  assert.ok(lines.length > 0 && lines.every((l) => typeof JSON.parse(l).level === 'number'), stderr);
  assert.not.match(stderr, /no user exists/);
});

test('once a user exists (the seed admin), a start with neither flag has no warning', async () => {
  const seeded = await startAndStop(['--seed-api-key']);
  assert.match(seeded.stdout, /^bk_/);
  assert.not.match(seeded.stderr, /no user exists/);
  const again = await startAndStop([]);
  assert.not.match(again.stderr, /no user exists/);
});

test('a pretty line: fields as key=value (quoted when they need it), an error with its stack, colour on request', () => {
  const line = JSON.stringify({ level: 50, time: Date.UTC(2026, 0, 2, 3, 4, 5, 6), pid: 1, msg: 'cannot listen', port: 80, host: 'a b', err: { type: 'Error', message: 'EACCES', stack: 'Error: EACCES\n    at listen (x.js:1:1)' } });
  const plain = prettyLine(line, false);
  assert.match(plain, /^\d\d:\d\d:\d\d\.006 ERROR cannot listen  port=80 host="a b" err=EACCES\n    at listen \(x\.js:1:1\)\n$/);
  assert.match(prettyLine(line, true), /\x1b\[31mERROR\x1b\[0m/);
  assert.is(prettyLine('not json', false), 'not json\n');
});

test.run();
