import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createUser } from '../helpers/fixtures.js';
import { startIdp, type TestIdp } from '../browser/fixtures/idp.js';
import { startForwarder, type Forwarder } from '../browser/fixtures/forwarder.js';
import { authorizeUrl, cliRedirect, driveToCallback, followCallback, loginToCli, newPkce, redeem, request, CookieJar } from '../browser/fixtures/flow.js';

// Browser login against a real OpenID Connect provider (oidc-provider@8): PKCE both ways,
// ID token + userinfo, single-use state and codes, linking, promotion, deactivation.

let idp: TestIdp;
let fwd: Forwarder;
let t: TestServer;
const CLI_PORT = 45678;
const ADMIN_EMAIL = 'boss@example.com';

test.before(async () => {
  fwd = await startForwarder();
  idp = await startIdp({ redirectUri: `${fwd.url}/auth/v1/idp/callback` });
  t = await startServer({
    args: [
      '--base-url', fwd.url,
      '--oauth-provider-name', 'idp',
      '--oauth-client-id', idp.clientId,
      '--oauth-client-secret', idp.clientSecret,
      '--oauth-authorize-url', idp.authorizeUrl,
      '--oauth-token-url', idp.tokenUrl,
      '--oauth-userinfo-url', idp.userinfoUrl,
      '--initial-admin-email', ADMIN_EMAIL,
    ],
  });
  fwd.setTarget(t.url);
});

test.after(async () => {
  await t?.stop();
  await idp?.close();
  await fwd?.close();
});

async function login(subject: string, hostname = 'laptop') {
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'idp', subject, pkce, CLI_PORT);
  assert.ok(r.code, `expected a code, got error ${r.error}: ${r.description}`);
  const res = await redeem(t.url, { code: r.code, code_verifier: pkce.verifier, hostname });
  assert.is(res.status, 201, res.text);
  return res.body as { key: string; info: { id: string; name: string; scopes: string[]; expires_at: string } };
}

test('full flow: PKCE to the provider and from the CLI, ID token + userinfo, key works and never leaks', async () => {
  idp.users.set('alice', { email: 'alice@example.com', email_verified: true, name: 'Alice <A>', picture: 'https://img.example/a.png' });
  const pkce = newPkce();
  const cb = await driveToCallback(authorizeUrl(t.url, 'idp', CLI_PORT, pkce.challenge), 'alice');
  assert.ok(cb.searchParams.get('state'), 'state sent to and returned by the provider');
  const hop = await followCallback(cb);
  assert.is(hop.headers.get('referrer-policy'), 'no-referrer');
  const r = cliRedirect(hop, CLI_PORT);
  assert.ok(r.code && r.code.length >= 43);
  const res = await redeem(t.url, { code: r.code, code_verifier: pkce.verifier, hostname: 'laptop.local' });
  assert.is(res.status, 201, res.text);
  assert.is(res.headers.get('cache-control'), 'no-store');
  const { key, info } = res.body;
  assert.match(key, /^bk_[A-Za-z0-9]{12}_[A-Za-z0-9]{43}$/);
  assert.is(info.name, 'cli@laptop.local');
  assert.equal([...info.scopes].sort(), ['management', 'tunnels']);
  const days = (Date.parse(info.expires_at) - Date.now()) / 86_400_000;
  assert.ok(days > 89.9 && days <= 90, `login key expires in 90 days, got ${days}`);

  const me = await api(t, 'GET', '/me', { key });
  assert.is(me.status, 200);
  assert.is(me.body.email, 'alice@example.com');
  assert.is(me.body.name, 'Alice <A>');
  assert.is(me.body.avatar_url, 'https://img.example/a.png');
  assert.is(me.body.role, 'member');
  const accounts = await api(t, 'GET', '/accounts', { key });
  assert.equal(accounts.body.map((a: { provider: string }) => a.provider), ['idp']);
  // The key, the one-time code and the state appear in no log line.
  const logs = t.stderr();
  assert.not.ok(logs.includes(key), 'key in logs');
  assert.not.ok(logs.includes(r.code!), 'code in logs');
  assert.not.ok(logs.includes(cb.searchParams.get('state')!), 'state in logs');
});

