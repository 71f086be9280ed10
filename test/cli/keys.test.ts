// burrow keys create|list|revoke against a real burrowd: human and --json output, the key shown
// once on stdout, exit codes for duplicates, bad flags, unknown and ambiguous references.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { adminOf, burrow, memberOf, tempDir, type CliEnv } from './harness.js';

let srv: TestServer;
let cfg: { dir: string; remove: () => void };
let member: CliEnv;
let memberEmail: string;

test.before(async () => {
  srv = await startServer();
  cfg = tempDir();
  ({ email: memberEmail, cli: member } = await memberOf(srv, cfg.dir, { email: 'member@example.test', name: 'Mem Ber' }));
});

test.after(async () => {
  await srv?.stop();
  cfg?.remove();
});

test('keys create prints the key alone on stdout, the warning on stderr; the key works', async () => {
  const r = await burrow(member, ['keys', 'create', 'ci', '--scopes', 'tunnels', '--expires', '30d']);
  assert.is(r.code, 0, r.stderr);
  const key = r.stdout.trim();
  assert.match(key, /^bk_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}$/);
  assert.match(r.stderr, /created key ci \(bk_[0-9A-Za-z]{12}\) · scopes tunnels · expires 20\d\d-/);
  assert.match(r.stderr, /only time the key is shown/);
  // A tunnels-only key may read /me but not manage keys.
  const me = await burrow({ ...member, env: { ...member.env, BURROW_TOKEN: key } }, ['whoami', '--json']);
  assert.is(JSON.parse(me.stdout).email, memberEmail);
  const denied = await burrow({ ...member, env: { ...member.env, BURROW_TOKEN: key } }, ['keys', 'list']);
  assert.is(denied.code, 3);
  assert.match(denied.stderr, /^error: Forbidden: /m);
  assert.match(denied.stderr, /^hint: /m);
});

test('keys create --json is the CreatedKey; duplicate name exits 5 with a hint', async () => {
  const r = await burrow(member, ['keys', 'create', 'deploy', '--json']);
  assert.is(r.code, 0, r.stderr);
  const created = JSON.parse(r.stdout);
  assert.is(created.info.name, 'deploy');
  assert.equal(created.info.scopes, ['tunnels', 'management']);
  assert.is(created.info.expires_at, null);
  assert.ok(created.key.startsWith(created.info.key_prefix + '_'));
  assert.is(r.stderr, '');
  const dup = await burrow(member, ['keys', 'create', 'deploy']);
  assert.is(dup.code, 5);
  assert.match(dup.stderr, /^error: Conflict: .+/m);
  assert.match(dup.stderr, /^hint: .*burrow keys revoke deploy/m);
  assert.is(dup.stdout, '');
});

test('keys create rejects bad --scopes / --expires as usage errors (exit 2) before any request', async () => {
  const a = await burrow(member, ['keys', 'create', 'x', '--scopes', 'root']);
  assert.is(a.code, 2);
  assert.match(a.stderr, /unknown scope "root"/);
  const b = await burrow(member, ['keys', 'create', 'x', '--expires', 'tomorrow']);
  assert.is(b.code, 2);
  assert.match(b.stderr, /^error: invalid option: --expires: /m);
});

test('keys list: table with prefix, name, scopes, created, expires, status; --json is the API array', async () => {
  const h = await burrow(member, ['keys', 'list']);
  assert.is(h.code, 0, h.stderr);
  const lines = h.stdout.trimEnd().split('\n');
  assert.match(lines[0]!, /^ID\s+PREFIX\s+NAME\s+SCOPES\s+CREATED\s+EXPIRES\s+STATUS$/);
  assert.ok(lines.some((l) => /\bci\s+tunnels\s+\S+ ago\s+20\d\d-\d\d-\d\d \d\d:\d\d UTC\s+active$/.test(l)), h.stdout);
  assert.ok(lines.some((l) => /\bdeploy\s+tunnels,management\s+.+never\s+active$/.test(l)), h.stdout);
  const j = await burrow(member, ['keys', 'list', '--json']);
  const keys = JSON.parse(j.stdout) as { name: string; key_prefix: string }[];
  assert.ok(keys.some((k) => k.name === 'ci'));
  assert.not.ok('key' in keys[0]!);
});

