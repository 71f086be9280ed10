// burrow whoami, accounts, sessions and tunnels list|get|delete against a real burrowd: human and
// --json output and exit codes. (Live tunnels: expose.test.ts.)
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { adminOf, burrow, memberOf, tempDir, type CliEnv } from './harness.js';

let srv: TestServer;
let cfg: { dir: string; remove: () => void };
let admin: CliEnv; // flags-free: server + key from env
let member: CliEnv;
let memberEmail: string;

test.before(async () => {
  srv = await startServer();
  cfg = tempDir();
  admin = adminOf(srv, cfg.dir);
  ({ email: memberEmail, cli: member } = await memberOf(srv, cfg.dir, { email: 'member@example.test', name: 'Mem Ber' }));
});

test.after(async () => {
  await srv?.stop();
  cfg?.remove();
});

test('whoami: human details, and --json is the API User', async () => {
  const h = await burrow(admin, ['whoami']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, /user\s+seed@burrow\.local/);
  assert.match(h.stdout, /role\s+admin/);
  assert.match(h.stdout, new RegExp(`server\\s+${srv.url}`));
  assert.match(h.stdout, /key\s+bk_[0-9A-Za-z]{12}…/);
  assert.not.match(h.stdout, srv.adminKey); // only the prefix, never the key
  const j = await burrow(member, ['whoami', '--json']);
  assert.is(j.code, 0, j.stderr);
  const me = JSON.parse(j.stdout);
  assert.is(me.email, memberEmail);
  assert.is(me.role, 'member');
  assert.is(j.stderr, '');
});

test('accounts: empty list says so on stderr; --json is []', async () => {
  const h = await burrow(member, ['accounts']);
  assert.is(h.code, 0, h.stderr);
  assert.is(h.stdout, '');
  assert.match(h.stderr, /no linked accounts/);
  const j = await burrow(member, ['accounts', '--json']);
  assert.equal(JSON.parse(j.stdout), []);
});

test('accounts: a linked account is listed', async () => {
  const u = await createUser(srv, { email: 'linked@example.test' });
  await srv.sql`insert into accounts (user_id, provider, subject, email) values (${u.id}, 'github', '12345', ${u.email})`;
  const env: CliEnv = { configDir: cfg.dir, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: await createKeyFor(srv, u.id) } };
  const h = await burrow(env, ['accounts']);
  assert.is(h.code, 0, h.stderr);
  assert.match(h.stdout, /^PROVIDER\s+ID\s+LINKED\ngithub\s+[0-9a-f-]{36}\s+\S+ ago\n$/);
});

test('sessions: rows with human byte units; --limit; --all is admin only (exit 3 for members)', async () => {
  const me = JSON.parse((await burrow(member, ['whoami', '--json'])).stdout);
  await srv.sql`insert into sessions (user_id, tunnel_id, tunnel_type, client_ip, connected_at, disconnected_at, bytes_in, bytes_out, requests)
    values (${me.id}, 'old', 'http', '127.0.0.1', now() - interval '2 hours', now() - interval '1 hour', 1536, 10485760, 42),
           (${me.id}, 'live', 'tcp', null, now() - interval '5 minutes', null, 0, 12, 1)`;
  const h = await burrow(member, ['sessions']);
  assert.is(h.code, 0, h.stderr);
  const lines = h.stdout.trimEnd().split('\n');
  assert.match(lines[0]!, /^TUNNEL\s+CLIENT\s+CONNECTED\s+DURATION\s+STATE\s+REQUESTS\s+IN\s+OUT$/);
  assert.match(lines[1]!, /^live\s+-\s+.+UTC\s+5m \d+s\s+live\s+1\s+0 B\s+12 B$/);
  assert.match(lines[2]!, /^old\s+127\.0\.0\.1\s+.+UTC\s+1h 0m\s+closed\s+42\s+1\.50 KiB\s+10\.0 MiB$/);
  const j = await burrow(member, ['sessions', '--limit', '1', '--json']);
  const rows = JSON.parse(j.stdout);
  assert.is(rows.length, 1);
  assert.is(rows[0].tunnel_id, 'live');
  const all = await burrow(member, ['sessions', '--all']);
  assert.is(all.code, 3);
  assert.match(all.stderr, /^hint: --all needs an admin key/m);
  const adminAll = await burrow(admin, ['sessions', '--all']);
  assert.is(adminAll.code, 0, adminAll.stderr);
  assert.match(adminAll.stdout, /^USER\s+TUNNEL/);
  const bad = await burrow(member, ['sessions', '--limit', '0']);
  assert.is(bad.code, 2);
});

test('tunnels list/get/delete with no tunnels: empty note, {} shapes, 404 → exit 4', async () => {
  const l = await burrow(member, ['tunnels', 'list']);
  assert.is(l.code, 0, l.stderr);
  assert.is(l.stdout, '');
  assert.match(l.stderr, /no live tunnels/);
  assert.equal(JSON.parse((await burrow(member, ['tunnels', 'list', '--json'])).stdout), []);
  const g = await burrow(member, ['tunnels', 'get', 'nope']);
  assert.is(g.code, 4);
  assert.match(g.stderr, /^error: Not Found: .*\nhint: no such live tunnel visible to you/m);
  const d = await burrow(member, ['tunnels', 'delete', 'nope', '--json']);
  assert.is(d.code, 4);
  assert.is(d.stdout, '');
});

test.run();
