import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, type ApiResponse } from '../helpers/fixtures.js';

// Teams and members: shapes and every rule of teams and members, through the
// API only (the caller's own team is made with Create_team, as a user would).

const TEAM_FIELDS = ['created_at', 'id', 'name', 'updated_at'];
const MEMBER_FIELDS = ['created_at', 'id', 'role', 'team_id', 'user_id'];
const ISO_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const NO_SUCH = '00000000-0000-4000-8000-000000000000';

let t: TestServer;
let seedId: string;
let n = 0;
const fieldsOf = (o: object) => Object.keys(o).sort();
const teamName = (what: string) => `${what}-${++n}`;

interface Caller {
  id: string;
  key: string;
}
const admin = (): Caller => ({ id: seedId, key: t.adminKey });

async function user(role: 'admin' | 'member' = 'member'): Promise<Caller> {
  const u = await createUser(t, { role });
  return { id: u.id, key: await createKeyFor(t, u.id) };
}

/** Create_team as `who`; asserts 201 and returns the team. */
async function newTeam(who: Caller, name = teamName('team')) {
  const res = await api(t, 'POST', '/teams', { key: who.key, body: { name } });
  assert.is(res.status, 201, res.text);
  return res.body as { id: string; name: string; created_at: string; updated_at: string };
}

async function add(who: Caller, teamId: string, userId: string) {
  return api(t, 'POST', `/teams/${teamId}/members`, { key: who.key, body: { user_id: userId } });
}

async function members(who: Caller, teamId: string) {
  return api(t, 'GET', `/teams/${teamId}/members`, { key: who.key });
}

/** user_id → role of the team's members, read as the admin. */
async function roles(teamId: string): Promise<Record<string, string>> {
  const res = await api(t, 'GET', `/teams/${teamId}/members`, { key: t.adminKey });
  assert.is(res.status, 200, res.text);
  return Object.fromEntries(res.body.map((m: { user_id: string; role: string }) => [m.user_id, m.role]));
}

function assertProblem(res: { status: number; body: { type: string; status: number; detail: string }; headers: Headers }, status: number, code: string) {
  assert.is(res.status, status, JSON.stringify(res.body));
  assert.is(res.headers.get('content-type'), 'application/problem+json');
  assert.is(res.body.type, `/problems/${code}`);
  assert.is(res.body.status, status);
  assert.ok(res.body.detail.length > 0);
}

test.before(async () => {
  t = await startServer();
  seedId = (await api(t, 'GET', '/me', { key: t.adminKey })).body.id;
});

test.after(async () => {
  await t?.stop();
});

