import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { VisitorLimit } from '../../src/edge/visitor-limit.js';

// The per-visitor concurrency bound counts an IPv6 visitor by its /64 (one host can take any
// address of its /64), an IPv4 visitor by its address, and gives a count back when a request ends.

test('IPv6 visitors share one count per /64; another /64 and IPv4 addresses have their own', () => {
  const limit = new VisitorLimit(2);
  assert.ok(limit.admit('2001:db8:1:2::1'));
  assert.ok(limit.admit('2001:db8:1:2:ffff::9'));
  assert.not.ok(limit.admit('2001:db8:1:2::abcd'), 'a third address of the same /64');
  assert.ok(limit.admit('2001:db8:1:3::1'), 'the next /64');
  assert.ok(limit.admit('192.0.2.1'));
  assert.ok(limit.admit('192.0.2.1'));
  assert.not.ok(limit.admit('192.0.2.1'));
  assert.ok(limit.admit('192.0.2.2'));
});

test('a finished request gives its /64 a count back', () => {
  const limit = new VisitorLimit(1);
  const key = limit.admit('2001:db8::1');
  assert.ok(key);
  const visitor = { ended: false, heldBy: null as VisitorLimit | null, heldKey: '' };
  limit.hold(visitor, key!);
  assert.not.ok(limit.admit('2001:db8::2'));
  // the visitor finishes: it gives its count back (TunnelVisitor.finish)
  visitor.heldBy!.release(visitor.heldKey);
  assert.ok(limit.admit('2001:db8::2'));
  assert.is(limit.inflight, 1);
  // one already over when held gives it back at once
  const done = { ended: true, heldBy: null as VisitorLimit | null, heldKey: '' };
  const k2 = limit.admit('192.0.2.9');
  limit.hold(done, k2!);
  assert.is(done.heldBy, null);
  assert.is(limit.inflight, 1);
});

test.run();
