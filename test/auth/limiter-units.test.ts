import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FailureLimiter, WINDOW_MS, type Block } from '../../src/auth/failure-limiter.js';
import { FairQueue } from '../../src/workers/fair-queue.js';

// The limiter's and the fair queue's rules on their own, with the clock passed in.

function limiter(limit: number): { l: FailureLimiter; blocks: Block[] } {
  const blocks: Block[] = [];
  return { l: new FailureLimiter(limit, (b) => blocks.push(b)), blocks };
}

test('pending attempts count: the limit holds while verifications are in flight', () => {
  const { l } = limiter(3);
  for (let i = 0; i < 3; i++) assert.ok(l.admit('1.1.1.1', `bk_p${i}`, 0).admitted);
  const refused = l.admit('1.1.1.1', 'bk_p9', 0);
  assert.equal(refused, { admitted: false, kind: 'ip', retryAfterS: 1 });
  // A success frees its slot without counting a failure.
  l.settle('1.1.1.1', 'bk_p0', 'valid', 0);
  assert.ok(l.admit('1.1.1.1', 'bk_p9', 0).admitted);
});

test('limit reached: blocked for a full window from then, announced once, listed for new shards', () => {
  const { l, blocks } = limiter(2);
  for (const p of ['bk_a', 'bk_b']) {
    l.admit('2.2.2.2', p, 1_000);
    l.settle('2.2.2.2', p, 'invalid', 1_000);
  }
  assert.equal(blocks, [{ kind: 'ip', subject: '2.2.2.2', untilMs: 1_000 + WINDOW_MS }]);
  l.fail('2.2.2.2', 2_000);
  l.fail('2.2.2.2', 3_000);
  assert.is(blocks.length, 1);
  assert.equal(l.admit('2.2.2.2', 'bk_c', 31_000), { admitted: false, kind: 'ip', retryAfterS: 30 });
  assert.equal(l.blocks(31_000).filter((b) => b.kind === 'ip'), [{ kind: 'ip', subject: '2.2.2.2', untilMs: 1_000 + WINDOW_MS }]);
  // Block over: a fresh window.
  assert.ok(l.admit('2.2.2.2', 'bk_c', 1_000 + WINDOW_MS).admitted);
  assert.equal(l.blocks(1_000 + WINDOW_MS), []);
});

test('a prefix guessed from many addresses is blocked; addresses it succeeded from are still admitted', () => {
  const { l, blocks } = limiter(3);
  l.admit('9.9.9.9', 'bk_owner', 0);
  l.settle('9.9.9.9', 'bk_owner', 'valid', 0);
  for (let i = 0; i < 3; i++) {
    assert.ok(l.admit(`10.0.0.${i}`, 'bk_owner', 10).admitted);
    l.settle(`10.0.0.${i}`, 'bk_owner', 'invalid', 10);
  }
  assert.equal(blocks, [{ kind: 'prefix', subject: 'bk_owner', untilMs: 10 + WINDOW_MS }]);
  assert.equal(l.admit('10.0.0.99', 'bk_owner', 20), { admitted: false, kind: 'prefix', retryAfterS: 60 });
  assert.ok(l.admit('9.9.9.9', 'bk_owner', 20).admitted, 'the owner\'s address');
  // A wrong secret from that address takes its trust away.
  l.settle('9.9.9.9', 'bk_owner', 'invalid', 20);
  assert.is(l.admit('9.9.9.9', 'bk_owner', 20).admitted, false);
});

test('an attempt never verified (pool overloaded) counts neither way', () => {
  const { l, blocks } = limiter(1);
  assert.ok(l.admit('3.3.3.3', 'bk_x', 0).admitted);
  l.settle('3.3.3.3', 'bk_x', 'none', 0);
  assert.ok(l.admit('3.3.3.3', 'bk_x', 0).admitted);
  assert.equal(blocks, []);
});

test('fair queue: lanes served in turn; when full the longest lane gives up its newest job', () => {
  const q = new FairQueue<string>(5);
  for (const j of ['a1', 'a2', 'a3', 'a4']) assert.is(q.push('a', j), null);
  assert.is(q.push('b', 'b1'), null);
  // Full: b's new job pushes out a's newest; a's own new job is refused.
  assert.is(q.push('b', 'b2'), 'a4');
  assert.is(q.push('a', 'a5'), 'a5');
  const order: string[] = [];
  for (let j = q.shift(); j !== null; j = q.shift()) order.push(j);
  assert.equal(order, ['a1', 'b1', 'a2', 'b2', 'a3']);
  assert.is(q.length, 0);
});

test.run();
