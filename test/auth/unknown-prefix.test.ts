import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser, eventually } from '../helpers/fixtures.js';
import { generateKey } from '../../src/auth/key-format.js';
import { callFrom, closeAgents, verificationsIn } from './source-address.js';

// Every uncached key costs exactly one argon2 verification, whether its prefix exists or not
// (unknown, revoked, expired and deactivated keys are verified against a dummy hash), so the
// time an answer takes does not tell which prefixes exist. We count verifications, not time.

let server: TestServer;

test.before(async () => {
  server = await startServer({ args: ['--log-level', 'debug'] });
});

test.after(async () => {
  await closeAgents();
  await server?.stop();
});

/** The verifications one request from a fresh address causes, and its status. */
async function cost(key: string, from: string): Promise<{ status: number; verifications: number }> {
  const before = verificationsIn(server.stderr());
  const { status } = await callFrom(server.url, from, `Bearer ${key}`);
  // The log line is written when the verification ends, before the answer: poll briefly anyway.
  await eventually(() => verificationsIn(server.stderr()) > before || status === 200, 5_000, 'verification logged').catch(() => undefined);
  return { status, verifications: verificationsIn(server.stderr()) - before };
}

test('unknown prefix, revoked, expired, deactivated, wrong secret and valid key: one verification each', async () => {
  const user = await createUser(server);
  const gone = await createUser(server, { deactivated: true });
  const valid = await createKeyFor(server, user.id);
  const cases: [string, string, number][] = [
    ['unknown prefix', generateKey().key, 401],
    ['revoked', await createKeyFor(server, user.id, { revoked: true }), 401],
    ['expired', await createKeyFor(server, user.id, { expiresAt: new Date(Date.now() - 1000) }), 401],
    ['deactivated user', await createKeyFor(server, gone.id), 401],
    ['known prefix, wrong secret', valid.slice(0, 16) + generateKey().key.slice(16), 401],
    ['valid', valid, 200],
  ];
  let n = 0;
  for (const [what, key, status] of cases) {
    const c = await cost(key, `127.0.4.${++n}`);
    assert.is(c.status, status, what);
    assert.is(c.verifications, 1, `${what}: argon2 verifications`);
  }
});

test.run();
