// burrow teams ...: human and --json output against a real burrowd, with a second user joining
// a team the way docs/cli.md shows.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createUser } from '../helpers/fixtures.js';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let admin: CliEnv;
let bob: CliEnv;
let bobId: string;
let teamId: string;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, admin } = suite);
  ({ id: bobId, cli: bob } = await suite.member({ email: 'bob@example.test', name: 'Bob' }));
});

test.after(async () => {
  await suite?.stop();
});

test('teams create (human) makes you owner; --json is the Team', async () => {
  const h = await burrow(admin, ['teams', 'create', 'web']);
  assert.is(h.code, 0, h.stderr);
  const m = /created team web \(([0-9a-f-]{36})\)\nadd people with: burrow teams add-member web USER_ID\n$/.exec(h.stdout);
  assert.ok(m, h.stdout);
  teamId = m![1]!;
  const j = await burrow(bob, ['teams', 'create', 'bobs', '--json']);
  assert.is(j.code, 0, j.stderr);
  const t = JSON.parse(j.stdout);
  assert.is(t.name, 'bobs');
  assert.ok(t.id && t.created_at && t.updated_at);
});

test('teams list: admins see all teams, members their own; --json is the array', async () => {
  const h = await burrow(admin, ['teams', 'list']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, /^ID\s+NAME\s+CREATED\n/);
  assert.match(h.stdout, new RegExp(`^${teamId}\\s+web\\s+\\S+ ago$`, 'm'));
  assert.match(h.stdout, /\sbobs\s/);
  const j = JSON.parse((await burrow(bob, ['teams', 'list', '--json'])).stdout);
  assert.equal(j.map((t: { name: string }) => t.name), ['bobs']);
});

test('teams add-member by name and user id (human), then members lists both', async () => {
  const r = await burrow(admin, ['teams', 'add-member', 'web', bobId]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`added ${bobId} to web as member`));
  const again = await burrow(admin, ['teams', 'add-member', 'web', bobId]);
  assert.is(again.code, 5);
  assert.match(again.stderr, /hint: that user is already a member/);
  const h = await burrow(bob, ['teams', 'members', 'web']);
  assert.is(h.code, 0, h.stderr); // bob now sees the team by its name
  assert.match(h.stdout, /^USER ID\s+ROLE\s+ADDED\n/);
  assert.match(h.stdout, new RegExp(`^${bobId}\\s+member\\s+`, 'm'));
  assert.match(h.stdout, /\sowner\s/);
  const a = await burrow(admin, ['teams', 'members', 'web']); // admins also see emails
  assert.match(a.stdout, /^USER ID\s+EMAIL\s+ROLE\s+ADDED\n/);
  assert.match(a.stdout, new RegExp(`^${bobId}\\s+bob@example\\.test\\s+member\\s+`, 'm'));
  const j = JSON.parse((await burrow(admin, ['teams', 'members', teamId.slice(0, 8), '--json'])).stdout);
  assert.is(j.length, 2);
  assert.ok(j.every((m: { team_id: string }) => m.team_id === teamId));
});

test('teams add-member by email works for admins; a member is told to use the id', async () => {
  const carol = await createUser(srv, { email: 'carol@example.test' });
  const j = await burrow(admin, ['teams', 'add-member', 'web', 'carol@example.test', '--json']);
  assert.is(j.code, 0, j.stderr);
  const m = JSON.parse(j.stdout);
  assert.is(m.user_id, carol.id);
  assert.is(m.role, 'member');
  const byBob = await burrow(bob, ['teams', 'add-member', 'bobs', 'carol@example.test']);
  assert.is(byBob.code, 2);
  assert.match(byBob.stderr, /^error: user id needed: only admins can look users up by email/m);
  assert.match(byBob.stderr, /burrow whoami/);
});

test('teams set-role (human and --json); members may not (exit 3)', async () => {
  const denied = await burrow(bob, ['teams', 'set-role', 'web', bobId, 'owner']);
  assert.is(denied.code, 3);
  const h = await burrow(admin, ['teams', 'set-role', 'web', bobId, 'owner']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, new RegExp(`${bobId} is now owner of web`));
  const j = JSON.parse((await burrow(bob, ['teams', 'set-role', teamId, 'carol@example.test', 'member', '--json', '--token', srv.adminKey])).stdout);
  assert.is(j.role, 'member');
  const bad = await burrow(admin, ['teams', 'set-role', 'web', bobId, 'king']);
  assert.is(bad.code, 2);
});

test('teams remove-member: "me" leaves; --json prints {}', async () => {
  const carol = JSON.parse((await burrow(admin, ['users', 'list', '--json'])).stdout).find((u: { email: string }) => u.email === 'carol@example.test');
  const j = await burrow(admin, ['teams', 'remove-member', 'web', carol.id, '--json']);
  assert.is(j.code, 0, j.stderr);
  assert.equal(JSON.parse(j.stdout), {});
  const h = await burrow(bob, ['teams', 'remove-member', 'bobs', 'me']);
  assert.is(h.code === 0 || h.code === 5, true, h.stderr); // the last owner may not leave
  if (h.code === 5) assert.match(h.stderr, /hint: a team keeps at least one owner/);
  else assert.match(h.stdout, /removed .* from bobs/);
});

test('teams delete (human, by name) and --json; unknown name → exit 4', async () => {
  const h = await burrow(admin, ['teams', 'delete', 'web']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, /deleted team web/);
  const again = await burrow(admin, ['teams', 'delete', 'web']);
  assert.is(again.code, 4);
  assert.match(again.stderr, /^error: Not Found: no team matches "web"\nhint: `burrow teams list` lists them/);
  const j = await burrow(bob, ['teams', 'delete', 'bobs', '--json']);
  assert.is(j.code, 0, j.stderr);
  assert.equal(JSON.parse(j.stdout), {});
});

test.run();
