import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Agent, request } from 'undici';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';

// API keys (List_keys, Create_key, Revoke_key): shapes, the key rules,
// and that a revoked or expired key stops working on every shard at once.

const KEY_FIELDS = ['created_at', 'expires_at', 'id', 'key_prefix', 'name', 'revoked_at', 'scopes'];
const ISO_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const KEY = /^bk_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}$/;
/** Enough fresh connections that both shards serve some (the kernel picks one per connection). */
const FRESH_CONNECTIONS = 10;

let t: TestServer;
let n = 0;
const fieldsOf = (o: object) => Object.keys(o).sort();
const uniqueName = (what: string) => `${what}-${++n}`;

/** One request on a connection of its own, so the kernel may hand it to either shard. */
async function freshStatus(key: string, path = '/api/v1/me'): Promise<number> {
  const agent = new Agent({ connections: 1, pipelining: 0 });
  try {
    const res = await withDeadline(request(t.url + path, { dispatcher: agent, headers: { authorization: `Bearer ${key}` } }), 5_000, `GET ${path}`);
    await res.body.dump();
    return res.statusCode;
  } finally {
    await agent.close();
  }
}

async function freshStatuses(key: string, path?: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < FRESH_CONNECTIONS; i++) out.push(await freshStatus(key, path));
  return out;
}

const all = (status: number) => Array<number>(FRESH_CONNECTIONS).fill(status);

/** A member with a key of their own (both scopes unless told). */
async function member(scopes?: string[]) {
  const u = await createUser(t);
  return { id: u.id, key: await createKeyFor(t, u.id, { scopes }) };
}

function assertApiKey(k: Record<string, unknown>, what: string) {
  assert.equal(fieldsOf(k), KEY_FIELDS, `${what}: ApiKey fields`);
  assert.match(k.id as string, UUID, `${what}: id`);
  assert.match(k.key_prefix as string, /^bk_[0-9A-Za-z]{12}$/, `${what}: key_prefix`);
  assert.match(k.created_at as string, ISO_Z, `${what}: created_at`);
  if (k.expires_at !== null) assert.match(k.expires_at as string, ISO_Z, `${what}: expires_at`);
  assert.ok(Array.isArray(k.scopes), `${what}: scopes is an array`);
}

test.before(async () => {
  // Several tests count on 401s; the failed-auth limit (429) is another suite's subject.
  t = await startServer({ args: ['--auth-failure-limit', '100000'] });
});

test.after(async () => {
  await t?.stop();
});