test('keys revoke: by name, by id prefix, --json prints {}; unknown → exit 4', async () => {
  const list = JSON.parse((await burrow(member, ['keys', 'list', '--json'])).stdout) as { id: string; name: string }[];
  const ci = list.find((k) => k.name === 'ci')!;
  const r = await burrow(member, ['keys', 'revoke', ci.id.slice(0, 8)]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`revoked key ${ci.id}`));
  const j = await burrow(member, ['keys', 'revoke', 'deploy', '--json']);
  assert.is(j.code, 0, j.stderr);
  assert.equal(JSON.parse(j.stdout), {});
  const after = JSON.parse((await burrow(member, ['keys', 'list', '--json'])).stdout) as { name: string }[];
  assert.not.ok(after.some((k) => k.name === 'ci' || k.name === 'deploy'));
  const missing = await burrow(member, ['keys', 'revoke', 'no-such-key']);
  assert.is(missing.code, 4);
  assert.match(missing.stderr, /^error: Not Found: no key matches "no-such-key"/m);
  const uuid = await burrow(member, ['keys', 'revoke', '00000000-0000-4000-8000-000000000000']);
  assert.is(uuid.code, 4);
  assert.match(uuid.stderr, /^error: Not Found: /m);
});

test('keys revoke with an ambiguous id prefix is a usage error naming the candidates', async () => {
  const me = JSON.parse((await burrow(member, ['whoami', '--json'])).stdout);
  // Two keys whose ids share a prefix (the hash is never checked: these keys are only listed).
  await srv.sql`insert into api_keys (id, user_id, name, key_prefix, key_hash, scopes) values
    ('abcdef00-0000-4000-8000-000000000001', ${me.id}, 'twin1', 'bk_twin00000001', 'x', ${srv.sql.array(['tunnels'])}),
    ('abcdef00-0000-4000-8000-000000000002', ${me.id}, 'twin2', 'bk_twin00000002', 'x', ${srv.sql.array(['tunnels'])})`;
  const r = await burrow(member, ['keys', 'revoke', 'abcdef00']);
  assert.is(r.code, 2);
  assert.match(r.stderr, /^error: ambiguous key: "abcdef00" matches abcdef00-\S+, abcdef00-\S+$/m);
  assert.match(r.stderr, /000000000001/);
  assert.match(r.stderr, /000000000002/);
  const ok = await burrow(member, ['keys', 'revoke', 'bk_twin00000002']);
  assert.is(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /revoked key abcdef00-0000-4000-8000-000000000002/);
});

test('keys revoke: an id prefix under 8 characters is a usage error; nothing is revoked', async () => {
  await burrow(member, ['keys', 'create', 'short']);
  const before = JSON.parse((await burrow(member, ['keys', 'list', '--json'])).stdout) as { id: string; name: string }[];
  const short = before.find((k) => k.name === 'short')!;
  for (const ref of [short.id.slice(0, 1), short.id.slice(0, 7)]) {
    const r = await burrow(member, ['keys', 'revoke', ref]);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, /^error: key id prefix too short: .*at least 8 characters/m);
  }
  const after = JSON.parse((await burrow(member, ['keys', 'list', '--json'])).stdout) as { id: string; revoked_at: string | null }[];
  assert.equal(after.map((k) => k.id).sort(), before.map((k) => k.id).sort());
  assert.ok(after.every((k) => k.revoked_at === null));
  assert.is((await burrow(member, ['keys', 'revoke', short.id.slice(0, 8)])).code, 0);
});

test('keys revoke of the key the CLI is using needs --yes (exit 2 without it)', async () => {
  const key = (await burrow(member, ['keys', 'create', 'self'])).stdout.trim();
  const self: CliEnv = { ...member, env: { ...member.env, BURROW_TOKEN: key } };
  const r = await burrow(self, ['keys', 'revoke', 'self']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /^error: confirmation needed: self \(bk_\w{12}\) is the key this command is using/m);
  assert.match(r.stderr, /^hint: add --yes /m);
  assert.is((await burrow(self, ['whoami'])).code, 0);
  const yes = await burrow(self, ['keys', 'revoke', 'self', '--yes']);
  assert.is(yes.code, 0, yes.stderr);
  assert.is((await burrow(self, ['whoami'])).code, 3);
});

