import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { CLI, MAIN, startServer } from '../helpers/server.js';
import { api } from '../helpers/fixtures.js';
import { withDeadline } from '../helpers/deadline.js';

// A provider whose endpoints are plain http off loopback is refused at start-up (exit 2,
// a message naming the flag), before anything listens. And a server with no provider at all.

let home: string;

test.before(() => {
  home = mkdtempSync(join(tmpdir(), 'burrow-misconfig-'));
});

test.after(() => {
  rmSync(home, { recursive: true, force: true });
});

test('plain-http provider off loopback: burrowd refuses to start and says which flag', async () => {
  const proc = spawn(process.execPath, [
    MAIN, '--port', '0', '--data-dir', 'memory://',
    '--base-url', 'https://burrow.example',
    '--oauth-provider-name', 'corp',
    '--oauth-client-id', 'c',
    '--oauth-authorize-url', 'http://idp.example/authorize',
    '--oauth-token-url', 'http://idp.example/token',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (err += d));
  const code = await withDeadline(new Promise((r) => proc.once('exit', r)), 15_000, 'burrowd exit');
  assert.is(code, 2, err);
  assert.match(err, /--oauth-authorize-url must be https/);
  assert.is(out, '', 'nothing on stdout: no key, no listening line');
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
