import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser } from '../helpers/fixtures.js';
import { keyPrefixOf } from '../../src/auth/key-format.js';
import { F } from '../../src/protocol/frames.js';
import { rawPeer, refusalIn, type RawPeer } from '../tunnel/raw-peer.js';

// An admin manages another user's keys: List_user_keys, Get_user_key, Revoke_user_key
// (GET/DELETE /users/{id}/keys[/{key}]). The case they exist for: a member's key leaked.
// Deactivating the member is no answer (reactivation brings the leaked key back); revoking it
// is, and it ends that key's live control connections before the call answers, as Revoke_key.

let server: TestServer;
const peers: RawPeer[] = [];

test.before(async () => {
  server = await startServer({ workers: 2 });
});

test.after(async () => {
  for (const p of peers) p.ws.destroy();
  await server?.stop();
});

async function keyId(key: string): Promise<string> {
  const [r] = await server.sql<{ id: string }[]>`select id from api_keys where key_prefix = ${keyPrefixOf(key)!}`;
  return r!.id;
}

function assertProblem(r: { status: number; headers: Headers; body: { status: number; detail: string } }, status: number, detail: RegExp): void {
  assert.is(r.status, status, JSON.stringify(r.body));
  assert.is(r.headers.get('content-type'), 'application/problem+json');
  assert.is(r.body.status, status);
  assert.match(r.body.detail, detail);
}

test("List_user_keys and Get_user_key: the admin sees that user's keys (newest first, revoked left out of the list), no one else's", async () => {
  const u = await createUser(server);
  const older = await createKeyFor(server, u.id, { name: 'laptop' });
  await new Promise((r) => setTimeout(r, 5));
  const newer = await createKeyFor(server, u.id, { name: 'ci', scopes: ['tunnels'] });
  const gone = await createKeyFor(server, u.id, { name: 'old', revoked: true });
  const list = await api(server, 'GET', `/users/${u.id}/keys`, { key: server.adminKey });
  assert.is(list.status, 200, list.text);
  assert.equal(list.body.map((k: { name: string }) => k.name), ['ci', 'laptop']);
  assert.equal(list.body.map((k: { id: string }) => k.id), [await keyId(newer), await keyId(older)]);
  assert.not.ok(list.text.includes('key_hash'), 'no hash');
  const one = await api(server, 'GET', `/users/${u.id}/keys/${await keyId(newer)}`, { key: server.adminKey });
  assert.is(one.status, 200, one.text);
  assert.equal(one.body, list.body[0]);
  const revoked = await api(server, 'GET', `/users/${u.id}/keys/${await keyId(gone)}`, { key: server.adminKey });
  assert.is(revoked.status, 200);
  assert.ok(revoked.body.revoked_at, 'a revoked key is shown with revoked_at');
  // The admin's own key is not that user's.
  const adminKeyId = await keyId(server.adminKey);
  assertProblem(await api(server, 'GET', `/users/${u.id}/keys/${adminKeyId}`, { key: server.adminKey }), 404, /has no key/);
  assertProblem(await api(server, 'GET', '/users/00000000-0000-4000-8000-000000000000/keys', { key: server.adminKey }), 404, /no user/);
  assertProblem(await api(server, 'GET', `/users/${u.id}/keys/nope`, { key: server.adminKey }), 400, /"key" must be a UUID/);
});

test("Revoke_user_key: a member's leaked key stops at once, its control connections end before the answer, and reactivation does not bring it back", async () => {
  const u = await createUser(server);
  const leaked = await createKeyFor(server, u.id, { name: 'leaked' });
  const kept = await createKeyFor(server, u.id, { name: 'kept' });
  const events: string[] = [];
  const conns: RawPeer[] = [];
  for (let i = 0; i < 4; i++) {
    const p = await rawPeer(server.url, leaked, events, `lk${i}`);
    peers.push(p);
    assert.is((await p.open({ type: 'http', id: `leaked-${i}` }))[0], F.Opened);
    conns.push(p);
  }
  const survivor = await rawPeer(server.url, kept, events, 'kept');
  peers.push(survivor);
  assert.is((await survivor.open({ type: 'http', id: 'kept-one' }))[0], F.Opened);

  const r = await api(server, 'DELETE', `/users/${u.id}/keys/${await keyId(leaked)}`, { key: server.adminKey });
  events.push('api');
  assert.is(r.status, 200, r.text);
  assert.equal(r.body, {});
  const apiAt = events.indexOf('api');
  for (let i = 0; i < conns.length; i++) {
    assert.ok(events.indexOf(`lk${i}:fatal`) >= 0 && events.indexOf(`lk${i}:fatal`) < apiAt, `lk${i}: Fatal before the answer (${events.join(' ')})`);
    assert.ok(events.indexOf(`lk${i}:close`) >= 0 && events.indexOf(`lk${i}:close`) < apiAt, `lk${i}: closed before the answer`);
    assert.match(refusalIn(conns[i]!.frames.find((f) => f[0] === F.Fatal)!).message, /revoked/);
  }
  assert.not.ok(survivor.isClosed(), "the user's other key keeps its connection");
  assert.is((await api(server, 'GET', '/me', { key: leaked })).status, 401);
  assert.is((await api(server, 'GET', '/me', { key: kept })).status, 200);
  // Deactivate and reactivate: the revoked key stays revoked.
  assert.is((await api(server, 'POST', `/users/${u.id}/deactivate`, { key: server.adminKey })).status, 200);
  assert.is((await api(server, 'POST', `/users/${u.id}/reactivate`, { key: server.adminKey })).status, 200);
  assert.is((await api(server, 'GET', '/me', { key: leaked })).status, 401);
  assert.is((await api(server, 'GET', '/me', { key: kept })).status, 200);
  const list = await api(server, 'GET', `/users/${u.id}/keys`, { key: server.adminKey });
  assert.equal(list.body.map((k: { name: string }) => k.name), ['kept']);
  // Twice: nothing left to revoke.
  assertProblem(await api(server, 'DELETE', `/users/${u.id}/keys/${await keyId(leaked)}`, { key: server.adminKey }), 404, /has no active key/);
  // A key of another user under this user's path: 404, and it keeps working.
  const other = await createUser(server);
  const otherKey = await createKeyFor(server, other.id);
  assertProblem(await api(server, 'DELETE', `/users/${u.id}/keys/${await keyId(otherKey)}`, { key: server.adminKey }), 404, /has no active key/);
  assert.is((await api(server, 'GET', '/me', { key: otherKey })).status, 200);
});

test("a member may neither list nor revoke another user's keys (403, and the key keeps working)", async () => {
  const member = await createUser(server);
  const memberKey = await createKeyFor(server, member.id);
  const victim = await createUser(server);
  const victimKey = await createKeyFor(server, victim.id);
  const id = await keyId(victimKey);
  assertProblem(await api(server, 'GET', `/users/${victim.id}/keys`, { key: memberKey }), 403, /listing another user's keys needs the admin role/);
  assertProblem(await api(server, 'GET', `/users/${victim.id}/keys/${id}`, { key: memberKey }), 403, /admin role/);
  assertProblem(await api(server, 'DELETE', `/users/${victim.id}/keys/${id}`, { key: memberKey }), 403, /revoking another user's key needs the admin role/);
  // Not even their own keys through this path: the admin routes are the admins'.
  assertProblem(await api(server, 'GET', `/users/${member.id}/keys`, { key: memberKey }), 403, /admin role/);
  assert.is((await api(server, 'GET', '/me', { key: victimKey })).status, 200);
});

test.run();
