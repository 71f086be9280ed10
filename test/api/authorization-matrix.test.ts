import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser } from '../helpers/fixtures.js';

// Every route × every kind of caller (issue #2): who may do what is the route table's
// promise; this walks all of it against a real server. Each cell gets fresh fixtures so
// a mutating call in one cell cannot change the outcome of another.

const PRINCIPALS = ['admin', 'member', 'teamOwner', 'teamMember', 'outsider', 'tunnelsOnly', 'managementOnly', 'expired', 'revoked', 'deactivated'] as const;
type Who = (typeof PRINCIPALS)[number];

let t: TestServer;
const keys = {} as Record<Who, string>;
const users = {} as Record<Who, string>;
let n = 0;

interface Cell {
  method: string;
  path: string;
  body?: unknown;
}

interface Row {
  op: string;
  make(who: Who): Promise<Cell>;
  expect: Record<Who, number>;
}

/** Fresh team owned by teamOwner with teamMember as member, plus one more plain member. */
async function team() {
  const [row] = await t.sql<{ id: string }[]>`insert into teams (name) values (${`matrix-${++n}-${Date.now()}`}) returning id`;
  const id = row!.id;
  const other = await createUser(t);
  await t.sql`insert into team_members (team_id, user_id, role) values
    (${id}, ${users.teamOwner}, 'owner'), (${id}, ${users.teamMember}, 'member'), (${id}, ${other.id}, 'member')`;
  return { id, other: other.id };
}

const INVALID = { expired: 401, revoked: 401, deactivated: 401 } as const;
/** Expected statuses by caller: `ok` for every valid key, with overrides. */
function row(ok: number, o: Partial<Record<Who, number>>): Record<Who, number> {
  const r = {} as Record<Who, number>;
  for (const w of PRINCIPALS) r[w] = ok;
  return { ...r, ...INVALID, ...o };
}
const MGMT = { tunnelsOnly: 403 } as const;
const ADMIN_ONLY = { member: 403, teamOwner: 403, teamMember: 403, outsider: 403, tunnelsOnly: 403, managementOnly: 403 } as const;
const TEAM_VISIBLE_ONLY = { member: 404, outsider: 404, managementOnly: 404, tunnelsOnly: 403 } as const;

const ROWS: Row[] = [
  { op: 'List_keys', make: async () => ({ method: 'GET', path: '/keys' }), expect: row(200, MGMT) },
  { op: 'Create_key', make: async () => ({ method: 'POST', path: '/keys', body: { name: `m${++n}`, scopes: ['management'] } }), expect: row(201, MGMT) },
  {
    op: 'Revoke_key',
    make: async (who) => {
      const [k] = await t.sql<{ id: string }[]>`insert into api_keys (user_id, name, key_prefix, key_hash, scopes)
        values (${users[who]}, ${`r${++n}`}, ${`bk_matrix${String(n).padStart(6, '0')}`.slice(0, 15)}, 'x', ${t.sql.array(['management'])}) returning id`;
      return { method: 'DELETE', path: `/keys/${k!.id}` };
    },
    expect: row(200, MGMT),
  },
  { op: 'List_accounts', make: async () => ({ method: 'GET', path: '/accounts' }), expect: row(200, {}) },
  { op: 'Get_current_user', make: async () => ({ method: 'GET', path: '/me' }), expect: row(200, {}) },
  { op: 'List_sessions', make: async () => ({ method: 'GET', path: '/sessions' }), expect: row(200, MGMT) },
  { op: 'List_sessions all=true', make: async () => ({ method: 'GET', path: '/sessions?all=true' }), expect: row(403, { admin: 200 }) },
  { op: 'List_teams', make: async () => ({ method: 'GET', path: '/teams' }), expect: row(200, MGMT) },
  { op: 'Create_team', make: async () => ({ method: 'POST', path: '/teams', body: { name: `new-${++n}-${Date.now()}` } }), expect: row(201, MGMT) },
  {
    op: 'Create_team for another owner',
    make: async () => ({ method: 'POST', path: '/teams', body: { name: `for-${++n}-${Date.now()}`, owner_id: (await createUser(t)).id } }),
    expect: row(403, { admin: 201 }),
  },
  { op: 'Delete_team', make: async () => ({ method: 'DELETE', path: `/teams/${(await team()).id}` }), expect: row(200, { ...TEAM_VISIBLE_ONLY, teamMember: 403 }) },
  { op: 'List_team_members', make: async () => ({ method: 'GET', path: `/teams/${(await team()).id}/members` }), expect: row(200, TEAM_VISIBLE_ONLY) },
  {
    op: 'Add_team_member',
    make: async () => ({ method: 'POST', path: `/teams/${(await team()).id}/members`, body: { user_id: (await createUser(t)).id } }),
    expect: row(201, { ...TEAM_VISIBLE_ONLY, teamMember: 403 }),
  },
  {
    op: 'Remove_team_member (another member)',
    make: async () => {
      const tm = await team();
      return { method: 'DELETE', path: `/teams/${tm.id}/members/${tm.other}` };
    },
    expect: row(200, { ...TEAM_VISIBLE_ONLY, teamMember: 403 }),
  },
  {
    op: 'Set_team_member_role',
    make: async () => {
      const tm = await team();
      return { method: 'PUT', path: `/teams/${tm.id}/members/${tm.other}/role`, body: { role: 'owner' } };
    },
    expect: row(200, { ...TEAM_VISIBLE_ONLY, teamMember: 403 }),
  },
  { op: 'List_users', make: async () => ({ method: 'GET', path: '/users' }), expect: row(200, ADMIN_ONLY) },
  { op: 'Deactivate_user', make: async () => ({ method: 'POST', path: `/users/${(await createUser(t)).id}/deactivate` }), expect: row(200, ADMIN_ONLY) },
  { op: 'Reactivate_user', make: async () => ({ method: 'POST', path: `/users/${(await createUser(t, { deactivated: true })).id}/reactivate` }), expect: row(200, ADMIN_ONLY) },
  { op: 'Set_user_role', make: async () => ({ method: 'PUT', path: `/users/${(await createUser(t)).id}/role`, body: { role: 'admin' } }), expect: row(200, ADMIN_ONLY) },
  { op: 'List_user_keys', make: async () => ({ method: 'GET', path: `/users/${users.member}/keys` }), expect: row(200, ADMIN_ONLY) },
  {
    op: 'Get_user_key',
    make: async () => {
      const [k] = await t.sql<{ id: string }[]>`select id from api_keys where user_id = ${users.member} limit 1`;
      return { method: 'GET', path: `/users/${users.member}/keys/${k!.id}` };
    },
    expect: row(200, ADMIN_ONLY),
  },
  {
    op: 'Revoke_user_key',
    make: async () => {
      const u = await createUser(t);
      const [k] = await t.sql<{ id: string }[]>`insert into api_keys (user_id, name, key_prefix, key_hash, scopes)
        values (${u.id}, ${`ru${++n}`}, ${`bk_matrix${String(n).padStart(6, '0')}`.slice(0, 15)}, 'x', ${t.sql.array(['management'])}) returning id`;
      return { method: 'DELETE', path: `/users/${u.id}/keys/${k!.id}` };
    },
    expect: row(200, ADMIN_ONLY),
  },
  { op: 'List_tunnels', make: async () => ({ method: 'GET', path: '/tunnels' }), expect: row(200, {}) },
  // No tunnel is live here: every caller who may ask gets 404, never 403 (nothing to reveal).
  { op: 'Get_tunnel', make: async () => ({ method: 'GET', path: '/tunnels/nosuchtunnel' }), expect: row(404, {}) },
  { op: 'Delete_tunnel', make: async () => ({ method: 'DELETE', path: '/tunnels/nosuchtunnel' }), expect: row(404, {}) },
  { op: 'List_reservations', make: async () => ({ method: 'GET', path: '/reservations' }), expect: row(200, ADMIN_ONLY) },
  { op: 'Reserve_tunnel_id', make: async () => ({ method: 'PUT', path: `/reservations/matrix-${++n}`, body: { user_id: users.member } }), expect: row(200, ADMIN_ONLY) },
  {
    op: 'Release_tunnel_id',
    make: async () => {
      const id = `matrix-${++n}`;
      await t.sql`insert into tunnel_reservations (id, user_id) values (${id}, ${users.member})`;
      return { method: 'DELETE', path: `/reservations/${id}` };
    },
    expect: row(200, ADMIN_ONLY),
  },
];

