import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Agent, request } from 'undici';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';

// Users (admin only): List_users, Deactivate_user, Reactivate_user, Set_user_role. A change of
// state or role must reach every shard's key cache before the call answers, so those checks
// go over fresh connections (each may land on either shard).

const USER_FIELDS = ['avatar_url', 'created_at', 'deactivated_at', 'email', 'id', 'metadata', 'name', 'role', 'updated_at'];
const ISO_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$/;
const NO_SUCH = '00000000-0000-4000-8000-000000000000';
const FRESH_CONNECTIONS = 10;

let t: TestServer;
let seedId: string;
const fieldsOf = (o: object) => Object.keys(o).sort();

/** Statuses of GET `path` sent FRESH_CONNECTIONS times, each over a new connection. */
async function overFreshConnections(key: string, path: string): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < FRESH_CONNECTIONS; i++) {
    const agent = new Agent({ connections: 1, pipelining: 0 });
    try {
      const res = await withDeadline(request(`${t.url}/api/v1${path}`, { dispatcher: agent, headers: { authorization: `Bearer ${key}` } }), 5_000, `GET ${path}`);
      await res.body.dump();
      statuses.push(res.statusCode);
    } finally {
      await agent.close();
    }
  }
  return statuses;
}
const every = (status: number) => Array<number>(FRESH_CONNECTIONS).fill(status);

async function user(role: 'admin' | 'member' = 'member') {
  const u = await createUser(t, { role });
  return { id: u.id, email: u.email, key: await createKeyFor(t, u.id) };
}

function assertUser(u: Record<string, unknown>, what: string) {
  assert.equal(fieldsOf(u), USER_FIELDS, `${what}: User fields`);
  assert.match(u.created_at as string, ISO_Z);
  assert.match(u.updated_at as string, ISO_Z);
  if (u.deactivated_at !== null) assert.match(u.deactivated_at as string, ISO_Z);
}

function assertProblem(res: { status: number; body: { type: string }; headers: Headers }, status: number, code: string) {
  assert.is(res.status, status, JSON.stringify(res.body));
  assert.is(res.headers.get('content-type'), 'application/problem+json');
  assert.is(res.body.type, `/problems/${code}`);
}

test.before(async () => {
  // Several tests count on 401s; the failed-auth limit (429) is another suite's subject.
  t = await startServer({ args: ['--auth-failure-limit', '100000'] });
  seedId = (await api(t, 'GET', '/me', { key: t.adminKey })).body.id;
});

test.after(async () => {
  await t?.stop();
});

