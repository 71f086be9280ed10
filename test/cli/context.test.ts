// Contexts (create/use/list/current/delete), the config file's mode, and the precedence
// flag > env > file against a real server.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { burrow, closedPort, tempDir, type CliEnv } from './harness.js';

let srv: TestServer;
let home: { dir: string; remove: () => void };
let c: CliEnv; // no env overrides: everything from the config file or flags
let memberKey: string;
let otherKey: string;
let deadUrl: string;

test.before(async () => {
  srv = await startServer();
  home = tempDir();
  c = { configDir: home.dir };
  memberKey = await createKeyFor(srv, (await createUser(srv, { email: 'member@example.test' })).id);
  otherKey = await createKeyFor(srv, (await createUser(srv, { email: 'other@example.test' })).id);
  deadUrl = `http://127.0.0.1:${await closedPort()}`;
});

test.after(async () => {
  await srv?.stop();
  home?.remove();
});

const email = async (env: CliEnv, args: string[] = []) => {
  const r = await burrow(env, ['whoami', '--json', ...args]);
  assert.is(r.code, 0, r.stderr);
  return JSON.parse(r.stdout).email as string;
};

test('context create stores server + key with mode 0600 and shows only the key prefix', async () => {
  const r = await burrow(c, ['context', 'create', 'local', '--server', srv.url + '/', '--token', srv.adminKey]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`context local → ${srv.url} \\(key bk_[0-9A-Za-z]{12}…\\) \\(current\\)`));
  assert.not.match(r.stdout + r.stderr, srv.adminKey);
  const file = join(home.dir, 'burrow', 'config.json');
  assert.is(statSync(file).mode & 0o777, 0o600);
  assert.is(statSync(join(home.dir, 'burrow')).mode & 0o777, 0o700);
  const cfg = JSON.parse(readFileSync(file, 'utf8'));
  assert.equal(cfg, { currentContext: 'local', contexts: { local: { server: srv.url, token: srv.adminKey } } });
});

test('context create --json; a duplicate name exits 5; --force replaces; missing --server exits 2', async () => {
  const r = await burrow(c, ['context', 'create', 'dead', '--server', deadUrl, '--token', otherKey, '--json']);
  assert.is(r.code, 0, r.stderr);
  const v = JSON.parse(r.stdout);
  assert.equal(v, { name: 'dead', server: deadUrl, token_prefix: otherKey.slice(0, 15) + '…', current: false });
  const dup = await burrow(c, ['context', 'create', 'dead', '--server', deadUrl]);
  assert.is(dup.code, 5);
  assert.match(dup.stderr, /^error: context exists: .*\nhint: use --force/m);
  const forced = await burrow(c, ['context', 'create', 'dead', '--server', deadUrl, '--token', memberKey, '--force']);
  assert.is(forced.code, 0, forced.stderr);
  const noServer = await burrow(c, ['context', 'create', 'x']);
  assert.is(noServer.code, 2);
  const badServer = await burrow(c, ['context', 'create', 'x', '--server', 'ftp://x']);
  assert.is(badServer.code, 2);
});

test('context list marks the current one; --json has prefixes, never keys', async () => {
  const h = await burrow(c, ['context', 'list']);
  assert.is(h.code, 0, h.stderr);
  const lines = h.stdout.trimEnd().split('\n');
  assert.match(lines[0]!, /^CURRENT\s+NAME\s+SERVER\s+KEY$/);
  assert.ok(lines.some((l) => new RegExp(`^\\*\\s+local\\s+${srv.url}\\s+bk_\\w{12}…$`).test(l)), h.stdout);
  assert.ok(lines.some((l) => /^\s+dead\s+/.test(l)), h.stdout);
  const j = await burrow(c, ['context', 'list', '--json']);
  assert.not.match(j.stdout, memberKey);
  assert.not.match(j.stdout, srv.adminKey);
  assert.equal(
    JSON.parse(j.stdout).map((x: { name: string; current: boolean }) => [x.name, x.current]),
    [['local', true], ['dead', false]],
  );
});

