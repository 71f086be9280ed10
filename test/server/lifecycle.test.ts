import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { LISTENING_RE, MAIN, startServer, type TestServer } from '../helpers/server.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';

// The server as an operator runs it: seed key on stdout, health, readiness, restart of a
// crashed shard, graceful stop, and the embedded database's files surviving a restart.

let t: TestServer;

test.before(async () => {
  t = await startServer({ args: ['--fault-injection', '--auth-failure-limit', '5'] });
});

test.after(async () => {
  await t?.stop();
});

/** A request on a connection of its own, so the kernel may hand it to any shard. */
async function fresh(path: string, key?: string, method: 'GET' | 'POST' = 'GET') {
  const agent = new Agent({ pipelining: 0 });
  try {
    const res = await withDeadline(
      request(t.url + path, { method, dispatcher: agent, headers: key ? { authorization: `Bearer ${key}`, connection: 'close' } : { connection: 'close' } }),
      5_000,
      path,
    );
    const text = await res.body.text();
    return { status: res.statusCode, text, headers: res.headers };
  } finally {
    await agent.close();
  }
}

test('the seed key is the first stdout line and is an admin key', async () => {
  assert.match(t.stdout().split('\n')[0]!, /^bk_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}$/);
  const me = await api(t, 'GET', '/me', { key: t.adminKey });
  assert.is(me.status, 200);
  assert.is(me.body.email, 'seed@burrow.local');
  assert.is(me.body.role, 'admin');
  // Logs go to stderr as JSON lines, never to stdout.
  assert.ok(t.stderr().split('\n').filter(Boolean).every((l) => l.startsWith('{')));
});

test('healthz and readyz answer without a key; readyz reports every shard', async () => {
  const h = await api(t, 'GET', '/healthz');
  assert.is(h.status, 200);
  const r = await api(t, 'GET', '/readyz');
  assert.is(r.status, 200, r.text);
  assert.equal(r.body.checks, { database: 'ok', shards: '2/2' });
});

test('a crashed shard is restarted and the server keeps answering', async () => {
  const crash = await fresh('/__fault/crash-shard', undefined, 'POST');
  assert.is(crash.status, 202);
  await eventually(async () => t.stderr().includes('shard exited unexpectedly'), 5_000, 'crash logged');
  await eventually(async () => t.stderr().includes('shard restarted'), 10_000, 'shard restarted');
  const r = await eventually(async () => {
    const res = await api(t, 'GET', '/readyz');
    return res.status === 200 && res.body.checks.shards === "2/2" ? res : null;
  }, 10_000, 'both shards ready again');
  assert.is(r!.status, 200);
  for (let i = 0; i < 6; i++) assert.is((await fresh('/api/v1/me', t.adminKey)).status, 200);
  assert.is(t.proc.exitCode, null, 'the process survived the shard crash');
});

test('failed authentications from one IP past the limit get 429 with Retry-After; verified keys keep working', async () => {
  // One kept-alive connection stays on one shard: the key it verified stays cached there. (A
  // shard that never verified it, one restarted by the test before, refuses the blocked address.)
  const kept = new Agent({ connections: 1, pipelining: 1 });
  const me = async (): Promise<number> => {
    const res = await withDeadline(request(`${t.url}/api/v1/me`, { dispatcher: kept, headers: { authorization: `Bearer ${t.adminKey}` } }), 5_000, '/me');
    await res.body.text();
    return res.statusCode;
  };
  assert.is(await me(), 200);
  const bad = 'bk_AAAAAAAAAAAA_' + 'B'.repeat(43);
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) statuses.push((await fresh('/api/v1/me', bad)).status);
  assert.equal(statuses, [401, 401, 401, 401, 401]);
  const limited = await eventually(async () => {
    const r = await fresh('/api/v1/me', bad);
    return r.status === 429 ? r : null;
  }, 5_000, '429 after the limit');
  assert.ok(Number(limited!.headers['retry-after']) > 0);
  assert.is(JSON.parse(limited!.text).type, '/problems/too-many-requests');
  assert.is(await me(), 200, 'the verified key, on the connection (and shard) that verified it');
  await kept.close();
});

test('SIGTERM finishes in-flight requests and exits 0', async () => {
  const other = await startServer();
  try {
    const inflight = Promise.allSettled(Array.from({ length: 5 }, () => api(other, 'GET', '/me', { key: other.adminKey })));
    const code = await other.stop({ keepDatabase: true });
    const results = await inflight;
    assert.is(code, 0, other.stderr().slice(-1500));
    // Requests already accepted were answered (200), none left hanging.
    for (const r of results) if (r.status === 'fulfilled') assert.ok([200, 503].includes(r.value.status));
    assert.ok(other.stderr().includes('"msg":"stopped"'));
    assert.not.ok(/Assertion failed|Aborted/.test(other.stderr()), 'no thread aborted the process');
  } finally {
    await other.db.stop();
  }
});

test('the embedded database keeps its data across restarts; --seed-api-key prints the same key again', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'burrow-data-'));
  const run = async () => {
    const p = spawn(process.execPath, [MAIN, '--port', '0', '--host', '127.0.0.1', '--seed-api-key', '--workers', '1', '--data-dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const exited = new Promise<number | null>((r) => p.once('exit', (c) => r(c)));
    // Generous: an embedded database created from scratch on a loaded machine has taken over 30 s.
    await eventually(() => LISTENING_RE.test(out), 90_000, `embedded burrowd start: ${err.slice(-500)}`);
    const port = Number(LISTENING_RE.exec(out)![1]);
    return { key: out.split('\n')[0]!, url: `http://127.0.0.1:${port}`, stop: async () => (p.kill('SIGTERM'), withDeadline(exited, 20_000, 'stop')) };
  };
  try {
    const a = await run();
    const created = await api(a, 'POST', '/keys', { key: a.key, body: { name: 'survivor' } });
    assert.is(created.status, 201);
    assert.is(await a.stop(), 0);
    const b = await run();
    assert.is(b.key, a.key, 'the kept seed key is printed again');
    assert.is((await api(b, 'GET', '/me', { key: a.key })).status, 200, 'the seed key still works');
    assert.is((await api(b, 'GET', '/me', { key: created.body.key })).status, 200, 'a key created before the restart still works');
    assert.is(await b.stop(), 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