test('List_users: every User field, newest first, default limit 50, limit honoured', async () => {
  // 55 users one second apart, all newer than the seed user.
  await t.sql`insert into users (email, name, created_at, updated_at)
    select 'bulk' || g || '@example.test', 'Bulk ' || g, now() + make_interval(secs => g), now() + make_interval(secs => g)
      from generate_series(1, 55) as g`;
  const res = await api(t, 'GET', '/users', { key: t.adminKey });
  assert.is(res.status, 200, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.is(res.body.length, 50);
  for (const u of res.body) assertUser(u, u.email);
  assert.equal(res.body.map((u: { email: string }) => u.email), Array.from({ length: 50 }, (_, i) => `bulk${55 - i}@example.test`));
  const two = await api(t, 'GET', '/users?limit=2', { key: t.adminKey });
  assert.equal(two.body.map((u: { email: string }) => u.email), ['bulk55@example.test', 'bulk54@example.test']);
  const everyone = await api(t, 'GET', '/users?limit=1000', { key: t.adminKey });
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from users`;
  assert.is(everyone.body.length, count);
  const seed = everyone.body.at(-1);
  assert.is(seed.email, 'seed@burrow.local', 'the seed user is the oldest');
  assert.is(seed.role, 'admin');
  assert.is(seed.avatar_url, null);
  assert.equal(seed.metadata, {});
  for (const limit of ['0', '1001', '-5', 'ten', '2.5']) {
    const bad = await api(t, 'GET', `/users?limit=${limit}`, { key: t.adminKey });
    assertProblem(bad, 400, 'bad-request');
    assert.match(bad.text, /limit/);
  }
});

test('Deactivate_user: 200 with deactivated_at set; every key of the user fails at once on every shard', async () => {
  const bob = await user();
  const tunnelsKey = await createKeyFor(t, bob.id, { scopes: ['tunnels'] });
  assert.equal(await overFreshConnections(bob.key, '/me'), every(200), 'warm both shards');
  assert.equal(await overFreshConnections(tunnelsKey, '/tunnels'), every(200));
  const before = Date.now();
  const res = await api(t, 'POST', `/users/${bob.id}/deactivate`, { key: t.adminKey });
  assert.is(res.status, 200, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assertUser(res.body, 'deactivated');
  assert.is(res.body.id, bob.id);
  assert.is(res.body.email, bob.email);
  assert.is(res.body.role, 'member');
  assert.ok(Math.abs(Date.parse(res.body.deactivated_at) - before) < 10_000, `deactivated_at ${res.body.deactivated_at} is now`);
  assert.equal(await overFreshConnections(bob.key, '/me'), every(401));
  assert.equal(await overFreshConnections(tunnelsKey, '/tunnels'), every(401));
  // The admin's list shows it.
  const listed = (await api(t, 'GET', '/users?limit=1000', { key: t.adminKey })).body.find((u: { id: string }) => u.id === bob.id);
  assert.equal(listed, res.body);
  // The keys are not revoked: deactivation is reversible.
  const rows = await t.sql<{ revoked_at: Date | null }[]>`select revoked_at from api_keys where user_id = ${bob.id}`;
  assert.equal(rows.map((r) => r.revoked_at), [null, null]);
});

test('Reactivate_user: 200 with deactivated_at null; the same keys work again on every shard', async () => {
  const bob = await user();
  assert.is((await api(t, 'POST', `/users/${bob.id}/deactivate`, { key: t.adminKey })).status, 200);
  assert.equal(await overFreshConnections(bob.key, '/me'), every(401));
  const res = await api(t, 'POST', `/users/${bob.id}/reactivate`, { key: t.adminKey });
  assert.is(res.status, 200, res.text);
  assertUser(res.body, 'reactivated');
  assert.is(res.body.id, bob.id);
  assert.is(res.body.deactivated_at, null);
  assert.equal(await overFreshConnections(bob.key, '/me'), every(200));
  // Reactivating an active user changes nothing and is fine.
  const again = await api(t, 'POST', `/users/${bob.id}/reactivate`, { key: t.adminKey });
  assert.is(again.status, 200);
  assert.is(again.body.deactivated_at, null);
});

test('Deactivate_user: deactivating yourself is 409 and changes nothing', async () => {
  const res = await api(t, 'POST', `/users/${seedId}/deactivate`, { key: t.adminKey });
  assertProblem(res, 409, 'conflict');
  assert.is((await api(t, 'GET', '/me', { key: t.adminKey })).body.deactivated_at, null);
  const carol = await user('admin');
  assertProblem(await api(t, 'POST', `/users/${carol.id}/deactivate`, { key: carol.key }), 409, 'conflict');
  assert.is((await api(t, 'GET', '/me', { key: carol.key })).status, 200);
});

test('an unknown user is 404 for deactivate, reactivate and set role', async () => {
  assertProblem(await api(t, 'POST', `/users/${NO_SUCH}/deactivate`, { key: t.adminKey }), 404, 'not-found');
  assertProblem(await api(t, 'POST', `/users/${NO_SUCH}/reactivate`, { key: t.adminKey }), 404, 'not-found');
  assertProblem(await api(t, 'PUT', `/users/${NO_SUCH}/role`, { key: t.adminKey, body: { role: 'admin' } }), 404, 'not-found');
  assertProblem(await api(t, 'PUT', `/users/${NO_SUCH}/role`, { key: t.adminKey, body: { role: 'member' } }), 404, 'not-found');
});

test('Set_user_role: member → admin → member round trip answers the updated User each time', async () => {
  const bob = await user();
  const up = await api(t, 'PUT', `/users/${bob.id}/role`, { key: t.adminKey, body: { role: 'admin' } });
  assert.is(up.status, 200, up.text);
  assert.is(up.headers.get('content-type'), 'application/json');
  assertUser(up.body, 'promoted');
  assert.is(up.body.id, bob.id);
  assert.is(up.body.role, 'admin');
  const me = await api(t, 'GET', '/me', { key: bob.key });
  assert.equal(me.body, up.body, '/me shows the same user');
  const same = await api(t, 'PUT', `/users/${bob.id}/role`, { key: t.adminKey, body: { role: 'admin' } });
  assert.is(same.status, 200);
  assert.is(same.body.role, 'admin');
  const down = await api(t, 'PUT', `/users/${bob.id}/role`, { key: t.adminKey, body: { role: 'member' } });
  assert.is(down.status, 200, down.text);
  assert.is(down.body.role, 'member');
  assert.ok(Date.parse(down.body.updated_at) >= Date.parse(up.body.updated_at));
  const bad = await api(t, 'PUT', `/users/${bob.id}/role`, { key: t.adminKey, body: { role: 'owner' } });
  assertProblem(bad, 400, 'bad-request');
  assert.match(bad.body.detail, /role/);
  assert.is((await api(t, 'GET', '/me', { key: bob.key })).body.role, 'member');
});

test('a role change reaches every shard before it answers: promoted → /users 200, demoted → 403 at once', async () => {
  const bob = await user();
  assert.equal(await overFreshConnections(bob.key, '/users?limit=1'), every(403), 'a member, cached on both shards');
  assert.is((await api(t, 'PUT', `/users/${bob.id}/role`, { key: t.adminKey, body: { role: 'admin' } })).status, 200);
  assert.equal(await overFreshConnections(bob.key, '/users?limit=1'), every(200));
  assert.is((await api(t, 'PUT', `/users/${bob.id}/role`, { key: t.adminKey, body: { role: 'member' } })).status, 200);
  assert.equal(await overFreshConnections(bob.key, '/users?limit=1'), every(403));
});

test('the last active admin cannot be demoted (409); the seed admin counts, a deactivated admin does not', async () => {
  // Start from the seed admin alone (earlier tests may have left admins behind).
  await t.sql`update users set role = 'member' where role = 'admin' and id <> ${seedId}`;
  const seedDemote = await api(t, 'PUT', `/users/${seedId}/role`, { key: t.adminKey, body: { role: 'member' } });
  assertProblem(seedDemote, 409, 'conflict');
  assert.is((await api(t, 'GET', '/me', { key: t.adminKey })).body.role, 'admin');

  const bob = await user();
  assert.is((await api(t, 'PUT', `/users/${bob.id}/role`, { key: t.adminKey, body: { role: 'admin' } })).status, 200);
  // Two admins: bob demotes the seed admin, whose key loses /users at once everywhere.
  assert.equal(await overFreshConnections(t.adminKey, '/users?limit=1'), every(200));
  const demoted = await api(t, 'PUT', `/users/${seedId}/role`, { key: bob.key, body: { role: 'member' } });
  assert.is(demoted.status, 200, demoted.text);
  assert.is(demoted.body.role, 'member');
  assert.equal(await overFreshConnections(t.adminKey, '/users?limit=1'), every(403));
  // bob is the last admin now.
  assertProblem(await api(t, 'PUT', `/users/${bob.id}/role`, { key: bob.key, body: { role: 'member' } }), 409, 'conflict');

  // A deactivated admin cannot act, so does not count.
  const carol = await user('admin');
  assert.is((await api(t, 'POST', `/users/${carol.id}/deactivate`, { key: bob.key })).status, 200);
  assertProblem(await api(t, 'PUT', `/users/${bob.id}/role`, { key: bob.key, body: { role: 'member' } }), 409, 'conflict');
  assert.is((await api(t, 'POST', `/users/${carol.id}/reactivate`, { key: bob.key })).status, 200);
  const stepDown = await api(t, 'PUT', `/users/${bob.id}/role`, { key: bob.key, body: { role: 'member' } });
  assert.is(stepDown.status, 200, stepDown.text);
  assert.equal(await overFreshConnections(bob.key, '/users?limit=1'), every(403));

  // carol restores the seed admin.
  assert.is((await api(t, 'PUT', `/users/${seedId}/role`, { key: carol.key, body: { role: 'admin' } })).status, 200);
  assert.equal(await overFreshConnections(t.adminKey, '/users?limit=1'), every(200));
});

// The check and the change must be one step: on PostgreSQL both requests used to pass the
// check (each still saw the other as admin) and left no admin at all. The embedded database
// runs one statement at a time, so the race only exists (and is only tested) on PostgreSQL.
if (process.env.TEST_DATABASE_URL) test('two admins demoting each other at the same moment: one wins, one admin is always left', async () => {
  const ROUNDS = 6;
  for (let round = 0; round < ROUNDS; round++) {
    await t.sql`update users set role = 'member' where role = 'admin' and id <> ${seedId}`;
    const a = await user('admin');
    const b = await user('admin');
    // The seed admin steps aside for the round (through the API, so its cached role follows).
    assert.is((await api(t, 'PUT', `/users/${seedId}/role`, { key: a.key, body: { role: 'member' } })).status, 200);
    const [ab, ba] = await Promise.all([
      api(t, 'PUT', `/users/${b.id}/role`, { key: a.key, body: { role: 'member' } }),
      api(t, 'PUT', `/users/${a.id}/role`, { key: b.key, body: { role: 'member' } }),
    ]);
    const statuses = [ab.status, ba.status].sort();
    // The loser is refused either as the last admin (409) or, if the winner's change reached
    // its shard first, as a member no longer allowed here (403).
    assert.ok(statuses[0] === 200 && (statuses[1] === 403 || statuses[1] === 409), `round ${round}: ${statuses.join(', ')} ${ab.text} ${ba.text}`);
    const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from users where role = 'admin' and deactivated_at is null`;
    assert.is(count, 1, `round ${round}: active admins left`);
    const winner = ab.status === 200 ? a : b;
    assert.is((await api(t, 'PUT', `/users/${seedId}/role`, { key: winner.key, body: { role: 'admin' } })).status, 200);
  }
});