test.before(async () => {
  t = await startServer();
  const make = async (who: Who, o: { role?: 'admin' | 'member'; deactivated?: boolean } = {}, k: Parameters<typeof createKeyFor>[2] = {}) => {
    const u = await createUser(t, o);
    users[who] = u.id;
    keys[who] = await createKeyFor(t, u.id, k);
  };
  await make('admin', { role: 'admin' });
  await make('member');
  await make('teamOwner');
  await make('teamMember');
  await make('outsider');
  await make('tunnelsOnly', {}, { scopes: ['tunnels'] });
  await make('managementOnly', {}, { scopes: ['management'] });
  await make('expired', {}, { expiresAt: new Date(Date.now() - 60_000) });
  await make('revoked', {}, { revoked: true });
  await make('deactivated', { deactivated: true });
  // The outsider belongs to a team of their own: membership elsewhere grants nothing here.
  const [o] = await t.sql<{ id: string }[]>`insert into teams (name) values ('outsiders') returning id`;
  await t.sql`insert into team_members (team_id, user_id, role) values (${o!.id}, ${users.outsider}, 'owner')`;
});

test.after(async () => {
  await t?.stop();
});

for (const r of ROWS) {
  test(`${r.op}: every caller gets the status the rules give`, async () => {
    const wrong: string[] = [];
    for (const who of PRINCIPALS) {
      const cell = await r.make(who);
      const res = await api(t, cell.method, cell.path, { key: keys[who], body: cell.body });
      if (res.status !== r.expect[who]) wrong.push(`${who}: ${cell.method} ${cell.path} → ${res.status} (expected ${r.expect[who]}) ${res.text.slice(0, 160)}`);
      if (res.status >= 400) {
        assert.is(res.headers.get('content-type'), 'application/problem+json', `${who} ${r.op}`);
        assert.is(res.body.status, res.status);
        assert.ok(res.body.detail.length > 0);
      }
      if (res.status === 401) assert.is(res.headers.get('www-authenticate'), 'Bearer');
    }
    assert.equal(wrong, [], wrong.join('\n'));
  });
}

test('the same 401 body for unknown, expired, revoked and deactivated keys', async () => {
  const bodies = await Promise.all(
    ['bk_AAAAAAAAAAAA_' + 'A'.repeat(43), keys.expired, keys.revoked, keys.deactivated].map(async (k) => (await api(t, 'GET', '/me', { key: k })).text),
  );
  assert.is(new Set(bodies).size, 1, bodies.join('\n'));
});

test.run();
