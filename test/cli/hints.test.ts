// The hints that missed: `burrow login` was suggested on a server without a login provider, the
// scope hint was shown for a key the server does not know (401, not 403), and "not logged in"
// was said when the server was merely down. Under --json each error is one JSON object.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { burrow, closedPort, tempDir, type CliEnv } from './harness.js';

let plain: TestServer; // no login provider
let withLogin: TestServer; // GitHub login configured
let home: { dir: string; remove: () => void };
let deadUrl: string;
const UNKNOWN_KEY = 'bk_AAAAAAAAAAAA_' + 'A'.repeat(43);

test.before(async () => {
  [plain, withLogin] = await Promise.all([
    startServer(),
    startServer({ args: ['--base-url', 'http://127.0.0.1:9', '--github-client-id', 'Iv1.hints', '--github-client-secret', 'x'] }),
  ]);
  home = tempDir();
  deadUrl = `http://127.0.0.1:${await closedPort()}`;
});

test.after(async () => {
  await Promise.all([plain?.stop(), withLogin?.stop()]);
  home?.remove();
});

const as = (server: string, token?: string): CliEnv => ({ configDir: home.dir, env: { BURROW_SERVER: server, ...(token ? { BURROW_TOKEN: token } : {}) } });

test('a server without a login provider: the hints say to ask for a key, never `burrow login`', async () => {
  for (const args of [['keys', 'list'], ['http', '3000']]) {
    const none = await burrow(as(plain.url), args);
    assert.is(none.code, 3, none.stderr);
    assert.match(none.stderr, /^error: not logged in: /m);
    assert.match(none.stderr, /^hint: this server has no browser login: ask an administrator for a key/m);
    const bad = await burrow(as(plain.url, UNKNOWN_KEY), args);
    assert.is(bad.code, 3, bad.stderr);
    assert.match(bad.stderr, /^hint: .*this server has no browser login: ask an administrator for a key/m);
    for (const r of [none, bad]) assert.not.match(r.stderr, /burrow login/);
  }
});

test('a server with a login provider: the hints say `burrow login`', async () => {
  const none = await burrow(as(withLogin.url), ['http', '3000']);
  assert.is(none.code, 3, none.stderr);
  assert.match(none.stderr, /^hint: run `burrow login`, or pass --token KEY/m);
  const bad = await burrow(as(withLogin.url, UNKNOWN_KEY), ['keys', 'list']);
  assert.match(bad.stderr, /^hint: the key is missing, expired or revoked: run `burrow login`/m);
});

test('burrow http with an unknown key: refused as unknown (401), no scope hint; a key without the scope: the scope hint', async () => {
  const unknown = await burrow(as(plain.url, UNKNOWN_KEY), ['http', '3000']);
  assert.is(unknown.code, 3);
  assert.match(unknown.stderr, /^hint: the server does not accept this key \(unknown, expired or revoked\)/m);
  assert.not.match(unknown.stderr, /scope/);
  const manager = await createKeyFor(plain, (await createUser(plain, { email: 'manager@example.test' })).id, { scopes: ['management'] });
  const noScope = await burrow(as(plain.url, manager), ['http', '3000']);
  assert.is(noScope.code, 3);
  assert.match(noScope.stderr, /^hint: the key is not valid for tunnels: it needs the `tunnels` scope/m);
});

test('the server down: "server unreachable" with its URL, not "not logged in" (with or without a key)', async () => {
  for (const env of [as(deadUrl), as(deadUrl, UNKNOWN_KEY)]) {
    for (const args of [['http', '3000'], ['tcp', '22'], ['keys', 'list']]) {
      const r = await burrow(env, args);
      assert.is(r.code, 6, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`^error: server unreachable: cannot connect to ${deadUrl.replace(/[.:/]/g, '\\$&')} `, 'm'));
      assert.not.match(r.stderr, /not logged in/);
    }
  }
});

test('--json: every error is one JSON object on stderr with error, hint and exit_code; stdout stays empty', async () => {
  const cases: [CliEnv, string[], number, RegExp][] = [
    [as(deadUrl), ['http', '3000', '--json'], 6, /^server unreachable: cannot connect to /],
    [as(plain.url, UNKNOWN_KEY), ['http', '3000', '--json'], 3, /^tunnel refused: /],
    [as(plain.url, UNKNOWN_KEY), ['keys', 'list', '--json'], 3, /^Unauthorized: /],
    // commander's own usage errors too
    [as(plain.url), ['keys', 'list', '--nope', '--json'], 2, /^unknown option '--nope'/],
  ];
  for (const [env, args, code, error] of cases) {
    const r = await burrow(env, args);
    assert.is(r.code, code, `${args.join(' ')}: ${r.stderr}`);
    assert.is(r.stdout, '');
    assert.is(r.stderr.trimEnd().split('\n').length, 1, r.stderr);
    const e = JSON.parse(r.stderr) as Record<string, unknown>;
    assert.equal(Object.keys(e), ['error', 'hint', 'exit_code', 'status']);
    assert.match(String(e.error), error);
    assert.type(e.hint, 'string');
    assert.is(e.exit_code, code);
  }
});

test.run();