test('Create_user: 201 User, member by default, name defaulting to the local part; admin role on request', async () => {
  const res = await api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'new.person@example.test' } });
  assert.is(res.status, 201, res.text);
  assertUser(res.body, 'created');
  assert.is(res.body.email, 'new.person@example.test');
  assert.is(res.body.name, 'new.person');
  assert.is(res.body.role, 'member');
  assert.is(res.body.deactivated_at, null);
  const listed = await api(t, 'GET', '/users?limit=1000', { key: t.adminKey });
  assert.ok(listed.body.some((u: { id: string }) => u.id === res.body.id), 'listed');
  const admin = await api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'boss@example.test', name: 'The Boss', role: 'admin' } });
  assert.is(admin.status, 201, admin.text);
  assert.is(admin.body.name, 'The Boss');
  assert.is(admin.body.role, 'admin');
});

test('Create_user: a taken email is 409, case-insensitively; concurrent creates of one email: one 201', async () => {
  assert.is((await api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'Dup@Example.test' } })).status, 201);
  const dup = await api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'dup@example.TEST' } });
  assertProblem(dup, 409, 'conflict');
  assert.match(dup.body.detail, /dup@example\.TEST already exists/);
  const race = await Promise.all(Array.from({ length: 6 }, () => api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'race@example.test' } })));
  assert.equal(race.map((r) => r.status).sort(), [201, 409, 409, 409, 409, 409]);
  const [{ n }] = await t.sql<{ n: number }[]>`select count(*)::int as n from users where lower(email) = 'race@example.test'`;
  assert.is(n, 1);
});

