import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MAIN } from '../helpers/server.js';
import { api } from '../helpers/fixtures.js';
import { eventually, withDeadline } from '../helpers/deadline.js';

// The embedded database behind --data-dir is a PostgreSQL server that burrowd runs as a child
// (src/db/embedded-postgres.ts): its cluster lives in <data-dir>/postgres, it keeps data across
// restarts, it stops with burrowd, and it does not outlive a burrowd that is killed.

let dir: string;

interface Burrowd {
  proc: ChildProcess;
  key: string;
  url: string;
  stderr: () => string;
}

async function boot(): Promise<Burrowd> {
  const proc = spawn(process.execPath, [MAIN, '--port', '0', '--host', '127.0.0.1', '--data-dir', dir, '--seed-api-key', '--workers', '1', '--log-level', 'warn'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stderr!.on('data', (d) => (err += d));
  const lines = await withDeadline(
    new Promise<string[]>((resolve, reject) => {
      proc.stdout!.on('data', (d) => {
        out += d;
        const l = out.split('\n');
        if (l.length >= 3) resolve(l);
      });
      proc.once('exit', (code) => reject(new Error(`burrowd exited ${code}: ${err}`)));
    }),
    60_000,
    'burrowd start',
  );
  return { proc, key: lines[0]!.trim(), url: /http:\/\/\S+/.exec(lines[1]!)![0], stderr: () => err };
}

function exited(p: ChildProcess): Promise<unknown> {
  return p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise((r) => p.once('exit', r));
}

const pidFile = () => join(dir, 'postgres', 'postmaster.pid');
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test.before(() => {
  dir = mkdtempSync(join(tmpdir(), 'burrow-embedded-'));
});

test.after(() => {
  rmSync(dir, { recursive: true, force: true });
});

test('a new data directory gets a PostgreSQL cluster that keeps data across a restart and stops with burrowd', async () => {
  const first = await boot();
  try {
    assert.ok(existsSync(join(dir, 'postgres', 'PG_VERSION')), 'cluster in <data-dir>/postgres');
    const created = await api(first, 'POST', '/keys', { key: first.key, body: { name: 'persisted' } });
    assert.is(created.status, 201, created.text);
  } finally {
    first.proc.kill('SIGTERM');
    await withDeadline(exited(first.proc), 20_000, 'burrowd stop');
  }
  assert.is(first.proc.exitCode, 0, first.stderr());
  assert.not.ok(existsSync(pidFile()), 'PostgreSQL shut down cleanly (no postmaster.pid left)');

  const second = await boot();
  try {
    const keys = await api(second, 'GET', '/keys', { key: second.key });
    assert.is(keys.status, 200, keys.text);
    assert.ok(keys.body.some((k: { name: string }) => k.name === 'persisted'), JSON.stringify(keys.body));
  } finally {
    second.proc.kill('SIGTERM');
    await withDeadline(exited(second.proc), 20_000, 'burrowd stop');
  }
});

test('a killed burrowd does not leave its PostgreSQL running; the next start works', async () => {
  const b = await boot();
  const pid = Number(readFileSync(pidFile(), 'utf8').split('\n')[0]);
  assert.ok(alive(pid), 'postmaster runs');
  b.proc.kill('SIGKILL');
  await withDeadline(exited(b.proc), 10_000, 'burrowd killed');
  await eventually(() => !alive(pid), 20_000, 'the orphaned PostgreSQL exits');
  const again = await boot();
  try {
    assert.is((await api(again, 'GET', '/me', { key: again.key })).status, 200);
  } finally {
    again.proc.kill('SIGTERM');
    await withDeadline(exited(again.proc), 20_000, 'burrowd stop');
  }
});

test.run();
