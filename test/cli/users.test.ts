// burrow users ... (admins): human and --json output against a real burrowd.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let admin: CliEnv;
let bob: CliEnv;
let bobId: string;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, admin } = suite);
  ({ id: bobId, cli: bob } = await suite.member({ email: 'bob@example.test', name: 'Bob' }));
});

test.after(async () => {
  await suite?.stop();
});

test('users list: table and --json with --limit; members get exit 3', async () => {
  const h = await burrow(admin, ['users', 'list']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, /^ID\s+EMAIL\s+NAME\s+ROLE\s+STATUS\s+CREATED\n/);
  assert.match(h.stdout, new RegExp(`^${bobId}\\s+bob@example\\.test\\s+Bob\\s+member\\s+active\\s+`, 'm'));
  assert.match(h.stdout, /seed@burrow\.local\s+Seed admin\s+admin\s+active/);
  const j = JSON.parse((await burrow(admin, ['users', 'list', '--limit', '1', '--json'])).stdout);
  assert.is(j.length, 1);
  assert.is((await burrow(bob, ['users', 'list'])).code, 3);
});

test('users deactivate / reactivate by email (human and --json): the key stops and starts working', async () => {
  const d = await burrow(admin, ['users', 'deactivate', 'bob@example.test']);
  assert.is(d.code, 0, d.stderr);
  assert.match(d.stdout, /bob@example\.test is deactivated/);
  const locked = await burrow(bob, ['whoami']);
  assert.is(locked.code, 3);
  const r = await burrow(admin, ['users', 'reactivate', bobId, '--json']);
  assert.is(r.code, 0, r.stderr);
  const u = JSON.parse(r.stdout);
  assert.is(u.deactivated_at, null);
  assert.is((await burrow(bob, ['whoami'])).code, 0);
  const self = await burrow(admin, ['users', 'deactivate', 'seed@burrow.local']);
  assert.is(self.code, 5);
});

test('users set-role (human and --json); unknown email → exit 4', async () => {
  const h = await burrow(admin, ['users', 'set-role', 'bob@example.test', 'admin']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, /bob@example\.test is now admin/);
  const j = JSON.parse((await burrow(admin, ['users', 'set-role', bobId, 'member', '--json'])).stdout);
  assert.is(j.role, 'member');
  const missing = await burrow(admin, ['users', 'set-role', 'nobody@example.test', 'admin']);
  assert.is(missing.code, 4);
});

test('users create: human and --json; --name, --role; taken email exit 5; member exit 3; bad email exit 2 with the detail said once', async () => {
  const h = await burrow(admin, ['users', 'create', 'carol@example.test']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, /^✓ created member carol@example\.test \([0-9a-f-]{36}\)$/m);
  assert.match(h.stdout, /burrow keys create NAME --user carol@example\.test/);
  const j = await burrow(admin, ['users', 'create', 'dave@example.test', '--name', 'Dave D', '--role', 'admin', '--json']);
  assert.is(j.code, 0, j.stderr);
  const dave = JSON.parse(j.stdout);
  assert.equal([dave.email, dave.name, dave.role, dave.deactivated_at], ['dave@example.test', 'Dave D', 'admin', null]);
  const listed = await burrow(admin, ['users', 'list']);
  assert.match(listed.stdout, /carol@example\.test\s+carol\s+member\s+active/);
  const dup = await burrow(admin, ['users', 'create', 'CAROL@example.test']);
  assert.is(dup.code, 5);
  assert.match(dup.stderr, /^error: Conflict: .*already exists/m);
  assert.is((await burrow(bob, ['users', 'create', 'eve@example.test'])).code, 3);
  const bad = await burrow(admin, ['users', 'create', 'not-an-email']);
  assert.is(bad.code, 2, bad.stderr);
  // Said once, in words: not the schema's format name, not repeated in parentheses.
  assert.match(bad.stderr, /^error: Bad Request: body field "email" must be an email address such as name@example\.com, got "not-an-email"$/m);
  assert.is(bad.stderr.split('not-an-email').length, 2, bad.stderr);
  const role = await burrow(admin, ['users', 'create', 'x@example.test', '--role', 'owner']);
  assert.is(role.code, 2);
});

test.run();
