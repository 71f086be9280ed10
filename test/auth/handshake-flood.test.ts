import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect } from 'node:net';
import { randomBytes } from 'node:crypto';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { generateKey } from '../../src/auth/key-format.js';

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

/** One raw control handshake from `from`: the status of its answer (0: none within `ms`, -1: the connection failed). */
function handshake(from: string, key: string, ms = 10_000): Promise<number> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port: server.port, localAddress: from });
    let head = '';
    const done = (status: number): void => {
      clearTimeout(timer);
      s.destroy();
      resolve(status);
    };
    const timer = setTimeout(() => done(0), ms);
    s.setEncoding('latin1');
    s.on('connect', () =>
      s.write(
        `GET /tunnel/v1/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nAuthorization: Bearer ${key}\r\n\r\n`,
      ),
    );
    s.on('data', (d: string) => {
      head += d;
      const m = /^HTTP\/1\.1 (\d{3}) /.exec(head);
      if (m) done(Number(m[1]));
    });
    s.on('error', () => done(-1));
    s.on('close', () => done(-1));
  });
}

test('random-key handshakes from 300 addresses reach 429, and never-used keys connect within 2 s', async () => {
  // The 300 addresses' answers and the heavy one's apart: the heavy one met 429 before too (its
  // 64 verifications at once reach the limit), the 300 with one each never did.
  const statuses = new Map<number, number>();
  const heavy = new Map<number, number>();
  let stop = false;
  const flood = async (from: string, tally: Map<number, number>): Promise<void> => {
    while (!stop) {
      const status = await handshake(from, generateKey().key);
      tally.set(status, (tally.get(status) ?? 0) + 1);
    }
  };
  const loops = [
    ...Array.from({ length: ADDRESSES }, (_, i) => flood(`127.0.${1 + Math.floor(i / 200)}.${1 + (i % 200)}`, statuses)),
    ...Array.from({ length: HEAVY }, () => flood('127.0.5.5', heavy)),
  ];
  const user = await createUser(server);
  const keys = await Promise.all([1, 2, 3].map(() => createKeyFor(server, user.id, { scopes: ['tunnels'] })));
  const own: { status: number; ms: number }[] = [];
  const t0 = performance.now();
  try {
    // The flood is under way: the gate sheds.
    while ((statuses.get(503) ?? 0) < 200 && performance.now() - t0 < 30_000) await new Promise((r) => setTimeout(r, 20));
    assert.ok((statuses.get(503) ?? 0) >= 200, `the flood is shed: ${JSON.stringify(Object.fromEntries(statuses))}`);
    // Each key's first handshake, from an address of its own, as a new client's would be.
    for (const [i, key] of keys.entries()) {
      const t1 = performance.now();
      const status = await handshake(`127.0.9.${i + 1}`, key, 10_000);
      own.push({ status, ms: Math.round(performance.now() - t1) });
    }
    // The flood goes on until it meets 429 (its sheds count against its addresses), 20 s at most.
    while ((statuses.get(429) ?? 0) === 0 && performance.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 50));
  } finally {
    stop = true;
    await Promise.all(loops);
  }
  const seen = `${JSON.stringify(Object.fromEntries(statuses))} (the heavy address: ${JSON.stringify(Object.fromEntries(heavy))})`;
  const mine = own.map((o) => `${o.status} in ${o.ms} ms`).join(', ');
  console.log(`flood answers ${seen} in ${Math.round(performance.now() - t0)} ms; the never-used keys: ${mine}`);
  // Each at its first try: a real key is never shed for the guesses' sake.
  for (const o of own) assert.is(o.status, 101, `the never-used keys were answered ${mine} (flood: ${seen})`);
  // 0.4-1.2 s measured with both cores taken by the flood; the median, as other engineers' tests
  // share these two cores (load average 18 seen).
  const median = own.map((o) => o.ms).sort((a, b) => a - b)[1]!;
  assert.ok(median < 2_000, `they connected after ${mine}`);
  assert.ok((statuses.get(429) ?? 0) > 0, `the 300 addresses met 429: ${seen}`);
  assert.not.ok(statuses.has(-1) || heavy.has(-1), `no connection failed: ${seen}`);
});

test.run();