test('a second login from the same host replaces the earlier cli@<host> key', async () => {
  const first = await login('alice', 'desk');
  const second = await login('alice', 'desk');
  assert.is((await api(t, 'GET', '/me', { key: first.key })).status, 401);
  assert.is((await api(t, 'GET', '/me', { key: second.key })).status, 200);
  const other = await login('alice', 'other-host');
  assert.is((await api(t, 'GET', '/me', { key: second.key })).status, 200, 'another host name keeps its own key');
  assert.is(other.info.name, 'cli@other-host');
});

test('state is single use: replaying the provider callback is refused', async () => {
  idp.users.set('replay', { email: 'replay@example.com', email_verified: true });
  const pkce = newPkce();
  const cb = await driveToCallback(authorizeUrl(t.url, 'idp', CLI_PORT, pkce.challenge), 'replay');
  const first = cliRedirect(await followCallback(cb), CLI_PORT);
  assert.ok(first.code);
  const again = await followCallback(cb);
  assert.is(again.status, 400);
  assert.match(again.headers.get('content-type') ?? '', /text\/html/);
  assert.match(again.body, /expired or already used/);
  // A made-up state is refused the same way.
  const forged = new URL(cb);
  forged.searchParams.set('state', 'x'.repeat(43));
  assert.is((await followCallback(forged)).status, 400);
});

test('an expired pending login (state) is refused', async () => {
  idp.users.set('slow', { email: 'slow@example.com', email_verified: true });
  const pkce = newPkce();
  const cb = await driveToCallback(authorizeUrl(t.url, 'idp', CLI_PORT, pkce.challenge), 'slow');
  await t.sql`update oauth_pending_logins set expires_at = now() - interval '1 second'`;
  const hop = await followCallback(cb);
  assert.is(hop.status, 400);
  assert.match(hop.body, /expired or already used/);
});

test('wrong code_verifier is refused, and burns the code', async () => {
  idp.users.set('bob', { email: 'bob@example.com', email_verified: true });
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'idp', 'bob', pkce, CLI_PORT);
  const wrong = await redeem(t.url, { code: r.code, code_verifier: newPkce().verifier });
  assert.is(wrong.status, 400);
  assert.is(wrong.body.type, '/problems/bad-request');
  assert.not.ok(JSON.stringify(wrong.body).includes('bk_'));
  const right = await redeem(t.url, { code: r.code, code_verifier: pkce.verifier });
  assert.is(right.status, 400, 'the code was burnt by the failed attempt');
});

test('a one-time code works once', async () => {
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'idp', 'bob', pkce, CLI_PORT);
  assert.is((await redeem(t.url, { code: r.code, code_verifier: pkce.verifier })).status, 201);
  assert.is((await redeem(t.url, { code: r.code, code_verifier: pkce.verifier })).status, 400);
});

test('an expired one-time code is refused', async () => {
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'idp', 'bob', pkce, CLI_PORT);
  await t.sql`update oauth_login_codes set expires_at = now() - interval '1 second'`;
  const res = await redeem(t.url, { code: r.code, code_verifier: pkce.verifier });
  assert.is(res.status, 400);
  assert.match(res.body.detail, /invalid, expired or already used/);
});

test('racing uses of one code or one state (any shard): exactly one wins', async () => {
  idp.users.set('racer', { email: 'racer@example.com', email_verified: true });
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'idp', 'racer', pkce, CLI_PORT);
  const both = await Promise.all([1, 2, 3, 4].map(() => redeem(t.url, { code: r.code, code_verifier: pkce.verifier })));
  racedOnce(both.map((b) => b.status), 201);

  const pkce2 = newPkce();
  const cb = await driveToCallback(authorizeUrl(t.url, 'idp', CLI_PORT, pkce2.challenge), 'racer');
  const hops = await Promise.all([1, 2, 3].map(() => followCallback(cb)));
  racedOnce(hops.map((h) => h.status), 302);
});

/** Exactly one winner, the rest refused (400), on either database. */
function racedOnce(statuses: number[], win: number): void {
  const sorted = [...statuses].sort((a, b) => a - b);
  assert.equal(sorted, [win, ...statuses.slice(1).map(() => 400)].sort((a, b) => a - b), `one winner: ${statuses}`);
}

test('GET /auth/v1/providers lists the configured names', async () => {
  const res = await api(t, 'GET', '/auth/v1/providers');
  assert.is(res.status, 200);
  assert.equal(res.body, { providers: ['idp'] });
});

