import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { IdHolds } from '../../src/actors/id-holds.js';
import { sleep } from '../tunnel/helpers.js';

// IdHolds, the --id-grace holds of the RegistryActor: what a user may hold and for how long
// (the registry and tunnel tests attack it through Opens; here what they cannot see: memory).

const limits = { graceMs: 60_000, minLifetimeMs: 1_000, maxPerUser: 2 };

test('expired holds are swept from memory on the timer, with no lookup', async () => {
  const holds = new IdHolds({ ...limits, graceMs: 30 });
  for (let i = 0; i < 50; i++) holds.ended(`sweep-${i}`, `user-${i % 5}`, Date.now() - 5_000);
  assert.is(holds.size, 10, 'at most 2 per user');
  holds.start(10);
  try {
    await sleep(150);
    assert.is(holds.size, 0);
  } finally {
    holds.stop();
  }
});

test('the cap keeps each user’s most recent holds; holding an id again makes it the newest', () => {
  const holds = new IdHolds(limits);
  const since = Date.now() - 5_000;
  holds.ended('a', 'u', since);
  holds.ended('b', 'u', since);
  holds.ended('a', 'u', since);
  holds.ended('c', 'u', since);
  holds.ended('x', 'other', since);
  assert.equal(['a', 'b', 'c', 'x'].map((id) => holds.get(id)?.userId ?? null), ['u', null, 'u', 'other']);
});

test('an id used less than the minimum lifetime is not held; a hold carries its start', () => {
  const holds = new IdHolds(limits);
  holds.ended('young', 'u', Date.now() - 10);
  assert.not.ok(holds.has('young'));
  const since = Date.now() - 5_000;
  holds.ended('old', 'u', since);
  assert.is(holds.heldSince('old', 'u'), since);
  assert.is(holds.heldSince('old', 'someone-else'), null);
});

test.run();
