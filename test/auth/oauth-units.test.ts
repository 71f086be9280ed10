import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { escapeHtml, htmlPage } from '../../src/auth/oauth/pages.js';
import { s256, verifierMatches, randomToken, CHALLENGE_RE } from '../../src/auth/oauth/secrets.js';
import { checkEndpoint, cleanEmail, cleanText, safeAvatarUrl } from '../../src/auth/oauth/provider.js';
import { checkOauthConfig, loginKeyName } from '../../src/auth/oauth/routes.js';
import { configFromOptions, buildServerCommand } from '../../src/config.js';

// The pure parts of browser login: escaping, PKCE, endpoint rules, input cleaning, key names.

test('pages escape every value', () => {
  assert.is(escapeHtml(`<script>"x" & 'y'</script>`), '&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;');
  const page = htmlPage('<b>t</b>', '<img src=x onerror=alert(1)>', '"hint"');
  assert.not.ok(page.includes('<img'));
  assert.not.ok(page.includes('<b>t'));
  assert.ok(page.includes('&lt;img src=x onerror=alert(1)&gt;'));
});

test('PKCE S256 matches RFC 7636 appendix B; verifier checks are strict', () => {
  const verifier = 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk';
  assert.is(s256(verifier), 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM');
  assert.ok(verifierMatches(verifier, 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM'));
  assert.not.ok(verifierMatches(verifier + 'x', 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM'));
  assert.not.ok(verifierMatches('short', s256('short')), 'verifier under 43 chars');
  assert.not.ok(verifierMatches(verifier, 'not-a-challenge'));
  assert.ok(CHALLENGE_RE.test(s256(randomToken())));
  assert.is.not(randomToken(), randomToken());
});

test('provider endpoints: https, or http on loopback only', () => {
  assert.ok(checkEndpoint('https://idp.example/auth', 'x'));
  assert.ok(checkEndpoint('http://127.0.0.1:9/auth', 'x'));
  assert.ok(checkEndpoint('http://localhost:9/auth', 'x'));
  assert.ok(checkEndpoint('http://[::1]:9/auth', 'x'));
  assert.throws(() => checkEndpoint('http://idp.example/auth', '--oauth-authorize-url'), /must be https/);
  assert.throws(() => checkEndpoint('http://127.0.0.1.evil.example/auth', 'x'), /must be https/);
  assert.throws(() => checkEndpoint('javascript:alert(1)', 'x'), /must be https/);
  assert.throws(() => checkEndpoint('not a url', 'x'), /absolute URL/);
});

test('checkOauthConfig refuses a plain-http provider off loopback', () => {
  const cmd = buildServerCommand();
  cmd.parse(
    ['--base-url', 'https://b.example', '--oauth-provider-name', 'corp', '--oauth-client-id', 'c', '--oauth-authorize-url', 'http://idp.example/a', '--oauth-token-url', 'https://idp.example/t'],
    { from: 'user' },
  );
  assert.throws(() => checkOauthConfig(configFromOptions(cmd.opts())), /--oauth-authorize-url must be https/);
  const ok = buildServerCommand();
  ok.parse(['--base-url', 'https://b.example', '--github-client-id', 'i', '--github-client-secret', 's'], { from: 'user' });
  checkOauthConfig(configFromOptions(ok.opts()));
});

test('provider values are cleaned before they are stored', () => {
  assert.is(cleanText('  Ada\u0000 Lovelace\n ', 100), 'Ada Lovelace');
  assert.is(cleanText('x'.repeat(300), 200)!.length, 200);
  assert.is(cleanText(42, 10), null);
  assert.is(cleanEmail('a@b.example'), 'a@b.example');
  assert.is(cleanEmail('not an email'), null);
  assert.is(safeAvatarUrl('https://img.example/a.png'), 'https://img.example/a.png');
  assert.is(safeAvatarUrl('javascript:alert(1)'), null);
  assert.is(safeAvatarUrl('data:image/png;base64,AAAA'), null);
  assert.is(safeAvatarUrl(''), null);
});

test('login key names: cli@<cleaned hostname>', () => {
  assert.is(loginKeyName('laptop.local'), 'cli@laptop.local');
  assert.is(loginKeyName('my host/<x>'), 'cli@my-host--x');
  assert.is(loginKeyName(undefined), 'cli@unknown');
  assert.is(loginKeyName('...'), 'cli@unknown');
  assert.is(loginKeyName('a'.repeat(200)), `cli@${'a'.repeat(63)}`);
});

test.run();
