import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser } from '../helpers/fixtures.js';

// A key expiring in 2 minutes minted one with no expiry. A created key now
// never outlives the key that created it, unless that key has no expiry itself.

let t: TestServer;

test.before(async () => {
  t = await startServer();
});

test.after(async () => {
  await t?.stop();
});

const soon = () => new Date(Math.floor(Date.now() / 1000) * 1000 + 120_000);

test('a short-lived key creates keys that end when it does: no expiry and later expiries are capped', async () => {
  const u = await createUser(t);
  const ends = soon();
  const short = await createKeyFor(t, u.id, { expiresAt: ends });
  const forever = await api(t, 'POST', '/keys', { key: short, body: { name: 'forever' } });
  assert.is(forever.status, 201, forever.text);
  assert.is(forever.body.info.expires_at, ends.toISOString());
  const later = await api(t, 'POST', '/keys', { key: short, body: { name: 'later', expires_at: '2099-01-01T00:00:00Z' } });
  assert.is(later.body.info.expires_at, ends.toISOString());
  const earlier = new Date(ends.getTime() - 60_000).toISOString();
  const sooner = await api(t, 'POST', '/keys', { key: short, body: { name: 'sooner', expires_at: earlier } });
  assert.is(sooner.body.info.expires_at, earlier, 'an earlier expiry is kept');
  // What the listing (and the database) says, not only the answer.
  const [row] = await t.sql<{ expires_at: Date }[]>`select expires_at from api_keys where id = ${forever.body.info.id}`;
  assert.is(row!.expires_at.toISOString(), ends.toISOString());
});

test('an admin with a short-lived key is capped too; keys without expiry create keys without expiry', async () => {
  const admin = await createUser(t, { role: 'admin' });
  const member = await createUser(t);
  const ends = soon();
  const adminShort = await createKeyFor(t, admin.id, { expiresAt: ends });
  const forMember = await api(t, 'POST', `/users/${member.id}/keys`, { key: adminShort, body: { name: 'given' } });
  assert.is(forMember.status, 201, forMember.text);
  assert.is(forMember.body.info.expires_at, ends.toISOString());

  const adminForever = await createKeyFor(t, admin.id);
  const unbounded = await api(t, 'POST', `/users/${member.id}/keys`, { key: adminForever, body: { name: 'given-forever' } });
  assert.is(unbounded.body.info.expires_at, null);
  const memberForever = await createKeyFor(t, member.id);
  assert.is((await api(t, 'POST', '/keys', { key: memberForever, body: { name: 'own' } })).body.info.expires_at, null);
});

test.run();
