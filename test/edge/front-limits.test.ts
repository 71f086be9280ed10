import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ConnectionLimits, openFileLimit, shardFdBudget } from '../../src/edge/front-limits.js';
import { CidrSet } from '../../src/protocol/cidr.js';

// The public port's connection counts in-process (the attacks on a real burrowd are in
// connection-limits.test.ts): descriptor budget and reserve, address groups, exemptions.

test('the open-file limit is read from /proc on Linux, and a shard gets its share of three quarters of it', () => {
  if (process.platform === 'linux') assert.ok((openFileLimit() ?? 0) >= 64, `limit ${openFileLimit()}`);
  assert.is(shardFdBudget(null, 2, 1000), 375);
  assert.is(shardFdBudget(900, 3, 1000), 300, 'the flag wins');
  assert.is(shardFdBudget(null, 1, null), 3072, 'unreadable: a 4096 default');
});

test('descriptors: open, then the reserve (the last tenth), then full; API relays hold two more', () => {
  const limits = new ConnectionLimits({ perGroup: 1000, fdBudget: 20, exempt: new CidrSet([]) });
  const seen = Array.from({ length: 21 }, () => limits.admitSocket());
  assert.equal(seen, [...Array<string>(18).fill('open'), 'reserve', 'reserve', 'full']);
  limits.releaseSocket();
  limits.releaseSocket();
  assert.is(limits.admitSocket(), 'reserve');
  limits.holdFds(2);
  assert.is(limits.admitSocket(), 'full', 'an API relay took the last two');
  limits.releaseFds(2);
  assert.is(limits.descriptors, 19);
});

test('address groups: an IPv4 address, an IPv6 /64, mapped IPv4 as IPv4; trusted proxies exempt; entries go at zero', () => {
  const limits = new ConnectionLimits({ perGroup: 2, fdBudget: 1000, exempt: new CidrSet([{ address: '10.0.0.0', prefix: 8, family: 'ipv4' }]) });
  const a = limits.admitPeer('192.0.2.1');
  assert.is(a, '192.0.2.1');
  assert.is(limits.admitPeer('::ffff:192.0.2.1'), '192.0.2.1');
  assert.is(limits.admitPeer('192.0.2.1'), false);
  assert.ok(limits.admitPeer('192.0.2.2'), 'another address');
  assert.ok(limits.admitPeer('2001:db8:1:2::1'));
  assert.ok(limits.admitPeer('2001:db8:1:2:ffff::9'));
  assert.is(limits.admitPeer('2001:db8:1:2::abcd'), false, 'the same /64');
  assert.ok(limits.admitPeer('2001:db8:1:3::1'), 'the next /64');
  for (let i = 0; i < 10; i++) assert.is(limits.admitPeer('10.1.2.3'), null, 'a --trust-proxy peer is not counted');
  limits.releasePeer(a as string);
  assert.is(limits.admitPeer('192.0.2.1'), '192.0.2.1', 'a slot freed');
  assert.is(limits.groups, 4);
  for (const g of ['192.0.2.1', '192.0.2.1', '192.0.2.2', '2001:db8:1:2::/64', '2001:db8:1:2::/64', '2001:db8:1:3::/64']) limits.releasePeer(g);
  assert.is(limits.groups, 0, 'no entry left behind');
});

test.run();