test('precedence for the key: --token flag > BURROW_TOKEN > context file', async () => {
  assert.is(await email(c), 'seed@burrow.local');
  const env: CliEnv = { ...c, env: { BURROW_TOKEN: memberKey } };
  assert.is(await email(env), 'member@example.test');
  assert.is(await email(env, ['--token', otherKey]), 'other@example.test');
});

test('precedence for the server: --server flag > BURROW_SERVER > context file; --context picks the file entry', async () => {
  // Context "dead" points at a closed port: using it fails with exit 6 ...
  const viaContext = await burrow(c, ['whoami', '--context', 'dead']);
  assert.is(viaContext.code, 6);
  assert.match(viaContext.stderr, /^error: server unreachable: cannot connect to http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/m);
  assert.match(viaContext.stderr, /^hint: /m);
  // ... unless env names the live server (with a key for it) ...
  const envServer: CliEnv = { ...c, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: otherKey } };
  assert.is(await email(envServer, ['--context', 'dead']), 'other@example.test');
  // ... and a flag beats env again.
  const flag = await burrow(envServer, ['whoami', '--server', deadUrl]);
  assert.is(flag.code, 6);
});

test("a context's key is not sent to a server named by flag or env", async () => {
  // The "dead" context's key, with a live server named by env: not sent, so "not logged in".
  const r = await burrow({ ...c, env: { BURROW_SERVER: srv.url } }, ['whoami', '--context', 'dead']);
  assert.is(r.code, 3, r.stderr);
  assert.match(r.stderr, /^error: not logged in: no API key for http:\/\/127\.0\.0\.1:\d+/m);
  // A server that does not answer says so (exit 6), key or not.
  const dead = await burrow({ ...c, env: { BURROW_SERVER: deadUrl } }, ['whoami']);
  assert.is(dead.code, 6, dead.stderr);
  assert.match(dead.stderr, /^error: server unreachable: /m);
});

test('context use / current (human and --json); unknown names exit 4 (use) or 2 (--context)', async () => {
  const u = await burrow(c, ['context', 'use', 'dead']);
  assert.is(u.code, 0, u.stderr);
  assert.match(u.stdout, /now using dead/);
  const cur = await burrow(c, ['context', 'current']);
  assert.match(cur.stdout, /^dead\nserver http:\/\/127\.0\.0\.1:\d+ · key bk_\w{12}…\n$/);
  const j = await burrow(c, ['context', 'use', 'local', '--json']);
  assert.equal(JSON.parse(j.stdout), { name: 'local', server: srv.url, token_prefix: srv.adminKey.slice(0, 15) + '…', current: true });
  const cj = JSON.parse((await burrow(c, ['context', 'current', '--json'])).stdout);
  assert.is(cj.name, 'local');
  assert.is((await burrow(c, ['context', 'use', 'nope'])).code, 4);
  const flag = await burrow(c, ['whoami', '--context', 'nope']);
  assert.is(flag.code, 2);
  assert.match(flag.stderr, /^error: unknown context: no context named "nope"/m);
});

test('context delete (human and --json); deleting the current one leaves none current', async () => {
  const d = await burrow(c, ['context', 'delete', 'dead']);
  assert.is(d.code, 0, d.stderr);
  assert.match(d.stdout, /deleted context dead\n.*still works until revoked/);
  const j = await burrow(c, ['context', 'delete', 'local', '--json']);
  assert.is(JSON.parse(j.stdout).name, 'local');
  const l = await burrow(c, ['context', 'list']);
  assert.match(l.stderr, /no contexts/);
  const who = await burrow(c, ['whoami', '--server', srv.url]);
  assert.is(who.code, 3);
  // This server has no login provider: `burrow login` would not work there.
  assert.match(who.stderr, /^hint: this server has no browser login: ask an administrator for a key/m);
  assert.is((await burrow(c, ['context', 'delete', 'local'])).code, 4);
});

test.run();
