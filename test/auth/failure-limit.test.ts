import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser, eventually } from '../helpers/fixtures.js';
import { generateKey } from '../../src/auth/key-format.js';
import { callFrom, closeAgents, verificationsIn, type Answer } from './source-address.js';

// The failed-authentication limit (--auth-failure-limit 10 here) counts an attempt while it is
// still being verified, per client IP and per key prefix, and main keeps the blocks, so a
// restarted shard applies them too. Nothing here is timed: we count answers and argon2 runs.

// Small: the admitted guesses are verified one after another, on a machine that may be busy.
const LIMIT = 10;
let server: TestServer;

test.before(async () => {
  server = await startServer({ args: ['--auth-failure-limit', String(LIMIT), '--fault-injection', '--log-level', 'debug'] });
});

test.after(async () => {
  await closeAgents();
  await server?.stop();
});

/**
 * Only 401, 429, and 503 "overloaded" (a verification that waited over 10 s for the pool, which
 * happens only on a heavily loaded machine; it counts neither way) are acceptable answers.
 */
function assertOnlyLimitAnswers(answers: Answer[]): void {
  for (const a of answers) {
    const ok = a.status === 401 || a.status === 429 || (a.status === 503 && a.detail.includes('overloaded'));
    assert.ok(ok, `unexpected answer ${a.status}: ${a.detail}`);
  }
}

function tally(answers: Answer[]): Record<number, number> {
  const t: Record<number, number> = {};
  for (const a of answers) t[a.status] = (t[a.status] ?? 0) + 1;
  return t;
}

/** A wrong secret for `key`'s prefix. */
function wrongSecretFor(key: string): string {
  const { key: other } = generateKey();
  return key.slice(0, 16) + other.slice(16);
}

test('400 concurrent unknown keys from one IP: 429 past the limit, a second IP served meanwhile', async () => {
  const user = await createUser(server);
  const key = await createKeyFor(server, user.id); // never used before: not cached anywhere
  const before = verificationsIn(server.stderr());
  const flood = Promise.all(Array.from({ length: 400 }, () => callFrom(server.url, '127.0.0.2', `Bearer ${generateKey().key}`, 60_000)));
  const other = await callFrom(server.url, '127.0.0.3', `Bearer ${key}`, 60_000);
  const answers = await flood;
  assert.is(other.status, 200, `the other IP's valid key: ${other.detail}`);
  const t = tally(answers);
  assertOnlyLimitAnswers(answers);
  assert.ok(t[401]! <= LIMIT, `at most ${LIMIT} verified failures, got ${JSON.stringify(t)}`);
  assert.ok(t[429]! >= 400 - 2 * LIMIT, `the rest refused, got ${JSON.stringify(t)}`);
  for (const a of answers.filter((x) => x.status === 429)) assert.ok(Number(a.retryAfter) >= 1, `429 carries Retry-After (${a.retryAfter})`);
  // Every unknown key that got a 401 cost one verification (no more), plus the other IP's one.
  await eventually(() => verificationsIn(server.stderr()) - before >= t[401]! + 1, 5_000, 'verifications logged');
  assert.ok(verificationsIn(server.stderr()) - before <= LIMIT + 1, `argon2 runs: ${verificationsIn(server.stderr()) - before}`);
  // The block holds afterwards, even for a request without any key.
  await eventually(async () => (await callFrom(server.url, '127.0.0.2', undefined)).status === 429, 10_000, '127.0.0.2 blocked');
});

test('a prefix attacked from many addresses is blocked; its owner keeps working', async () => {
  const user = await createUser(server);
  const key = await createKeyFor(server, user.id);
  // The owner authenticated from its usual address before the attack.
  assert.is((await callFrom(server.url, '127.0.1.1', `Bearer ${key}`)).status, 200);
  const before = verificationsIn(server.stderr());
  // 100 wrong secrets for this prefix, 2 from each of 50 addresses: no address nears the limit.
  const answers = await Promise.all(
    Array.from({ length: 100 }, (_, i) => callFrom(server.url, `127.0.2.${1 + (i % 50)}`, `Bearer ${wrongSecretFor(key)}`, 60_000)),
  );
  const t = tally(answers);
  assertOnlyLimitAnswers(answers);
  assert.ok(t[401]! <= LIMIT, `at most ${LIMIT} verified failures for the prefix, got ${JSON.stringify(t)}`);
  assert.ok(t[429]! >= 100 - 2 * LIMIT, `the rest refused, got ${JSON.stringify(t)}`);
  await eventually(() => verificationsIn(server.stderr()) - before >= t[401]!, 5_000, 'verifications logged');
  assert.ok(verificationsIn(server.stderr()) - before <= LIMIT, `argon2 runs: ${verificationsIn(server.stderr()) - before}`);
  // A fresh address guessing the same prefix is refused without a verification.
  const fresh = await callFrom(server.url, '127.0.3.1', `Bearer ${wrongSecretFor(key)}`);
  assert.is(fresh.status, 429, fresh.detail);
  assert.ok(Number(fresh.retryAfter) >= 1);
  // The owner, from the address it used before, is still served (cached, or trusted there).
  for (let i = 0; i < 4; i++) assert.is((await callFrom(server.url, '127.0.1.1', `Bearer ${key}`)).status, 200);
});

test('a restarted shard applies the blocks main holds', async () => {
  // Block 127.0.0.9 with requests that carry no key (no verification needed).
  for (let i = 0; i < LIMIT; i++) assert.is((await callFrom(server.url, '127.0.0.9', undefined)).status, 401);
  await eventually(async () => (await callFrom(server.url, '127.0.0.9', undefined)).status === 429, 10_000, '127.0.0.9 blocked');
  // Crash shards until both have restarted.
  const crashed = new Set<string>();
  for (let i = 0; i < 40 && crashed.size < 2; i++) {
    const r = await fetch(`${server.url}/__fault/crash-shard`, { method: 'POST' }).catch(() => null);
    if (r?.status === 202) crashed.add(await r.text());
    await new Promise((r) => setTimeout(r, 300));
  }
  assert.is(crashed.size, 2, 'both shards crashed');
  await eventually(async () => (await fetch(`${server.url}/readyz`)).status === 200, 20_000, 'shards back');
  // Several connections: the kernel spreads them over both (restarted) shards.
  const answers = await Promise.all(Array.from({ length: 8 }, () => callFrom(server.url, '127.0.0.9', undefined)));
  assert.equal(tally(answers), { 429: 8 }, JSON.stringify(answers));
});

test.run();