test('Create_key: 201 with {info, key}; every ApiKey field present, nulls not omitted', async () => {
  const before = Date.now();
  const res = await api(t, 'POST', '/keys', { key: t.adminKey, body: { name: 'laptop' } });
  assert.is(res.status, 201, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.equal(fieldsOf(res.body), ['info', 'key']);
  const { info, key } = res.body;
  assertApiKey(info, 'created');
  assert.is(info.name, 'laptop');
  assert.is(info.expires_at, null);
  assert.is(info.revoked_at, null);
  assert.equal([...info.scopes].sort(), ['management', 'tunnels'], 'default scopes are both');
  const created = Date.parse(info.created_at);
  assert.ok(created >= before - 5_000 && created <= Date.now() + 5_000, `created_at ${info.created_at} is now`);
  assert.match(key, KEY);
  assert.ok(key.startsWith(`${info.key_prefix}_`), `${key} starts with its key_prefix ${info.key_prefix}`);
});

test('Create_key: the plaintext works at once and belongs to the caller; it is never shown again nor stored', async () => {
  const me = await api(t, 'GET', '/me', { key: t.adminKey });
  const res = await api(t, 'POST', '/keys', { key: t.adminKey, body: { name: uniqueName('works') } });
  assert.is(res.status, 201);
  const { info, key } = res.body;
  const viaNew = await api(t, 'GET', '/me', { key });
  assert.is(viaNew.status, 200, viaNew.text);
  assert.is(viaNew.body.id, me.body.id);
  // Both scopes: the new key can manage too.
  assert.is((await api(t, 'GET', '/keys', { key })).status, 200);
  const secret = key.slice(info.key_prefix.length + 1);
  const list = await api(t, 'GET', '/keys', { key: t.adminKey });
  assert.ok(!list.text.includes(secret), 'the secret part never appears in a listing');
  const listed = list.body.find((k: { id: string }) => k.id === info.id);
  assert.equal(listed, info, 'the listing shows the same info as creation');
  const [row] = await t.sql<{ key_hash: string }[]>`select key_hash from api_keys where id = ${info.id}`;
  assert.match(row!.key_hash, /^\$argon2id\$/);
  assert.ok(!row!.key_hash.includes(secret));
});

test('Create_key: expires_at is kept as the same instant, answered in UTC with Z', async () => {
  const res = await api(t, 'POST', '/keys', { key: t.adminKey, body: { name: uniqueName('exp'), expires_at: '2099-06-01T14:30:00+02:00' } });
  assert.is(res.status, 201, res.text);
  assert.is(res.body.info.expires_at, '2099-06-01T12:30:00.000Z');
  const leap = await api(t, 'POST', '/keys', { key: t.adminKey, body: { name: uniqueName('leap'), expires_at: '2096-02-29T00:00:00Z' } });
  assert.is(leap.status, 201, leap.text);
  assert.is(leap.body.info.expires_at, '2096-02-29T00:00:00.000Z');
  const nullExpiry = await api(t, 'POST', '/keys', { key: t.adminKey, body: { name: uniqueName('noexp'), expires_at: null, scopes: null } });
  assert.is(nullExpiry.status, 201, nullExpiry.text);
  assert.is(nullExpiry.body.info.expires_at, null);
  assert.equal([...nullExpiry.body.info.scopes].sort(), ['management', 'tunnels'], 'scopes: null means both');
});

test('Create_key: a tunnels-only key works for tunnels and not for management', async () => {
  const res = await api(t, 'POST', '/keys', { key: t.adminKey, body: { name: uniqueName('ci'), scopes: ['tunnels'] } });
  assert.is(res.status, 201, res.text);
  assert.equal(res.body.info.scopes, ['tunnels']);
  const k = res.body.key;
  assert.is((await api(t, 'GET', '/tunnels', { key: k })).status, 200);
  assert.is((await api(t, 'GET', '/me', { key: k })).status, 200);
  const keys = await api(t, 'GET', '/keys', { key: k });
  assert.is(keys.status, 403);
  assert.is(keys.body.type, '/problems/forbidden');
});

test('Create_key: a key creates only keys within its own scopes (management-only cannot mint tunnels: 403)', async () => {
  const m = await member(['management']);
  const asked = [undefined, null, ['tunnels'], ['tunnels', 'management']];
  for (const scopes of asked) {
    const res = await api(t, 'POST', '/keys', { key: m.key, body: { name: uniqueName('wider'), ...(scopes === undefined ? {} : { scopes }) } });
    assert.is(res.status, 403, `scopes ${JSON.stringify(scopes)}: ${res.text}`);
    assert.is(res.body.type, '/problems/forbidden');
    assert.match(res.body.detail, /tunnels/, 'detail names the missing scope');
  }
  const same = await api(t, 'POST', '/keys', { key: m.key, body: { name: uniqueName('same'), scopes: ['management'] } });
  assert.is(same.status, 201, same.text);
  assert.equal(same.body.info.scopes, ['management']);
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from api_keys where user_id = ${m.id}`;
  assert.is(count, 2, 'the refused requests created nothing');
});

test('Create_key: empty scopes, an unknown scope, a past expiry and a non-date expiry are 400 naming the field', async () => {
  const cases: [unknown, RegExp][] = [
    [{ name: uniqueName('x'), scopes: [] }, /scopes/],
    [{ name: uniqueName('x'), scopes: ['admin'] }, /scopes/],
    [{ name: uniqueName('x'), scopes: ['tunnels', 'everything'] }, /scopes/],
    [{ name: uniqueName('x'), expires_at: new Date(Date.now() - 60_000).toISOString() }, /expires_at|past/],
    [{ name: uniqueName('x'), expires_at: 'tomorrow' }, /expires_at/],
    [{ name: uniqueName('x'), expires_at: '2099-02-30T00:00:00Z' }, /expires_at/],
    [{ name: uniqueName('x'), expires_at: '2099-13-01T00:00:00Z' }, /expires_at/],
    [{ name: uniqueName('x'), expires_at: '2099-01-01T24:30:00Z' }, /expires_at/],
    [{ name: uniqueName('x'), expires_at: '2099-01-01' }, /expires_at/],
    [{ name: '' }, /name/],
    [{ scopes: ['tunnels'] }, /name/],
  ];
  const before = (await api(t, 'GET', '/keys', { key: t.adminKey })).body.length;
  for (const [body, detail] of cases) {
    const res = await api(t, 'POST', '/keys', { key: t.adminKey, body });
    assert.is(res.status, 400, `${JSON.stringify(body)}: ${res.text}`);
    assert.is(res.headers.get('content-type'), 'application/problem+json');
    assert.equal(fieldsOf(res.body).filter((f) => f !== 'errors'), ['detail', 'status', 'title', 'type']);
    assert.is(res.body.type, '/problems/bad-request');
    assert.match(res.body.detail, detail, JSON.stringify(body));
  }
  assert.is((await api(t, 'GET', '/keys', { key: t.adminKey })).body.length, before, 'nothing was created');
});

test('Create_key: a duplicate active name is 409; after revoking, the name is free again', async () => {
  const m = await member();
  const first = await api(t, 'POST', '/keys', { key: m.key, body: { name: 'deploy' } });
  assert.is(first.status, 201);
  const dup = await api(t, 'POST', '/keys', { key: m.key, body: { name: 'deploy', scopes: ['tunnels'] } });
  assert.is(dup.status, 409, dup.text);
  assert.is(dup.body.type, '/problems/conflict');
  assert.match(dup.body.detail, /deploy/);
  // Another user's key of the same name is no conflict.
  const other = await member();
  assert.is((await api(t, 'POST', '/keys', { key: other.key, body: { name: 'deploy' } })).status, 201);
  assert.is((await api(t, 'DELETE', `/keys/${first.body.info.id}`, { key: m.key })).status, 200);
  const again = await api(t, 'POST', '/keys', { key: m.key, body: { name: 'deploy' } });
  assert.is(again.status, 201, again.text);
  assert.is.not(again.body.info.id, first.body.info.id);
});

test('List_keys: own keys only, newest first, revoked left out, expired kept', async () => {
  const u = await createUser(t);
  const own = await createKeyFor(t, u.id, { name: 'own' });
  await createKeyFor(t, u.id, { name: 'gone-by', expiresAt: new Date(Date.now() - 3_600_000) });
  await createKeyFor(t, u.id, { name: 'old-revoked', revoked: true });
  const a = await api(t, 'POST', '/keys', { key: own, body: { name: 'a' } });
  const b = await api(t, 'POST', '/keys', { key: own, body: { name: 'b', scopes: ['tunnels'] } });
  const c = await api(t, 'POST', '/keys', { key: own, body: { name: 'c' } });
  assert.is((await api(t, 'DELETE', `/keys/${b.body.info.id}`, { key: own })).status, 200);
  const res = await api(t, 'GET', '/keys', { key: own });
  assert.is(res.status, 200);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.equal(res.body.map((k: { name: string }) => k.name), ['c', 'a', 'gone-by', 'own']);
  for (const k of res.body) assertApiKey(k, k.name);
  assert.equal(res.body[0], c.body.info);
  assert.equal(res.body[1], a.body.info);
  const expired = res.body[2];
  assert.ok(Date.parse(expired.expires_at) < Date.now(), 'the expired key shows its past expiry');
  assert.is(expired.revoked_at, null);
  // Newest first by created_at, not by name or id.
  const times = res.body.map((k: { created_at: string }) => Date.parse(k.created_at));
  assert.equal([...times].sort((x, y) => y - x), times);
});

test('List_keys: a user with only the key in hand sees exactly that key', async () => {
  const m = await member();
  const res = await api(t, 'GET', '/keys', { key: m.key });
  assert.is(res.status, 200);
  assert.is(res.body.length, 1);
  assert.is(res.body[0].key_prefix, m.key.slice(0, 15));
});

test('Revoke_key: 200 {} exactly; revoked_at is set and the key leaves the list', async () => {
  const m = await member();
  const made = await api(t, 'POST', '/keys', { key: m.key, body: { name: 'temp' } });
  const res = await api(t, 'DELETE', `/keys/${made.body.info.id}`, { key: m.key });
  assert.is(res.status, 200);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.is(res.text, '{}');
  const [row] = await t.sql<{ revoked_at: Date | null }[]>`select revoked_at from api_keys where id = ${made.body.info.id}`;
  assert.ok(row!.revoked_at instanceof Date, 'revoked_at is set in the database');
  const list = await api(t, 'GET', '/keys', { key: m.key });
  assert.ok(!list.body.some((k: { id: string }) => k.id === made.body.info.id));
  // Revoking it again: it is no longer an active key of yours.
  const again = await api(t, 'DELETE', `/keys/${made.body.info.id}`, { key: m.key });
  assert.is(again.status, 404, again.text);
  assert.is(again.body.type, '/problems/not-found');
});

test("Revoke_key: another user's key is 404 (not 403) and keeps working; an unknown id is 404", async () => {
  const a = await member();
  const b = await member();
  const bKey = await api(t, 'POST', '/keys', { key: b.key, body: { name: 'bs' } });
  const res = await api(t, 'DELETE', `/keys/${bKey.body.info.id}`, { key: a.key });
  assert.is(res.status, 404, res.text);
  assert.is(res.body.type, '/problems/not-found');
  // Not even an admin revokes someone else's key through this route.
  assert.is((await api(t, 'DELETE', `/keys/${bKey.body.info.id}`, { key: t.adminKey })).status, 404);
  assert.is((await api(t, 'GET', '/me', { key: bKey.body.key })).status, 200, 'the key still works');
  const [row] = await t.sql<{ revoked_at: Date | null }[]>`select revoked_at from api_keys where id = ${bKey.body.info.id}`;
  assert.is(row!.revoked_at, null);
  const unknown = await api(t, 'DELETE', '/keys/00000000-0000-4000-8000-000000000000', { key: a.key });
  assert.is(unknown.status, 404);
});

test('Revoke_key: the revoked key fails on the very next request, whichever shard serves it', async () => {
  const m = await member();
  const made = await api(t, 'POST', '/keys', { key: m.key, body: { name: 'everywhere' } });
  const victim = made.body.key as string;
  // Warm the key into both shards' caches first: the revoke must reach every cache.
  assert.equal(await freshStatuses(victim), all(200));
  const res = await api(t, 'DELETE', `/keys/${made.body.info.id}`, { key: m.key });
  assert.is(res.status, 200);
  assert.equal(await freshStatuses(victim), all(401));
  assert.equal(await freshStatuses(m.key), all(200), 'the revoking key is untouched');
});

test('Revoke_key: a key may revoke itself; its next request is refused', async () => {
  const m = await member();
  assert.equal(await freshStatuses(m.key), all(200));
  const [row] = await t.sql<{ id: string }[]>`select id from api_keys where user_id = ${m.id}`;
  const res = await api(t, 'DELETE', `/keys/${row!.id}`, { key: m.key });
  assert.is(res.status, 200, res.text);
  assert.equal(await freshStatuses(m.key, '/api/v1/keys'), all(401));
});

test('an expiring key works until expires_at, then is refused on every shard even though cached', async () => {
  const m = await member();
  const expiresAt = new Date(Date.now() + 2_500);
  // (Long enough that creating it cannot overrun the expiry on a loaded machine.)
  const made = await api(t, 'POST', '/keys', { key: m.key, body: { name: 'short', expires_at: expiresAt.toISOString() } });
  assert.is(made.status, 201, made.text);
  const short = made.body.key as string;
  const before: number[] = [];
  for (let i = 0; i < 4; i++) before.push(await freshStatus(short));
  // Only meaningful if these ran before the expiry; they take milliseconds each.
  if (Date.now() < expiresAt.getTime()) assert.equal(before, [200, 200, 200, 200]);
  await new Promise((r) => setTimeout(r, Math.max(0, expiresAt.getTime() - Date.now()) + 100));
  assert.equal(await freshStatuses(short), all(401));
  // Still listed (expired keys are shown), not revoked.
  const listed = (await api(t, 'GET', '/keys', { key: m.key })).body.find((k: { id: string }) => k.id === made.body.info.id);
  assert.ok(listed, 'the expired key is listed');
  assert.is(listed.revoked_at, null);
});

test('keys created while other requests run: every request answers, none fails with 500', async () => {
  // Create_key writes in a transaction; requests of other connections that arrive meanwhile
  // must simply wait for it (the embedded database once interleaved them and lost their
  // statements: 500 "portal does not exist").
  const m = await member();
  const ROUNDS = 2;
  const PER_ROUND = 10;
  for (let round = 0; round < ROUNDS; round++) {
    const results = await Promise.all([
      ...Array.from({ length: PER_ROUND }, (_, i) => api(t, 'POST', '/keys', { key: m.key, body: { name: `burst-${round}-${i}` } })),
      ...Array.from({ length: PER_ROUND }, () => api(t, 'GET', '/keys', { key: m.key })),
    ]);
    const statuses = results.map((r) => r.status);
    assert.equal(statuses, [...Array<number>(PER_ROUND).fill(201), ...Array<number>(PER_ROUND).fill(200)], `round ${round}: ${statuses.join(' ')}`);
  }
  assert.is((await api(t, 'GET', '/keys', { key: m.key })).body.length, 1 + ROUNDS * PER_ROUND);
});

test.run();
