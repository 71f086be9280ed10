// Exit codes for 401/403/404/409/unreachable/usage, against a real server: one
// `error:` line and one `hint:` line on stderr, nothing on stdout.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { burrow, closedPort, tempDir, type CliEnv } from './harness.js';

let srv: TestServer;
let home: { dir: string; remove: () => void };
let c: CliEnv; // no env overrides: everything from the config file or flags
let memberKey: string;
let deadUrl: string;

test.before(async () => {
  srv = await startServer();
  home = tempDir();
  c = { configDir: home.dir };
  memberKey = await createKeyFor(srv, (await createUser(srv, { email: 'member@example.test' })).id);
  deadUrl = `http://127.0.0.1:${await closedPort()}`;
});

test.after(async () => {
  await srv?.stop();
  home?.remove();
});

test('exit codes: 401 → 3, 403 → 3, 404 → 4, 409 → 5, each with one error line and a hint', async () => {
  const s = (token: string): CliEnv => ({ ...c, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: token } });
  const bad = await burrow(s('bk_AAAAAAAAAAAA_' + 'A'.repeat(43)), ['keys', 'list']);
  assert.is(bad.code, 3);
  // This server has no login provider: the hint says how else to get a key (hints.test.ts).
  assert.match(bad.stderr, /^error: Unauthorized: .+\nhint: .*ask an administrator for a key/);
  const forbidden = await burrow(s(memberKey), ['users', 'list']);
  assert.is(forbidden.code, 3);
  assert.match(forbidden.stderr, /^error: Forbidden: .+\nhint: user management needs an admin key/);
  const missing = await burrow(s(srv.adminKey), ['teams', 'delete', '00000000-0000-4000-8000-000000000000']);
  assert.is(missing.code, 4);
  assert.match(missing.stderr, /^error: Not Found: .+\nhint: /);
  assert.is((await burrow(s(srv.adminKey), ['teams', 'create', 'dup'])).code, 0);
  const conflict = await burrow(s(srv.adminKey), ['teams', 'create', 'dup']);
  assert.is(conflict.code, 5);
  assert.match(conflict.stderr, /^error: Conflict: .+\nhint: team names are unique on the server/);
  for (const r of [bad, forbidden, missing, conflict]) {
    assert.is(r.stdout, '');
    assert.is(r.stderr.trimEnd().split('\n').length, 2, r.stderr);
  }
});

test('usage errors exit 2: unknown command, unknown option, missing argument, bad choice', async () => {
  for (const args of [['nope'], ['keys', 'list', '--nope'], ['keys', 'create'], ['users', 'set-role', 'x', 'god'], ['keys']]) {
    const r = await burrow(c, args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
  }
  const r = await burrow(c, ['keys', 'lst']);
  assert.match(r.stderr, /unknown command 'lst'[\s\S]*hint: see `burrow keys --help`/);
});

test('--json on an error prints nothing on stdout', async () => {
  const r = await burrow({ ...c, env: { BURROW_SERVER: deadUrl, BURROW_TOKEN: memberKey } }, ['keys', 'list', '--json']);
  assert.is(r.code, 6);
  assert.is(r.stdout, '');
});

test('--server: nothing listening → exit 6 naming the URL, even without a key; no scheme → exit 2', async () => {
  // No key anywhere: a mistyped address must still say "unreachable", not "not logged in".
  const dead = await burrow(c, ['keys', 'list', '--server', deadUrl]);
  assert.is(dead.code, 6, dead.stderr);
  assert.match(dead.stderr, new RegExp(`^error: server unreachable: cannot connect to ${deadUrl}`, 'm'));
  // A live server without a key is still "not logged in" (exit 3).
  const live = await burrow(c, ['keys', 'list', '--server', srv.url]);
  assert.is(live.code, 3, live.stderr);
  assert.match(live.stderr, /^error: not logged in: /m);
  const host = `localhost:${new URL(srv.url).port}`;
  for (const [server, why] of [[host, /has scheme "localhost", not http or https/], [new URL(srv.url).host, /is not a URL/], ['ftp://127.0.0.1:1', /has scheme "ftp", not http or https/], ['::nonsense', /is not a URL/]] as const) {
    const r = await burrow(c, ['keys', 'list', '--server', server]);
    assert.is(r.code, 2, `${server}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`^error: invalid server: --server "${server.replace(/[.:/]/g, '\\$&')}" `, 'm'));
    assert.match(r.stderr, why);
    assert.match(r.stderr, /^hint: give it with its scheme, e.g. http:\/\//m);
    assert.not.match(r.stderr, /localhost:\/\/|not logged in/);
  }
  const env = await burrow({ ...c, env: { BURROW_SERVER: host, BURROW_TOKEN: memberKey } }, ['keys', 'list']);
  assert.is(env.code, 2);
  assert.match(env.stderr, /^error: invalid server: BURROW_SERVER "/m);
});

test('403 details say the operation in words, not its operation id', async () => {
  const tunnelsKey = await createKeyFor(srv, (await createUser(srv, { email: 'ci@example.test' })).id, { scopes: ['tunnels'] });
  const r = await burrow({ ...c, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: tunnelsKey } }, ['keys', 'list']);
  assert.is(r.code, 3);
  assert.match(r.stderr, /^error: Forbidden: listing keys needs a key with the management scope; this key has tunnels$/m);
  const admin = await burrow({ ...c, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: memberKey } }, ['users', 'list']);
  assert.match(admin.stderr, /^error: Forbidden: listing users needs the admin role$/m);
  assert.not.match(r.stderr + admin.stderr, /List_/);
});

test('under --json an error is one JSON object on stderr, stdout stays empty, the exit code is the same', async () => {
  const s = (token: string): CliEnv => ({ ...c, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: token } });
  const forbidden = await burrow(s(memberKey), ['users', 'list', '--json']);
  assert.is(forbidden.code, 3);
  assert.is(forbidden.stdout, '');
  const e = JSON.parse(forbidden.stderr) as Record<string, unknown>;
  assert.equal(Object.keys(e), ['error', 'hint', 'exit_code', 'status']);
  assert.match(String(e.error), /^Forbidden: /);
  assert.is(e.status, 403);
  assert.is(e.exit_code, 3);
  const down = await burrow({ ...c, env: { BURROW_SERVER: deadUrl, BURROW_TOKEN: srv.adminKey } }, ['keys', 'list', '--json']);
  assert.is(down.code, 6);
  const d = JSON.parse(down.stderr) as { status: unknown; exit_code: number };
  assert.is(d.status, null);
  assert.is(d.exit_code, 6);
});

test.run();