test('token endpoint refuses malformed requests', async () => {
  const pkce = newPkce();
  assert.is((await redeem(t.url, { code_verifier: pkce.verifier })).status, 400);
  assert.is((await redeem(t.url, { code: 'nope', code_verifier: 'short' })).status, 400);
  assert.is((await redeem(t.url, { code: 'nope', code_verifier: pkce.verifier })).status, 400);
  const text = await api(t, 'POST', '/auth/v1/token', { rawBody: 'code=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  assert.is(text.status, 415);
});

test('authorize refuses bad parameters and unknown providers with escaped pages', async () => {
  const jar = new CookieJar();
  const bad = await request(new URL(`${t.url}/auth/v1/idp/authorize?port=0&code_challenge=abc`), jar);
  assert.is(bad.status, 400);
  assert.match(bad.headers.get('content-type') ?? '', /text\/html/);
  const noChallenge = await request(new URL(`${t.url}/auth/v1/idp/authorize?port=5000`), jar);
  assert.is(noChallenge.status, 400);
  const plain = await request(new URL(`${t.url}/auth/v1/idp/authorize?port=5000&code_challenge=${newPkce().challenge}&code_challenge_method=plain`), jar);
  assert.is(plain.status, 400, 'only S256');
  const unknown = await request(new URL(`${t.url}/auth/v1/%3Cscript%3Ealert(1)%3C%2Fscript%3E/authorize?port=5000`), jar);
  assert.is(unknown.status, 404);
  assert.not.ok(unknown.body.includes('<script>'), 'provider name is escaped');
  assert.match(unknown.body, /&lt;script&gt;/);
  assert.match(unknown.headers.get('content-security-policy') ?? '', /default-src 'none'/);
});

test('the provider redirect carries PKCE S256, state and nonce; only 127.0.0.1 is ever the CLI target', async () => {
  const pkce = newPkce();
  const hop = await request(authorizeUrl(t.url, 'idp', CLI_PORT, pkce.challenge), new CookieJar());
  assert.is(hop.status, 302);
  const u = hop.location!;
  assert.is(u.origin + u.pathname, idp.authorizeUrl);
  assert.is(u.searchParams.get('code_challenge_method'), 'S256');
  assert.match(u.searchParams.get('code_challenge')!, /^[A-Za-z0-9_-]{43}$/);
  assert.is.not(u.searchParams.get('code_challenge'), pkce.challenge, 'the provider gets our own challenge, not the CLI one');
  assert.ok(u.searchParams.get('nonce'));
  assert.ok(u.searchParams.get('state'));
  assert.is(u.searchParams.get('redirect_uri'), `${fwd.url}/auth/v1/idp/callback`);
});

test('provider refusal goes back to the CLI as an error', async () => {
  const pkce = newPkce();
  const hop = await request(authorizeUrl(t.url, 'idp', CLI_PORT, pkce.challenge), new CookieJar());
  const state = hop.location!.searchParams.get('state')!;
  const cb = new URL(`${fwd.url}/auth/v1/idp/callback`);
  cb.searchParams.set('error', 'access_denied');
  cb.searchParams.set('error_description', 'user said no <b>\u001b[2J\u001b]0;pwned\u0007');
  cb.searchParams.set('state', state);
  const r = cliRedirect(await followCallback(cb), CLI_PORT);
  assert.is(r.code, null);
  assert.is(r.error, 'access_denied');
  assert.match(r.description!, /user said no/);
  assert.not.match(r.description!, /[\u0000-\u001f]/, 'no terminal escapes reach the CLI');
});

test('a forged code at the callback is refused by the provider and reported to the CLI', async () => {
  const pkce = newPkce();
  const hop = await request(authorizeUrl(t.url, 'idp', CLI_PORT, pkce.challenge), new CookieJar());
  const state = hop.location!.searchParams.get('state')!;
  const cb = new URL(`${fwd.url}/auth/v1/idp/callback`);
  cb.searchParams.set('code', 'forged');
  cb.searchParams.set('state', state);
  cb.searchParams.set('iss', idp.issuer);
  const r = cliRedirect(await followCallback(cb), CLI_PORT);
  assert.is(r.error, 'server_error');
  assert.is(r.code, null);
});

test('an unverified email is not linked to the existing user; a verified one is (case-insensitive)', async () => {
  const existing = await createUser(t, { email: 'carol@example.com' });
  idp.users.set('carol-unverified', { email: 'carol@example.com', email_verified: false });
  const unverified = await login('carol-unverified');
  const me1 = await api(t, 'GET', '/me', { key: unverified.key });
  assert.is.not(me1.body.id, existing.id);
  idp.users.set('carol-verified', { email: 'Carol@Example.com', email_verified: true });
  const verified = await login('carol-verified');
  const me2 = await api(t, 'GET', '/me', { key: verified.key });
  assert.is(me2.body.id, existing.id);
  // And a later verified login by that address never lands in the user the unverified login made.
  idp.users.set('dave-unverified', { email: 'dave@example.com', email_verified: false });
  const squatter = await api(t, 'GET', '/me', { key: (await login('dave-unverified')).key });
  idp.users.set('dave', { email: 'dave@example.com', email_verified: true });
  const owner = await api(t, 'GET', '/me', { key: (await login('dave')).key });
  assert.is.not(owner.body.id, squatter.body.id, 'pre-registered unverified user is not a link target');
});

test('a user an admin created (Create_user, Create_user_key) is the same user at their first verified login', async () => {
  const created = await api(t, 'POST', '/users', { key: t.adminKey, body: { email: 'Hana@Example.com', name: 'Hana' } });
  assert.is(created.status, 201, created.text);
  const handed = await api(t, 'POST', `/users/${created.body.id}/keys`, { key: t.adminKey, body: { name: 'handed-over' } });
  assert.is(handed.status, 201, handed.text);
  idp.users.set('hana', { email: 'hana@example.com', email_verified: true, name: 'Hana H' });
  const me = await api(t, 'GET', '/me', { key: (await login('hana')).key });
  assert.is(me.body.id, created.body.id);
  assert.is(me.body.role, 'member');
  assert.is((await api(t, 'GET', '/me', { key: handed.body.key })).body.id, created.body.id, 'the handed-over key still works');
});

test('the initial admin email is promoted at first login, only when verified', async () => {
  idp.users.set('fake-boss', { email: ADMIN_EMAIL, email_verified: false });
  const fake = await api(t, 'GET', '/me', { key: (await login('fake-boss')).key });
  assert.is(fake.body.role, 'member', 'unverified address does not promote');
  idp.users.set('boss', { email: 'Boss@Example.com', email_verified: true });
  const boss = await login('boss');
  const me = await api(t, 'GET', '/me', { key: boss.key });
  assert.is(me.body.role, 'admin');
  assert.is((await api(t, 'GET', '/users', { key: boss.key })).status, 200);
  // Demoted later, the next login does not promote again (only the first login does).
  await api(t, 'PUT', `/users/${me.body.id}/role`, { key: t.adminKey, body: { role: 'member' } });
  const again = await login('boss');
  assert.is((await api(t, 'GET', '/me', { key: again.key })).body.role, 'member');
});

test('a deactivated user is refused at the callback, and at redemption', async () => {
  await createUser(t, { email: 'erin@example.com', deactivated: true });
  idp.users.set('erin', { email: 'erin@example.com', email_verified: true });
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'idp', 'erin', pkce, CLI_PORT);
  assert.is(r.code, null);
  assert.is(r.error, 'access_denied');
  assert.match(r.description!, /deactivated/);

  idp.users.set('frank', { email: 'frank@example.com', email_verified: true });
  const frank = await login('frank');
  const id = (await api(t, 'GET', '/me', { key: frank.key })).body.id;
  const pkce2 = newPkce();
  const r2 = await loginToCli(t.url, 'idp', 'frank', pkce2, CLI_PORT);
  assert.is((await api(t, 'POST', `/users/${id}/deactivate`, { key: t.adminKey })).status, 200);
  const res = await redeem(t.url, { code: r2.code, code_verifier: pkce2.verifier });
  assert.is(res.status, 403);
});

test('a provider answer without an email is refused', async () => {
  idp.users.set('ghost', { name: 'No Mail' });
  const r = await loginToCli(t.url, 'idp', 'ghost', newPkce(), CLI_PORT);
  assert.is(r.code, null);
  assert.match(r.description!, /email/);
});

test.run();
