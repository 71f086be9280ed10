import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createUser } from '../helpers/fixtures.js';
import { startFakeGithub, type FakeGithub } from '../browser/fixtures/github-fake.js';
import { startForwarder, type Forwarder } from '../browser/fixtures/forwarder.js';
import { loginToCli, newPkce, redeem } from '../browser/fixtures/flow.js';

// Who may sign up through a provider. --github-allowed-orgs (read:org,
// checked through GitHub's API), --oauth-allowed-email-domains (verified emails only) and
// --signup open|deactivated|closed, against the fake GitHub.

interface Setup {
  gh: FakeGithub;
  fwd: Forwarder;
  t: TestServer;
}
let orgs: Setup;
let domains: Setup;
let port = 41300;

async function setup(args: string[]): Promise<Setup> {
  const fwd = await startForwarder();
  const gh = await startFakeGithub(() => `${fwd.url}/auth/v1/github/callback`);
  const t = await startServer({
    args: ['--base-url', fwd.url, '--github-client-id', gh.clientId, '--github-client-secret', gh.clientSecret, '--github-url', gh.webUrl, '--github-api-url', gh.apiUrl, ...args],
  });
  fwd.setTarget(t.url);
  return { gh, fwd, t };
}

test.before(async () => {
  orgs = await setup(['--github-allowed-orgs', 'Acme,widgets', '--signup', 'deactivated']);
  domains = await setup(['--oauth-allowed-email-domains', 'example.com', '--signup', 'closed']);
});

test.after(async () => {
  for (const s of [orgs, domains]) {
    await s?.t.stop();
    await s?.gh.close();
    await s?.fwd.close();
  }
});

async function login(s: Setup) {
  const pkce = newPkce();
  const r = await loginToCli(s.t.url, 'github', 'unused', pkce, ++port);
  if (!r.code) return { error: r.error, description: r.description ?? '', key: null };
  const res = await redeem(s.t.url, { code: r.code, code_verifier: pkce.verifier, hostname: 'box' });
  if (res.status !== 201) return { error: `redeem ${res.status}`, description: res.text, key: null };
  return { error: null, description: '', key: res.body.key as string };
}

const email = (address: string, verified = true) => [{ email: address, primary: true, verified }];

test('--github-allowed-orgs: asks for read:org; a non-member is refused; an active member signs up', async () => {
  orgs.gh.user = { id: 7001, login: 'stranger', name: null, avatar_url: '', emails: email('stranger@example.org'), orgs: [{ login: 'other', state: 'active' }] };
  const stranger = await login(orgs);
  assert.is(stranger.key, null);
  assert.is(stranger.error, 'access_denied');
  assert.match(stranger.description, /not an active member of an organisation this server admits \(acme, widgets\)/);
  assert.match(orgs.gh.seen.authorizeParams?.get('scope') ?? '', /\bread:org\b/);
  const none = await orgs.t.sql`select 1 from users where email = 'stranger@example.org'`;
  assert.is(none.length, 0, 'no user was created');

  orgs.gh.user = { id: 7002, login: 'pending', name: null, avatar_url: '', emails: email('pending@example.org'), orgs: [{ login: 'acme', state: 'pending' }] };
  assert.is((await login(orgs)).error, 'access_denied', 'an invitation not yet accepted is not membership');

  // --signup deactivated: the member's new user waits for an admin.
  orgs.gh.user = { id: 7003, login: 'member', name: null, avatar_url: '', emails: email('member@example.org'), orgs: [{ login: 'Widgets', state: 'active' }] };
  const first = await login(orgs);
  assert.is(first.key, null);
  assert.match(first.description, /waits for an administrator to activate it/);
  const [u] = await orgs.t.sql<{ id: string; deactivated_at: Date | null }[]>`select id, deactivated_at from users where email = 'member@example.org'`;
  assert.ok(u?.deactivated_at, 'created deactivated');
  const re = await api(orgs.t, 'POST', `/users/${u!.id}/reactivate`, { key: orgs.t.adminKey });
  assert.is(re.status, 200, re.text);
  const second = await login(orgs);
  assert.ok(second.key, second.description);
  assert.is((await api(orgs.t, 'GET', '/me', { key: second.key! })).body.id, u!.id);
});

test('--oauth-allowed-email-domains: only verified emails of those domains; --signup closed: only existing users', async () => {
  domains.gh.user = { id: 8001, login: 'outsider', name: null, avatar_url: '', emails: email('eve@evil.test') };
  const outsider = await login(domains);
  assert.is(outsider.error, 'access_denied');
  assert.match(outsider.description, /only verified email addresses in example\.com/);

  domains.gh.user = { id: 8002, login: 'unverified', name: null, avatar_url: '', emails: email('ann@example.com', false) };
  const unverified = await login(domains);
  assert.is(unverified.error, 'access_denied');
  assert.match(unverified.description, /not verified/);

  // In the domain, but sign-up is closed: refused, nothing created.
  domains.gh.user = { id: 8003, login: 'bob', name: null, avatar_url: '', emails: email('bob@example.com') };
  const closed = await login(domains);
  assert.is(closed.error, 'access_denied');
  assert.match(closed.description, /Sign-up is closed/);
  assert.is((await domains.t.sql`select 1 from users where email = 'bob@example.com'`).length, 0);

  // A user an admin created logs in (linked by the verified email).
  const carol = await createUser(domains.t, { email: 'carol@example.com' });
  domains.gh.user = { id: 8004, login: 'carol', name: null, avatar_url: '', emails: email('carol@example.com') };
  const ok = await login(domains);
  assert.ok(ok.key, ok.description);
  assert.is((await api(domains.t, 'GET', '/me', { key: ok.key! })).body.id, carol.id);
});

test.run();
