import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser } from '../helpers/fixtures.js';

// Profile: Get_current_user, List_accounts, List_sessions (limit and all rules).
// Accounts and sessions are written by OAuth login and the tunnel data plane; here they are
// inserted straight into the database so the API's reading of them is tested alone.

const USER_FIELDS = ['avatar_url', 'created_at', 'deactivated_at', 'email', 'id', 'metadata', 'name', 'role', 'updated_at'];
const SESSION_FIELDS = ['bytes_in', 'bytes_out', 'client_ip', 'connected_at', 'disconnected_at', 'id', 'requests', 'tunnel_id', 'user_id'];
const ISO_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let t: TestServer;
let seedId: string;
const fieldsOf = (o: object) => Object.keys(o).sort();

async function member() {
  const u = await createUser(t);
  return { id: u.id, email: u.email, key: await createKeyFor(t, u.id) };
}

/**
 * `count` closed sessions of a user, one second apart: session g connected at base + g s
 * (so the highest g is the newest), with counters g, 2g, 3g.
 */
async function insertSessions(userId: string, count: number, base: Date, tunnelPrefix = 'tun'): Promise<void> {
  await t.sql`insert into sessions (user_id, tunnel_id, tunnel_type, client_ip, connected_at, disconnected_at, bytes_in, bytes_out, requests)
    select ${userId}, ${tunnelPrefix} || '-' || g, 'http', '203.0.113.' || (g % 250),
           ${base}::timestamptz + make_interval(secs => g), ${base}::timestamptz + make_interval(secs => g + 0.5),
           g, 2 * g, 3 * g
      from generate_series(1, ${count}::int) as g`;
}

test.before(async () => {
  t = await startServer();
  seedId = (await api(t, 'GET', '/me', { key: t.adminKey })).body.id;
});

test.after(async () => {
  await t?.stop();
});

test('Get_current_user: the seed admin, every User field present, nulls not omitted, metadata {}', async () => {
  const res = await api(t, 'GET', '/me', { key: t.adminKey });
  assert.is(res.status, 200);
  assert.is(res.headers.get('content-type'), 'application/json');
  const u = res.body;
  assert.equal(fieldsOf(u), USER_FIELDS);
  assert.match(u.id, UUID);
  assert.is(u.email, 'seed@burrow.local');
  assert.is(u.role, 'admin');
  assert.is(typeof u.name, 'string');
  assert.is(u.avatar_url, null);
  assert.equal(u.metadata, {});
  assert.is(u.deactivated_at, null);
  assert.match(u.created_at, ISO_Z);
  assert.match(u.updated_at, ISO_Z);
});

test('Get_current_user: the key owner with their stored name, avatar and metadata, for a tunnels-only key too', async () => {
  const [row] = await t.sql<{ id: string }[]>`insert into users (email, name, avatar_url, metadata, created_at, updated_at)
    values ('ada@example.test', 'Ada Lovelace', 'https://avatars.example.test/ada.png', ${t.sql.json({ team: 'engines', n: 1 })},
            '2024-01-02T03:04:05.678Z', '2024-02-03T04:05:06.789Z') returning id`;
  const key = await createKeyFor(t, row!.id, { scopes: ['tunnels'] });
  const res = await api(t, 'GET', '/me', { key });
  assert.is(res.status, 200, res.text);
  assert.equal(res.body, {
    id: row!.id,
    email: 'ada@example.test',
    name: 'Ada Lovelace',
    avatar_url: 'https://avatars.example.test/ada.png',
    role: 'member',
    metadata: { team: 'engines', n: 1 },
    created_at: '2024-01-02T03:04:05.678Z',
    updated_at: '2024-02-03T04:05:06.789Z',
    deactivated_at: null,
  });
});

test('List_accounts: an empty array for the seed user (no OAuth login yet)', async () => {
  const res = await api(t, 'GET', '/accounts', { key: t.adminKey });
  assert.is(res.status, 200);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.is(res.text, '[]');
});

test("List_accounts: linked accounts appear as {id, provider, created_at}; another user's do not", async () => {
  const m = await member();
  const [acc] = await t.sql<{ id: string }[]>`insert into accounts (user_id, provider, subject, email, created_at)
    values (${m.id}, 'github', '12345', ${m.email}, '2025-05-05T05:05:05.000Z') returning id`;
  await t.sql`insert into accounts (user_id, provider, subject) values (${seedId}, 'corp-sso', 'seed-subject')`;
  const res = await api(t, 'GET', '/accounts', { key: m.key });
  assert.is(res.status, 200);
  assert.equal(res.body, [{ id: acc!.id, provider: 'github', created_at: '2025-05-05T05:05:05.000Z' }]);
  const seed = await api(t, 'GET', '/accounts', { key: t.adminKey });
  assert.equal(seed.body.map((a: { provider: string }) => a.provider), ['corp-sso']);
  assert.equal(fieldsOf(seed.body[0]), ['created_at', 'id', 'provider'], 'subject and email are not shown');
  // A tunnels-only key may read the profile.
  const tunnelsKey = await createKeyFor(t, m.id, { scopes: ['tunnels'] });
  assert.is((await api(t, 'GET', '/accounts', { key: tunnelsKey })).body.length, 1);
});