test('Create_user: a bad email, role or unknown field is 400 naming the field', async () => {
  for (const body of [{ email: 'no-at-sign' }, { email: 'two@@example.test' }, { email: 'sp ace@example.test' }, { email: 'a@nodot' }, {}, { email: 'ok@example.test', role: 'owner' }, { email: 'ok@example.test', extra: 1 }]) {
    const res = await api(t, 'POST', '/users', { key: t.adminKey, body });
    assertProblem(res, 400, 'bad-request');
    assert.ok(res.body.detail.length > 0, JSON.stringify(body));
  }
  const bad = await api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'no-at-sign' } });
  assert.match(bad.body.detail, /email/);
});

test('Create_user and Create_user_key: a member is 403, a tunnels-only admin key is 403', async () => {
  const bob = await user('member');
  assertProblem(await api(t, 'POST', '/users', { key: bob.key, body: { email: 'x1@example.test' } }), 403, 'forbidden');
  assertProblem(await api(t, 'POST', `/users/${bob.id}/keys`, { key: bob.key, body: { name: 'mine' } }), 403, 'forbidden');
  const tunnelsOnly = await createKeyFor(t, seedId, { scopes: ['tunnels'] });
  assertProblem(await api(t, 'POST', '/users', { key: tunnelsOnly, body: { email: 'x2@example.test' } }), 403, 'forbidden');
  assertProblem(await api(t, 'POST', `/users/${bob.id}/keys`, { key: tunnelsOnly, body: { name: 'k' } }), 403, 'forbidden');
  const [{ n }] = await t.sql<{ n: number }[]>`select count(*)::int as n from users where email in ('x1@example.test', 'x2@example.test')`;
  assert.is(n, 0);
});

