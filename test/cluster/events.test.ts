import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseClusterEvent } from '../../src/cluster/node.js';
import { LINK_TOKEN_WINDOW_MS, LinkTokens, linkToken } from '../../src/cluster/node-links.js';

// What a node accepts from the database's notifications and from another node's link, in-process.

const U = '6f1c2b9e-4d1a-4c3b-9e2f-0a1b2c3d4e5f';

test('notifications: each kind parsed with its fields; anything else is ignored, never thrown', () => {
  assert.equal(parseClusterEvent(JSON.stringify({ t: 'route', id: 'web' })), { t: 'route', id: 'web' });
  assert.equal(parseClusterEvent(JSON.stringify({ t: 'node', id: U, up: false })), { t: 'node', id: U, up: false });
  assert.equal(parseClusterEvent(JSON.stringify({ t: 'key', id: U })), { t: 'key', id: U });
  assert.equal(parseClusterEvent(JSON.stringify({ t: 'user', id: U, end: true })), { t: 'user', id: U, end: true });
  assert.equal(parseClusterEvent(JSON.stringify({ t: 'member', team: U, user: U })), { t: 'member', team: U, user: U });
  // A close names its id only: the reason is read from the rows, never taken from the payload.
  assert.equal(parseClusterEvent(JSON.stringify({ t: 'close', id: 'web', reason: '\x1b]0;pwned\x07' })), { t: 'close', id: 'web' });
  for (const bad of ['', 'null', '[]', '"route"', '{', JSON.stringify({ t: 'route' }), JSON.stringify({ t: 'route', id: 'x'.repeat(201) }), JSON.stringify({ t: 'key', id: 'not-a-uuid' }),
    JSON.stringify({ t: 'node', id: U, up: 'no' }), JSON.stringify({ t: 'user', id: U }), JSON.stringify({ t: 'member', team: U }), JSON.stringify({ t: 'nope' }), JSON.stringify(`{"t":"route","id":"web"}`)]) {
    assert.is(parseClusterEvent(bad), null, bad);
  }
});

test('link token: derived from the shared secret and a time window, compared whole; a window two back is refused', () => {
  let now = 5 * LINK_TOKEN_WINDOW_MS + 1_000;
  const tokens = new LinkTokens(Buffer.alloc(32, 7), () => now);
  const token = tokens.current();
  assert.is(token, new LinkTokens(Buffer.alloc(32, 7), () => now).current(), 'every node derives the same');
  assert.is.not(token, new LinkTokens(Buffer.alloc(32, 8), () => now).current());
  assert.is(token, linkToken(Buffer.alloc(32, 7), 5));
  assert.ok(tokens.authorized(`Bearer ${token}`));
  for (const bad of [undefined, '', token, `Bearer ${token.slice(0, -1)}`, `Bearer ${token}x`, `bearer ${token}`, `Bearer ${linkToken(Buffer.alloc(32, 8), 5)}`]) {
    assert.not.ok(tokens.authorized(bad), String(bad));
  }
  // A node whose clock is a window ahead or behind still links; a token seen two windows ago does not.
  assert.ok(tokens.authorized(`Bearer ${linkToken(Buffer.alloc(32, 7), 4)}`));
  assert.ok(tokens.authorized(`Bearer ${linkToken(Buffer.alloc(32, 7), 6)}`));
  now += 2 * LINK_TOKEN_WINDOW_MS;
  assert.is.not(tokens.current(), token, 'the token rotates');
  assert.not.ok(tokens.authorized(`Bearer ${token}`), 'a leaked token expires');
});

test.run();