test('List_sessions: the Session shape exactly, integers as numbers, null fields present', async () => {
  const m = await member();
  const [s] = await t.sql<{ id: string }[]>`insert into sessions (user_id, tunnel_id, tunnel_type, team_id, connected_at, bytes_in, bytes_out, requests)
    values (${m.id}, 'live-one', 'tcp', null, '2025-01-01T00:00:00.000Z', 5000000000, 7, 1) returning id`;
  const res = await api(t, 'GET', '/sessions', { key: m.key });
  assert.is(res.status, 200, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.equal(res.body, [
    {
      id: s!.id,
      user_id: m.id,
      tunnel_id: 'live-one',
      client_ip: null,
      connected_at: '2025-01-01T00:00:00.000Z',
      disconnected_at: null,
      bytes_in: 5000000000,
      bytes_out: 7,
      requests: 1,
    },
  ]);
  await insertSessions(m.id, 1, new Date('2025-02-01T00:00:00Z'));
  const two = await api(t, 'GET', '/sessions', { key: m.key });
  for (const x of two.body) assert.equal(fieldsOf(x), SESSION_FIELDS);
  assert.is(two.body[0].client_ip, '203.0.113.1');
  assert.is(two.body[0].disconnected_at, '2025-02-01T00:00:01.500Z');
});

test('List_sessions: own sessions only, newest first, default limit 50', async () => {
  const m = await member();
  const other = await member();
  await insertSessions(m.id, 60, new Date('2025-03-01T00:00:00Z'), 'mine');
  await insertSessions(other.id, 3, new Date('2030-01-01T00:00:00Z'), 'theirs');
  const res = await api(t, 'GET', '/sessions', { key: m.key });
  assert.is(res.status, 200);
  assert.is(res.body.length, 50);
  assert.ok(res.body.every((s: { user_id: string }) => s.user_id === m.id), 'only the caller\'s sessions');
  // The 50 newest: mine-60 down to mine-11.
  assert.equal(res.body.map((s: { tunnel_id: string }) => s.tunnel_id), Array.from({ length: 50 }, (_, i) => `mine-${60 - i}`));
  const theirs = await api(t, 'GET', '/sessions', { key: other.key });
  assert.equal(theirs.body.map((s: { tunnel_id: string }) => s.tunnel_id), ['theirs-3', 'theirs-2', 'theirs-1']);
  const one = await api(t, 'GET', '/sessions?limit=1', { key: m.key });
  assert.equal(one.body.map((s: { tunnel_id: string }) => s.tunnel_id), ['mine-60']);
  const some = await api(t, 'GET', '/sessions?limit=55', { key: m.key });
  assert.is(some.body.length, 55);
});

test('List_sessions: limit=1000 is the maximum and is honoured', async () => {
  const m = await member();
  await insertSessions(m.id, 1005, new Date('2025-04-01T00:00:00Z'), 'many');
  const res = await api(t, 'GET', '/sessions?limit=1000', { key: m.key });
  assert.is(res.status, 200, res.text.slice(0, 300));
  assert.is(res.body.length, 1000);
  assert.is(res.body[0].tunnel_id, 'many-1005');
  assert.is(res.body[999].tunnel_id, 'many-6');
});

test('List_sessions: limit outside 1..1000 or not an integer is 400 naming limit', async () => {
  for (const limit of ['0', '1001', 'abc', '-1', '1.5', '1e2', '0x10', '', '99999999999999999999']) {
    const res = await api(t, 'GET', `/sessions?limit=${encodeURIComponent(limit)}`, { key: t.adminKey });
    assert.is(res.status, 400, `limit=${limit}: ${res.text}`);
    assert.is(res.headers.get('content-type'), 'application/problem+json');
    assert.is(res.body.type, '/problems/bad-request');
    assert.match(res.body.detail, /limit/, `limit=${limit}`);
  }
  const bad = await api(t, 'GET', '/sessions?all=maybe', { key: t.adminKey });
  assert.is(bad.status, 400, bad.text);
  assert.match(bad.body.detail, /all/);
});

test("List_sessions: all=true shows an admin everyone's sessions; without it, only their own", async () => {
  const m = await member();
  await insertSessions(m.id, 2, new Date('2099-01-01T00:00:00Z'), 'future');
  await insertSessions(seedId, 1, new Date('2024-06-01T00:00:00Z'), 'seed');
  await insertSessions((await member()).id, 60, new Date('2098-01-01T00:00:00Z'), 'busy');
  const everyone = await api(t, 'GET', '/sessions?all=true&limit=2', { key: t.adminKey });
  assert.is(everyone.status, 200, everyone.text);
  assert.equal(everyone.body.map((s: { tunnel_id: string }) => s.tunnel_id), ['future-2', 'future-1']);
  const allDefault = await api(t, 'GET', '/sessions?all=true', { key: t.adminKey });
  assert.is(allDefault.body.length, 50, 'the default limit applies to all=true too');
  assert.equal(allDefault.body.slice(0, 3).map((s: { tunnel_id: string }) => s.tunnel_id), ['future-2', 'future-1', 'busy-60']);
  for (const q of ['', '?all=false']) {
    const own = await api(t, 'GET', `/sessions${q}`, { key: t.adminKey });
    assert.is(own.status, 200);
    assert.equal(own.body.map((s: { tunnel_id: string }) => s.tunnel_id), ['seed-1'], `admin ${q || 'without all'}`);
  }
  const memberOwn = await api(t, 'GET', '/sessions?all=false', { key: m.key });
  assert.equal(memberOwn.body.map((s: { tunnel_id: string }) => s.tunnel_id), ['future-2', 'future-1']);
  const memberAll = await api(t, 'GET', '/sessions?all=true', { key: m.key });
  assert.is(memberAll.status, 403);
  assert.is(memberAll.body.type, '/problems/forbidden');
});

test.run();
