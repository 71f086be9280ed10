import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { generateKey } from '../../src/auth/key-format.js';
import { callFrom, closeAgents } from './source-address.js';

// argon2 capacity is shared fairly between client addresses: a burst of wrong keys from one
// address (under the failed-auth limit here) does not stand in front of another address's
// key. Not timed: we count how many of the burst's answers arrive before the other one's.

const BURST = 300;
let server: TestServer;

test.before(async () => {
  server = await startServer({ args: ['--auth-failure-limit', '1000'] });
});

test.after(async () => {
  await closeAgents();
  await server?.stop();
});

test('a burst of wrong secrets from one IP does not queue ahead of another IP\'s uncached key', async () => {
  const user = await createUser(server);
  const key = await createKeyFor(server, user.id);
  let answeredBefore = -1;
  let answered = 0;
  const statuses: number[] = [];
  const burst = Array.from({ length: BURST }, () =>
    callFrom(server.url, '127.0.5.1', `Bearer ${key.slice(0, 16)}${generateKey().key.slice(16)}`, 90_000).then((a) => {
      answered++;
      statuses.push(a.status);
    }),
  );
  // Let the burst reach the queue first.
  while (answered === 0) await new Promise((r) => setTimeout(r, 5));
  const own = await callFrom(server.url, '127.0.5.2', `Bearer ${key}`, 90_000);
  answeredBefore = answered;
  await Promise.all(burst);
  assert.is(own.status, 200, own.detail);
  assert.ok(statuses.every((s) => s === 401 || s === 503), JSON.stringify(statuses.filter((s) => s !== 401 && s !== 503)));
  // FIFO would put it behind most of the burst; a fair queue serves it within a few jobs
  // (plus what finished while its row was read).
  assert.ok(answeredBefore < BURST / 3, `${answeredBefore} of ${BURST} burst answers came first`);
  console.log(`burst answers before the other IP's: ${answeredBefore}; burst statuses 401=${statuses.filter((s) => s === 401).length} 503=${statuses.filter((s) => s === 503).length}`);
});

test.run();
