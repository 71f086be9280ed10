import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api } from '../helpers/fixtures.js';
import { startIdp, type TestIdp } from '../browser/fixtures/idp.js';
import { startForwarder, type Forwarder } from '../browser/fixtures/forwarder.js';
import { startTokenTamper, type TokenTamper } from '../browser/fixtures/token-tamper.js';
import { loginToCli, newPkce, redeem } from '../browser/fixtures/flow.js';

// The generic provider as a public client (no secret: PKCE alone) without a userinfo endpoint:
// everything comes from the ID token, which
// must be present (a nonce was sent) and pass openid-client's claim checks. The token endpoint
// is reached through a proxy that can alter the ID token on its way back. Also covers the
// --oauth-*-field mapping.

let idp: TestIdp;
let fwd: Forwarder;
let tamper: TokenTamper;
let t: TestServer;
const CLI_PORT = 40001;

test.before(async () => {
  fwd = await startForwarder();
  idp = await startIdp({ redirectUri: `${fwd.url}/auth/v1/sso/callback`, conformIdTokenClaims: false, publicClient: true });
  tamper = await startTokenTamper(idp.tokenUrl);
  t = await startServer({
    args: [
      '--base-url', fwd.url,
      '--oauth-provider-name', 'sso',
      '--oauth-client-id', idp.clientId,
      '--oauth-authorize-url', idp.authorizeUrl,
      '--oauth-token-url', tamper.url,
      '--oauth-name-field', 'preferred_username',
      '--oauth-avatar-field', 'no_such_claim',
    ],
  });
  fwd.setTarget(t.url);
  idp.users.set('ida', { email: 'ida@example.com', email_verified: true, name: 'Ida Full', preferred_username: 'ida', picture: 'https://x.example/p.png' });
});

test.after(async () => {
  await t?.stop();
  await tamper?.close();
  await idp?.close();
  await fwd?.close();
});

test('claims come from a validated ID token, mapped with --oauth-*-field', async () => {
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'sso', 'ida', pkce, CLI_PORT);
  assert.ok(r.code, `${r.error}: ${r.description}`);
  const res = await redeem(t.url, { code: r.code, code_verifier: pkce.verifier });
  assert.is(res.status, 201, res.text);
  assert.is(res.body.info.name, 'cli@unknown', 'no hostname sent: a neutral name');
  const me = await api(t, 'GET', '/me', { key: res.body.key });
  assert.is(me.body.email, 'ida@example.com');
  assert.is(me.body.name, 'ida', '--oauth-name-field preferred_username');
  assert.is(me.body.avatar_url, null, '--oauth-avatar-field names a missing claim');
});

for (const [what, claims] of [
  ['nonce', { nonce: 'replayed-from-another-login' }],
  ['aud', { aud: 'someone-else' }],
  ['iss', { iss: 'https://evil.example' }],
  ['exp', { exp: Math.floor(Date.now() / 1000) - 3600 }],
  ['azp', { aud: ['burrow-test', 'other'], azp: 'other' }],
] as const) {
  test(`an ID token with a wrong ${what} is refused`, async () => {
    tamper.next = { claims };
    const r = await loginToCli(t.url, 'sso', 'ida', newPkce(), CLI_PORT);
    assert.is(r.code, null, `login must fail on a bad ${what}`);
    assert.is(r.error, 'server_error');
    assert.match(r.description!, /could not be verified/);
    // Refused for that very claim (the log names it; no token or claim values are logged).
    const line = t.stderr().trim().split('\n').filter((l) => l.includes('the provider answer was refused')).pop() ?? '';
    assert.ok(line.includes(`\\"${what}\\"`), `log names the ${what} claim: ${line}`);
  });
}

test('a missing ID token is refused when a nonce was sent', async () => {
  tamper.next = 'drop-id-token';
  const r = await loginToCli(t.url, 'sso', 'ida', newPkce(), CLI_PORT);
  assert.is(r.code, null);
  assert.is(r.error, 'server_error');
});

test('after refusals, a clean login still works', async () => {
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'sso', 'ida', pkce, CLI_PORT);
  assert.ok(r.code);
  assert.is((await redeem(t.url, { code: r.code, code_verifier: pkce.verifier })).status, 201);
});

test.run();
