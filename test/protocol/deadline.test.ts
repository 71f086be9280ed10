import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Deadline } from '../../src/protocol/deadline.js';

test('a deadline fires once, not before it is due, however often it was pushed back', async () => {
  const fired: number[] = [];
  const d = new Deadline(() => fired.push(performance.now()));
  const t0 = performance.now();
  d.set(300);
  for (let i = 0; i < 5; i++) {
    await sleep(20);
    d.set(300); // pushed back: due 300 ms after the last set
  }
  const lastSet = performance.now();
  assert.is(fired.length, 0, 'pushed back: not fired');
  assert.ok(d.on);
  await sleep(450);
  assert.is(fired.length, 1);
  assert.ok(fired[0]! >= lastSet + 299, `fired ${(fired[0]! - lastSet).toFixed(1)} ms after the last set, due 300`);
  assert.ok(fired[0]! > t0 + 390);
  assert.not.ok(d.on);
});

test('a cleared deadline does not fire; a shorter one set after a longer fires at its own time', async () => {
  let fired = 0;
  const d = new Deadline(() => fired++);
  d.set(30);
  d.clear();
  await sleep(80);
  assert.is(fired, 0);
  d.set(10_000);
  const t = performance.now();
  d.set(30);
  await sleep(120);
  assert.is(fired, 1, 'the armed 10 s timer did not hold back the 30 ms deadline');
  assert.ok(performance.now() - t < 5_000);
  d.set(20);
  d.stop();
  await sleep(60);
  assert.is(fired, 1, 'stopped');
});

test.run();
