import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createUser } from '../helpers/fixtures.js';
import { startFakeGithub, type FakeGithub } from '../browser/fixtures/github-fake.js';
import { startForwarder, type Forwarder } from '../browser/fixtures/forwarder.js';
import { loginToCli, newPkce, redeem } from '../browser/fixtures/flow.js';

// The built-in GitHub provider against a local fake of GitHub's web and API endpoints
// (--github-url / --github-api-url): code exchange with PKCE, user and verified primary email.

let gh: FakeGithub;
let fwd: Forwarder;
let t: TestServer;
const CLI_PORT = 41234;

test.before(async () => {
  fwd = await startForwarder();
  gh = await startFakeGithub(() => `${fwd.url}/auth/v1/github/callback`);
  t = await startServer({
    args: [
      '--base-url', fwd.url,
      '--github-client-id', gh.clientId,
      '--github-client-secret', gh.clientSecret,
      '--github-url', gh.webUrl,
      '--github-api-url', gh.apiUrl,
    ],
  });
  fwd.setTarget(t.url);
});

test.after(async () => {
  await t?.stop();
  await gh?.close();
  await fwd?.close();
});

async function login() {
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'github', 'unused', pkce, CLI_PORT);
  if (!r.code) return { error: r.error, description: r.description, key: null };
  const res = await redeem(t.url, { code: r.code, code_verifier: pkce.verifier, hostname: 'gh-box' });
  assert.is(res.status, 201, res.text);
  return { error: null, description: null, key: res.body.key as string };
}

test('GitHub: full flow with PKCE; subject is the numeric id; name falls back to the login', async () => {
  gh.user = {
    id: 583231,
    login: 'octocat',
    name: null,
    avatar_url: 'https://avatars.example/u/583231',
    emails: [
      { email: 'old@example.com', primary: false, verified: true },
      { email: 'octo@example.com', primary: true, verified: true },
    ],
  };
  const before = gh.seen.pkceVerified;
  const { key } = await login();
  assert.ok(key);
  assert.is(gh.seen.pkceVerified, before + 1, 'GitHub checked the PKCE verifier');
  assert.is(gh.seen.authorizeParams?.get('scope'), 'read:user user:email');
  assert.not.ok(gh.seen.authorizeParams?.has('nonce'), 'no nonce: GitHub issues no ID token');
  const me = await api(t, 'GET', '/me', { key: key! });
  assert.is(me.body.email, 'octo@example.com');
  assert.is(me.body.name, 'octocat');
  assert.is(me.body.avatar_url, 'https://avatars.example/u/583231');
  const accounts = await api(t, 'GET', '/accounts', { key: key! });
  assert.equal(accounts.body.map((a: { provider: string }) => a.provider), ['github']);

  // Renamed on GitHub: still the same burrow user (keyed by id, not login).
  gh.user = { ...gh.user, login: 'octocat-renamed', name: 'The Octocat' };
  const again = await login();
  assert.is((await api(t, 'GET', '/me', { key: again.key! })).body.id, me.body.id);
});

test('GitHub: a token endpoint error (answered as 200 + error) ends the login with a message to the CLI', async () => {
  gh.failNextToken = 'bad_verification_code';
  const r = await login();
  assert.is(r.key, null);
  assert.is(r.error, 'server_error');
  assert.match(t.stderr(), /"error":"bad_verification_code"/, 'the OAuth error is logged');
});

test('GitHub: an unverified primary email does not link to an existing user', async () => {
  const existing = await createUser(t, { email: 'mona@example.com' });
  gh.user = { id: 9001, login: 'mona-squatter', name: null, avatar_url: '', emails: [{ email: 'mona@example.com', primary: true, verified: false }] };
  const squatter = await login();
  assert.is.not((await api(t, 'GET', '/me', { key: squatter.key! })).body.id, existing.id);
  gh.user = { id: 9002, login: 'mona', name: 'Mona', avatar_url: '', emails: [{ email: 'mona@example.com', primary: true, verified: true }] };
  const owner = await login();
  const me = await api(t, 'GET', '/me', { key: owner.key! });
  assert.is(me.body.id, existing.id, 'a verified primary email links');
  assert.is(me.body.avatar_url, null, 'an empty avatar is not stored');
});

test('GitHub: no primary email is refused', async () => {
  gh.user = { id: 9100, login: 'nomail', name: null, avatar_url: '', emails: [] };
  const r = await login();
  assert.is(r.key, null);
  assert.match(r.description!, /email/);
});

test('only the configured provider exists', async () => {
  const res = await fetch(`${t.url}/auth/v1/okta/authorize?port=5000&code_challenge=${newPkce().challenge}`, { redirect: 'manual' });
  assert.is(res.status, 404);
  assert.match(await res.text(), /Available: github/);
});

test.run();