test('Create_user_key: 201 CreatedKey for that user; the key answers /me as them with the scopes asked', async () => {
  const created = await api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'keyed@example.test', name: 'Keyed' } });
  const res = await api(t, 'POST', `/users/${created.body.id}/keys`, { key: t.adminKey, body: { name: 'laptop', scopes: ['tunnels'] } });
  assert.is(res.status, 201, res.text);
  assert.equal(Object.keys(res.body).sort(), ['info', 'key']);
  assert.is(res.body.info.name, 'laptop');
  assert.equal(res.body.info.scopes, ['tunnels']);
  const me = await api(t, 'GET', '/me', { key: res.body.key });
  assert.is(me.status, 200, me.text);
  assert.is(me.body.id, created.body.id);
  assert.is(me.body.email, 'keyed@example.test');
  // Not the admin's key: the admin's own list does not show it.
  const mine = await api(t, 'GET', '/keys', { key: t.adminKey });
  assert.not.ok(mine.body.some((k: { id: string }) => k.id === res.body.info.id));
  const dup = await api(t, 'POST', `/users/${created.body.id}/keys`, { key: t.adminKey, body: { name: 'laptop' } });
  assertProblem(dup, 409, 'conflict');
  assert.match(dup.body.detail, /keyed@example\.test already has an active key named "laptop"/);
});

test('Create_user_key: unknown user 404, deactivated user 409 with a clear detail, bad body 400', async () => {
  const missing = await api(t, 'POST', `/users/${NO_SUCH}/keys`, { key: t.adminKey, body: { name: 'k' } });
  assertProblem(missing, 404, 'not-found');
  assert.match(missing.body.detail, new RegExp(NO_SUCH));
  const gone = await user('member');
  assert.is((await api(t, 'POST', `/users/${gone.id}/deactivate`, { key: t.adminKey })).status, 200);
  const refused = await api(t, 'POST', `/users/${gone.id}/keys`, { key: t.adminKey, body: { name: 'k' } });
  assertProblem(refused, 409, 'conflict');
  assert.match(refused.body.detail, /is deactivated: reactivate them first/);
  assertProblem(await api(t, 'POST', `/users/${gone.id}/keys`, { key: t.adminKey, body: { scopes: ['tunnels'] } }), 400, 'bad-request');
  assertProblem(await api(t, 'POST', '/users/not-a-uuid/keys', { key: t.adminKey, body: { name: 'k' } }), 400, 'bad-request');
});

test.run();
