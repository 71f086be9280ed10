import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Agent, fetch } from 'undici';
import { startServer, type TestServer } from '../helpers/server.js';
import { newPkce } from '../browser/fixtures/flow.js';
import { MAX_PENDING_LOGINS_PER_ADDRESS } from '../../src/auth/oauth/pending.js';
import { addressGroup } from '../../src/protocol/cidr.js';

// Unauthenticated GET /auth/v1/<provider>/authorize from one address filled
// the server-wide table of pending logins, and every user got 503 for ten minutes. Logins in
// progress are now also bounded per client address (IPv6: per /64).

let t: TestServer;
const agents: Agent[] = [];

test.before(async () => {
  t = await startServer({ args: ['--base-url', 'http://127.0.0.1:9', '--github-client-id', 'Iv1.flood', '--github-client-secret', 'x'] });
});

test.after(async () => {
  await Promise.all(agents.map((a) => a.close()));
  await t?.stop();
});

function from(localAddress: string, connections = 8) {
  const agent = new Agent({ localAddress, connections });
  agents.push(agent);
  return async () => {
    const res = await fetch(`${t.url}/auth/v1/github/authorize?port=5000&code_challenge=${newPkce().challenge}`, { redirect: 'manual', dispatcher: agent });
    await res.text();
    return res.status;
  };
}

test('one address may have a bounded number of logins in progress; others still start theirs', async () => {
  const flood = from('127.0.0.2');
  const statuses: number[] = [];
  for (let i = 0; i < MAX_PENDING_LOGINS_PER_ADDRESS + 5; i++) statuses.push(await flood());
  assert.equal(statuses.slice(0, MAX_PENDING_LOGINS_PER_ADDRESS), Array(MAX_PENDING_LOGINS_PER_ADDRESS).fill(302));
  assert.equal(statuses.slice(MAX_PENDING_LOGINS_PER_ADDRESS), Array(5).fill(429));
  assert.is(await from('127.0.0.3')(), 302, 'another client still logs in');
});

test('40 logins started at once from one address leave exactly the bound pending (the check and the insert are one decision)', async () => {
  const flood = from('127.0.0.4', 40);
  const statuses = await Promise.all(Array.from({ length: 40 }, () => flood()));
  const [pending] = await t.sql<{ n: number }[]>`select count(*)::int as n from oauth_pending_logins where client_group = '127.0.0.4'`;
  assert.is(pending!.n, MAX_PENDING_LOGINS_PER_ADDRESS, `pending logins from one address: ${pending!.n}`);
  assert.is(statuses.filter((s) => s === 302).length, MAX_PENDING_LOGINS_PER_ADDRESS, statuses.join(' '));
  assert.is(statuses.filter((s) => s === 429).length, 40 - MAX_PENDING_LOGINS_PER_ADDRESS, statuses.join(' '));
});

test('address groups: IPv4 itself, IPv4-mapped as IPv4, IPv6 by /64', () => {
  assert.is(addressGroup('203.0.113.7'), '203.0.113.7');
  assert.is(addressGroup('::ffff:203.0.113.7'), '203.0.113.7');
  assert.is(addressGroup('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64');
  assert.is(addressGroup('2001:db8:1:2:ffff:ffff:ffff:ffff'), '2001:db8:1:2::/64');
  assert.is(addressGroup('2001:db8::1'), '2001:db8:0:0::/64');
  assert.is(addressGroup('2001:0DB8:0001:0002::'), '2001:db8:1:2::/64');
  assert.is(addressGroup('::1'), '0:0:0:0::/64');
});

test.run();
