import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { CLI, startServer, type TestServer } from '../helpers/server.js';
import { api } from '../helpers/fixtures.js';
import { withDeadline } from '../helpers/deadline.js';

// A provider whose endpoints are plain http off loopback is never used: browser login answers
// a 503 page (the log says why) and `burrow login` says so at once. The rest of the server runs.
// And a server with no provider at all.

let t: TestServer;
let home: string;

test.before(async () => {
  home = mkdtempSync(join(tmpdir(), 'burrow-misconfig-'));
  t = await startServer({
    args: [
      '--base-url', 'https://burrow.example',
      '--oauth-provider-name', 'corp',
      '--oauth-client-id', 'c',
      '--oauth-authorize-url', 'http://idp.example/authorize',
      '--oauth-token-url', 'http://idp.example/token',
    ],
  });
});

test.after(async () => {
  await t?.stop();
  rmSync(home, { recursive: true, force: true });
});

test('plain-http provider off loopback: 503 pages, a log line, the API still up', async () => {
  const res = await api(t, 'GET', '/auth/v1/corp/authorize?port=5000&code_challenge=' + 'a'.repeat(43));
  assert.is(res.status, 503);
  assert.match(res.headers.get('content-type') ?? '', /text\/html/);
  assert.match(res.text, /misconfigured/);
  assert.not.match(res.text, /idp\.example/, 'the page does not show the settings');
  assert.match(t.stderr(), /--oauth-authorize-url must be https/);
  assert.is((await api(t, 'GET', '/me', { key: t.adminKey })).status, 200);

  const proc = spawn(process.execPath, [CLI, 'login', '--no-browser', '--provider', 'corp', '--server', t.url], {
    env: { ...process.env, XDG_CONFIG_HOME: home, NO_COLOR: '1', BURROW_SERVER: '', BURROW_TOKEN: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  proc.stderr.on('data', (d) => (err += d));
  const code = await withDeadline(new Promise((r) => proc.once('exit', r)), 15_000, 'burrow login');
  assert.is(code, 1, err);
  assert.match(err, /browser login unavailable/);
});

test('a server without providers: /auth/v1 is 404 and `burrow login` says so at once', async () => {
  const plain = await startServer({ workers: 1 });
  try {
    assert.is((await api(plain, 'GET', '/auth/v1/providers')).status, 404);
    assert.is((await api(plain, 'GET', '/auth/v1/github/authorize?port=5000')).status, 404);
    const proc = spawn(process.execPath, [CLI, 'login', '--no-browser', '--server', plain.url], {
      env: { ...process.env, XDG_CONFIG_HOME: home, NO_COLOR: '1', BURROW_SERVER: '', BURROW_TOKEN: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    proc.stderr.on('data', (d) => (err += d));
    const code = await withDeadline(new Promise((r) => proc.once('exit', r)), 15_000, 'burrow login');
    assert.is(code, 2, err);
    assert.match(err, /has no login provider configured/);
  } finally {
    await plain.stop();
  }
});

test.run();