test('Create_team: 201 with the Team shape; the caller is its only member, as owner', async () => {
  const ann = await user();
  const before = Date.now();
  const res = await api(t, 'POST', '/teams', { key: ann.key, body: { name: 'platform' } });
  assert.is(res.status, 201, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.equal(fieldsOf(res.body), TEAM_FIELDS);
  assert.match(res.body.id, UUID);
  assert.is(res.body.name, 'platform');
  assert.match(res.body.created_at, ISO_Z);
  assert.match(res.body.updated_at, ISO_Z);
  assert.ok(Math.abs(Date.parse(res.body.created_at) - before) < 10_000);
  const m = await members(ann, res.body.id);
  assert.is(m.status, 200);
  assert.is(m.body.length, 1);
  assert.equal(fieldsOf(m.body[0]), MEMBER_FIELDS);
  assert.match(m.body[0].id, UUID);
  assert.is(m.body[0].team_id, res.body.id);
  assert.is(m.body[0].user_id, ann.id);
  assert.is(m.body[0].role, 'owner');
  assert.match(m.body[0].created_at, ISO_Z);
});

test('Create_team: a duplicate name is 409 (for anyone); an empty name is 400', async () => {
  const ann = await user();
  const bob = await user();
  const name = teamName('dup');
  await newTeam(ann, name);
  assertProblem(await api(t, 'POST', '/teams', { key: bob.key, body: { name } }), 409, 'conflict');
  assertProblem(await api(t, 'POST', '/teams', { key: t.adminKey, body: { name } }), 409, 'conflict');
  assertProblem(await api(t, 'POST', '/teams', { key: ann.key, body: { name: '' } }), 400, 'bad-request');
  assertProblem(await api(t, 'POST', '/teams', { key: ann.key, body: {} }), 400, 'bad-request');
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from teams where name = ${name}`;
  assert.is(count, 1);
  assert.equal((await api(t, 'GET', '/teams', { key: bob.key })).body, [], 'the refused creation left bob without a team');
});

test('Create_team: owner_id = yourself is fine; owner_id = someone else needs admin (403)', async () => {
  const ann = await user();
  const bob = await user();
  const own = await api(t, 'POST', '/teams', { key: ann.key, body: { name: teamName('self'), owner_id: ann.id } });
  assert.is(own.status, 201, own.text);
  assert.equal(await roles(own.body.id), { [ann.id]: 'owner' });
  const shouting = await api(t, 'POST', '/teams', { key: ann.key, body: { name: teamName('upper'), owner_id: ann.id.toUpperCase() } });
  assert.is(shouting.status, 201, `your own id in capitals is still you: ${shouting.text}`);
  assert.equal(await roles(shouting.body.id), { [ann.id]: 'owner' });
  const nullOwner = await api(t, 'POST', '/teams', { key: ann.key, body: { name: teamName('nullowner'), owner_id: null } });
  assert.is(nullOwner.status, 201, nullOwner.text);
  assert.equal(await roles(nullOwner.body.id), { [ann.id]: 'owner' });
  const name = teamName('for-bob');
  assertProblem(await api(t, 'POST', '/teams', { key: ann.key, body: { name, owner_id: bob.id } }), 403, 'forbidden');
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from teams where name = ${name}`;
  assert.is(count, 0, 'nothing was created');
});

test('Create_team: an admin may name another owner (and is not made a member); an unknown owner is 404', async () => {
  const bob = await user();
  const res = await api(t, 'POST', '/teams', { key: t.adminKey, body: { name: teamName('bobs'), owner_id: bob.id } });
  assert.is(res.status, 201, res.text);
  assert.equal(await roles(res.body.id), { [bob.id]: 'owner' });
  assert.equal((await api(t, 'GET', '/teams', { key: bob.key })).body, [res.body]);
  const name = teamName('ghost');
  assertProblem(await api(t, 'POST', '/teams', { key: t.adminKey, body: { name, owner_id: NO_SUCH } }), 404, 'not-found');
  assertProblem(await api(t, 'POST', '/teams', { key: t.adminKey, body: { name, owner_id: 'not-a-uuid' } }), 400, 'bad-request');
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from teams where name = ${name}`;
  assert.is(count, 0);
});

test('List_teams: admins see every team; others see the teams they belong to, in any role', async () => {
  const ann = await user();
  const bob = await user();
  const loner = await user();
  const a = await newTeam(ann);
  const b = await newTeam(bob);
  assert.is((await add(ann, a.id, bob.id)).status, 201);
  const ids = (res: { body: { id: string }[] }) => res.body.map((x) => x.id).sort();
  const annSees = await api(t, 'GET', '/teams', { key: ann.key });
  assert.is(annSees.status, 200);
  assert.equal(annSees.body, [a]);
  assert.equal(ids(await api(t, 'GET', '/teams', { key: bob.key })), [a.id, b.id].sort());
  assert.is((await api(t, 'GET', '/teams', { key: loner.key })).text, '[]');
  const all = await api(t, 'GET', '/teams', { key: t.adminKey });
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from teams`;
  assert.is(all.body.length, count, 'the admin sees every team');
  assert.ok(all.body.some((x: { id: string }) => x.id === a.id) && all.body.some((x: { id: string }) => x.id === b.id));
  for (const x of all.body) assert.equal(fieldsOf(x), TEAM_FIELDS);
});

test("List_team_members: members and admins see the list; others get 404 (the team's existence is not revealed)", async () => {
  const ann = await user();
  const bob = await user();
  const eve = await user();
  const team = await newTeam(ann);
  assert.is((await add(ann, team.id, bob.id)).status, 201);
  const byBob = await members(bob, team.id);
  assert.is(byBob.status, 200);
  assert.equal(byBob.body.map((m: { user_id: string; role: string }) => [m.user_id, m.role]), [[ann.id, 'owner'], [bob.id, 'member']]);
  const byAdmin = await members(admin(), team.id);
  assert.equal(byAdmin.body, byBob.body);
  const byEve = await members(eve, team.id);
  const unknown = await members(eve, NO_SUCH);
  assertProblem(byEve, 404, 'not-found');
  assertProblem(unknown, 404, 'not-found');
  assert.is(byEve.body.title, unknown.body.title);
});

test('Add_team_member: 201 with the TeamMember (role member); duplicate 409; unknown user or team 404', async () => {
  const ann = await user();
  const bob = await user();
  const team = await newTeam(ann);
  const res = await add(ann, team.id, bob.id);
  assert.is(res.status, 201, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.equal(fieldsOf(res.body), MEMBER_FIELDS);
  assert.is(res.body.team_id, team.id);
  assert.is(res.body.user_id, bob.id);
  assert.is(res.body.role, 'member');
  assert.match(res.body.id, UUID);
  assert.match(res.body.created_at, ISO_Z);
  const listed = (await members(ann, team.id)).body.find((m: { user_id: string }) => m.user_id === bob.id);
  assert.equal(listed, res.body);
  assertProblem(await add(ann, team.id, bob.id), 409, 'conflict');
  assertProblem(await add(ann, team.id, ann.id), 409, 'conflict');
  assertProblem(await add(ann, team.id, NO_SUCH), 404, 'not-found');
  assertProblem(await add(ann, NO_SUCH, bob.id), 404, 'not-found');
  assertProblem(await add(admin(), NO_SUCH, bob.id), 404, 'not-found');
  // The new member can now see the team; its role is member, so adding others is refused.
  assert.equal((await api(t, 'GET', '/teams', { key: bob.key })).body, [team]);
  assertProblem(await add(bob, team.id, (await user()).id), 403, 'forbidden');
  assert.equal(await roles(team.id), { [ann.id]: 'owner', [bob.id]: 'member' });
});

test('Add_team_member: an admin who is not a member may add; the admin stays outside the team', async () => {
  const ann = await user();
  const bob = await user();
  const team = await newTeam(ann);
  const res = await add(admin(), team.id, bob.id);
  assert.is(res.status, 201, res.text);
  assert.equal(await roles(team.id), { [ann.id]: 'owner', [bob.id]: 'member' });
});

test('Remove_team_member: 200 {}; the removed member loses sight of the team', async () => {
  const ann = await user();
  const bob = await user();
  const team = await newTeam(ann);
  await add(ann, team.id, bob.id);
  const res = await api(t, 'DELETE', `/teams/${team.id}/members/${bob.id}`, { key: ann.key });
  assert.is(res.status, 200, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.is(res.text, '{}');
  assert.equal(await roles(team.id), { [ann.id]: 'owner' });
  assert.is((await api(t, 'GET', '/teams', { key: bob.key })).text, '[]');
  assertProblem(await members(bob, team.id), 404, 'not-found');
  // Not a member (any more): 404, also for an admin.
  assertProblem(await api(t, 'DELETE', `/teams/${team.id}/members/${bob.id}`, { key: ann.key }), 404, 'not-found');
  assertProblem(await api(t, 'DELETE', `/teams/${team.id}/members/${NO_SUCH}`, { key: t.adminKey }), 404, 'not-found');
});

test('Remove_team_member: a member may remove themselves, but not another member (403)', async () => {
  const ann = await user();
  const bob = await user();
  const cat = await user();
  const team = await newTeam(ann);
  await add(ann, team.id, bob.id);
  await add(ann, team.id, cat.id);
  assertProblem(await api(t, 'DELETE', `/teams/${team.id}/members/${cat.id}`, { key: bob.key }), 403, 'forbidden');
  const self = await api(t, 'DELETE', `/teams/${team.id}/members/${bob.id}`, { key: bob.key });
  assert.is(self.status, 200, self.text);
  assert.is(self.text, '{}');
  assert.equal(await roles(team.id), { [ann.id]: 'owner', [cat.id]: 'member' });
});

test('the last owner can be neither removed nor demoted (409), by themselves or an admin', async () => {
  const ann = await user();
  const bob = await user();
  const team = await newTeam(ann);
  await add(ann, team.id, bob.id);
  for (const who of [ann, admin()]) {
    assertProblem(await api(t, 'DELETE', `/teams/${team.id}/members/${ann.id}`, { key: who.key }), 409, 'conflict');
    assertProblem(await api(t, 'PUT', `/teams/${team.id}/members/${ann.id}/role`, { key: who.key, body: { role: 'member' } }), 409, 'conflict');
  }
  // Confirming the sole owner as owner changes nothing and is fine.
  const same = await api(t, 'PUT', `/teams/${team.id}/members/${ann.id}/role`, { key: ann.key, body: { role: 'owner' } });
  assert.is(same.status, 200, same.text);
  assert.is(same.body.role, 'owner');
  assert.equal(await roles(team.id), { [ann.id]: 'owner', [bob.id]: 'member' });
});

test('Set_team_member_role: 200 with the updated TeamMember; with two owners one may step down', async () => {
  const ann = await user();
  const bob = await user();
  const team = await newTeam(ann);
  const added = await add(ann, team.id, bob.id);
  const res = await api(t, 'PUT', `/teams/${team.id}/members/${bob.id}/role`, { key: ann.key, body: { role: 'owner' } });
  assert.is(res.status, 200, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.equal(res.body, { ...added.body, role: 'owner' }, 'same membership, new role');
  // Now ann may step down, and bob, the owner, manages the team.
  const down = await api(t, 'PUT', `/teams/${team.id}/members/${ann.id}/role`, { key: ann.key, body: { role: 'member' } });
  assert.is(down.status, 200, down.text);
  assert.is(down.body.role, 'member');
  assert.equal(await roles(team.id), { [ann.id]: 'member', [bob.id]: 'owner' });
  // Team roles are read per request: ann's next request already lacks the owner's rights.
  assertProblem(await add(ann, team.id, (await user()).id), 403, 'forbidden');
  assertProblem(await api(t, 'PUT', `/teams/${team.id}/members/${bob.id}/role`, { key: ann.key, body: { role: 'member' } }), 403, 'forbidden');
  // bob is the last owner now.
  assertProblem(await api(t, 'PUT', `/teams/${team.id}/members/${bob.id}/role`, { key: bob.key, body: { role: 'member' } }), 409, 'conflict');
  // The admin (not a member) may set roles too.
  const byAdmin = await api(t, 'PUT', `/teams/${team.id}/members/${ann.id}/role`, { key: t.adminKey, body: { role: 'owner' } });
  assert.is(byAdmin.status, 200, byAdmin.text);
  assert.equal(await roles(team.id), { [ann.id]: 'owner', [bob.id]: 'owner' });
  // Then one owner may leave.
  assert.is((await api(t, 'DELETE', `/teams/${team.id}/members/${bob.id}`, { key: bob.key })).status, 200);
  assert.equal(await roles(team.id), { [ann.id]: 'owner' });
});

test('Set_team_member_role: a non-member is 404; a role outside TeamRole is 400', async () => {
  const ann = await user();
  const bob = await user();
  const team = await newTeam(ann);
  assertProblem(await api(t, 'PUT', `/teams/${team.id}/members/${bob.id}/role`, { key: ann.key, body: { role: 'owner' } }), 404, 'not-found');
  const bad = await api(t, 'PUT', `/teams/${team.id}/members/${ann.id}/role`, { key: ann.key, body: { role: 'admin' } });
  assertProblem(bad, 400, 'bad-request');
  assert.match(bad.body.detail, /role/);
  assert.equal(await roles(team.id), { [ann.id]: 'owner' });
});

test('Delete_team: 200 {}; the team and its memberships are gone and its name is free again', async () => {
  const ann = await user();
  const bob = await user();
  const team = await newTeam(ann);
  await add(ann, team.id, bob.id);
  assertProblem(await api(t, 'DELETE', `/teams/${team.id}`, { key: bob.key }), 403, 'forbidden');
  const res = await api(t, 'DELETE', `/teams/${team.id}`, { key: ann.key });
  assert.is(res.status, 200, res.text);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.is(res.text, '{}');
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from team_members where team_id = ${team.id}`;
  assert.is(count, 0, 'memberships removed');
  assert.is((await api(t, 'GET', '/teams', { key: ann.key })).text, '[]');
  assert.is((await api(t, 'GET', '/teams', { key: bob.key })).text, '[]');
  assert.ok(!(await api(t, 'GET', '/teams', { key: t.adminKey })).body.some((x: { id: string }) => x.id === team.id));
  assertProblem(await members(admin(), team.id), 404, 'not-found');
  assertProblem(await api(t, 'DELETE', `/teams/${team.id}`, { key: ann.key }), 404, 'not-found');
  assertProblem(await api(t, 'DELETE', `/teams/${team.id}`, { key: t.adminKey }), 404, 'not-found');
  const again = await api(t, 'POST', '/teams', { key: bob.key, body: { name: team.name } });
  assert.is(again.status, 201, again.text);
});

test('Delete_team: an admin who is not a member may delete any team', async () => {
  const ann = await user();
  const team = await newTeam(ann);
  const res = await api(t, 'DELETE', `/teams/${team.id}`, { key: t.adminKey });
  assert.is(res.status, 200, res.text);
  assert.is(res.text, '{}');
  const [{ count }] = await t.sql<{ count: number }[]>`select count(*)::int as count from teams where id = ${team.id}`;
  assert.is(count, 0);
});

test('teams created while others list theirs: every request answers promptly, none fails', async () => {
  // Create_team writes the team and its owner in one transaction; requests on other database
  // connections meanwhile must wait for it, not fail or stall. (On the embedded database this
  // once left most of them hanging and some failing with 500 "portal does not exist".)
  const ann = await user();
  const PER_KIND = 15;
  const outcome = (p: Promise<ApiResponse>) => p.then((r) => r.status, (e: Error) => e.message);
  const results = await Promise.all([
    ...Array.from({ length: PER_KIND }, (_, i) => outcome(api(t, 'POST', '/teams', { key: ann.key, body: { name: teamName(`burst${i}`) } }))),
    ...Array.from({ length: PER_KIND }, () => outcome(api(t, 'GET', '/teams', { key: ann.key }))),
  ]);
  assert.is(results.join(' '), [...Array<number>(PER_KIND).fill(201), ...Array<number>(PER_KIND).fill(200)].join(' '));
  assert.is((await api(t, 'GET', '/teams', { key: ann.key })).body.length, PER_KIND);
});

test.run();