test('keys create --user (admins): a key for that user by email or id, which answers whoami as them', async () => {
  const admin = adminOf(srv, cfg.dir);
  const r = await burrow(admin, ['keys', 'create', 'handed-over', '--user', memberEmail, '--scopes', 'tunnels']);
  assert.is(r.code, 0, r.stderr);
  const key = r.stdout.trim();
  assert.match(key, /^bk_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}$/);
  assert.match(r.stderr, new RegExp(`created key handed-over \\(bk_[0-9A-Za-z]{12}\\) for ${memberEmail.replace('.', '\\.')} · scopes tunnels`));
  const me = JSON.parse((await burrow({ ...member, env: { ...member.env, BURROW_TOKEN: key } }, ['whoami', '--json'])).stdout);
  assert.is(me.email, memberEmail);
  const j = await burrow(admin, ['keys', 'create', 'by-id', '--user', me.id, '--json']);
  assert.is(j.code, 0, j.stderr);
  assert.is(JSON.parse(j.stdout).info.name, 'by-id');
  const mine = JSON.parse((await burrow(member, ['keys', 'list', '--json'])).stdout) as { name: string }[];
  assert.ok(mine.some((k) => k.name === 'by-id'), 'the member lists the key as theirs');
  assert.is((await burrow(admin, ['keys', 'create', 'x', '--user', 'nobody@example.test'])).code, 4);
  assert.is((await burrow(admin, ['keys', 'create', 'x', '--user', '00000000-0000-4000-8000-000000000000'])).code, 4);
  assert.is((await burrow(admin, ['keys', 'create', 'by-id', '--user', me.id])).code, 5);
  assert.is((await burrow(member, ['keys', 'create', 'x', '--user', me.id])).code, 3);
});

test("keys list --user / keys revoke --user (admins): another user's keys, by email or id; the revoked key stops working", async () => {
  const admin = adminOf(srv, cfg.dir);
  const made = await burrow(admin, ['keys', 'create', 'leaky', '--user', memberEmail]);
  assert.is(made.code, 0, made.stderr);
  const leaked = made.stdout.trim();
  const table = await burrow(admin, ['keys', 'list', '--user', memberEmail]);
  assert.is(table.code, 0, table.stderr);
  assert.match(table.stdout, /^ID\s+PREFIX\s+NAME/m);
  assert.match(table.stdout, new RegExp(`${leaked.slice(0, 15)}\\s+leaky\\s`));
  const asJson = JSON.parse((await burrow(admin, ['keys', 'list', '--user', memberEmail, '--json'])).stdout) as { id: string; name: string }[];
  const mine = JSON.parse((await burrow(member, ['keys', 'list', '--json'])).stdout) as { id: string }[];
  assert.equal(asJson.map((k) => k.id), mine.map((k) => k.id), "the member's own list, as the admin sees it");
  const r = await burrow(admin, ['keys', 'revoke', 'leaky', '--user', memberEmail]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`revoked key [0-9a-f-]{36} of ${memberEmail.replace('.', '\\.')}`));
  const as = { ...member, env: { ...member.env, BURROW_TOKEN: leaked } };
  assert.is((await burrow(as, ['whoami'])).code, 3, 'the revoked key is refused');
  assert.ok((await burrow(member, ['whoami'])).code === 0, "the member's other key still works");
  // Gone from that user's list: the name no longer resolves, and the hint lists their keys.
  const again = await burrow(admin, ['keys', 'revoke', 'leaky', '--user', memberEmail]);
  assert.is(again.code, 2, again.stderr);
  assert.match(again.stderr, /burrow keys list --user member@example\.test/);
  const leakedId = asJson.find((k) => k.name === 'leaky')!.id;
  const byId = await burrow(admin, ['keys', 'revoke', leakedId, '--user', memberEmail]);
  assert.is(byId.code, 4, byId.stderr);
  assert.match(byId.stderr, /no active key/);
  const id = asJson.find((k) => k.name !== 'leaky')!.id;
  const me = JSON.parse((await burrow(member, ['whoami', '--json'])).stdout) as { id: string };
  const j = await burrow(admin, ['keys', 'list', '--user', me.id, '--json']);
  assert.ok((JSON.parse(j.stdout) as { id: string }[]).some((k) => k.id === id), 'by user id too');
  // Not for members (403 → exit 3), and an unknown user is 4.
  const denied = await burrow(member, ['keys', 'list', '--user', me.id]);
  assert.is(denied.code, 3);
  assert.match(denied.stderr, /^hint: .*admin key/m);
  assert.is((await burrow(admin, ['keys', 'list', '--user', '00000000-0000-4000-8000-000000000000'])).code, 4);
  const help = await burrow(admin, ['keys', 'revoke', '--help']);
  assert.match(help.stdout, /--user <id\|email>/);
});

test.run();
