import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Browser } from 'playwright-core';
import { CLI, startServer, type TestServer } from '../helpers/server.js';
import { api, createUser } from '../helpers/fixtures.js';
import { withDeadline } from '../helpers/deadline.js';
import { startIdp, type TestIdp } from './fixtures/idp.js';
import { startForwarder, type Forwarder } from './fixtures/forwarder.js';
import { launchBrowserForTest } from './fixtures/chromium.js';

// End to end in a real browser: the real `burrow login --no-browser` prints the address,
// a headless Chromium (the one npm ci brings, see fixtures/chromium.ts; driven by playwright-core)
// opens it and fills oidc-provider's login form, and the CLI must end up with a working key in
// its context file.

let idp: TestIdp;
let fwd: Forwarder;
let t: TestServer;
let browser: Browser | null = null;
let home: string;
const children: ChildProcess[] = [];

test.before(async () => {
  browser = await launchBrowserForTest();
  home = mkdtempSync(join(tmpdir(), 'burrow-login-'));
  fwd = await startForwarder();
  idp = await startIdp({ redirectUri: `${fwd.url}/auth/v1/corp/callback` });
  t = await startServer({
    args: [
      '--base-url', fwd.url,
      '--oauth-provider-name', 'corp',
      '--oauth-client-id', idp.clientId,
      '--oauth-client-secret', idp.clientSecret,
      '--oauth-authorize-url', idp.authorizeUrl,
      '--oauth-token-url', idp.tokenUrl,
      '--oauth-userinfo-url', idp.userinfoUrl,
    ],
  });
  fwd.setTarget(t.url);
});

test.after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await browser?.close();
  await t?.stop();
  await idp?.close();
  await fwd?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

interface Run {
  proc: ChildProcess;
  out(): string;
  errText(): string;
  exit: Promise<number | null>;
}

function cli(args: string[]): Run {
  const proc = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, XDG_CONFIG_HOME: home, NO_COLOR: '1', BURROW_SERVER: '', BURROW_TOKEN: '', BROWSER: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(proc);
  let out = '';
  let errText = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (errText += d));
  const exit = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, out: () => out, errText: () => errText, exit };
}

async function printedUrl(run: Run): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const m = /(http:\/\/\S+\/auth\/v1\/corp\/authorize\?\S+)/.exec(run.errText());
        if (m) resolve(m[1]!);
      };
      run.proc.stderr!.on('data', check);
      void run.exit.then((code) => reject(new Error(`burrow login exited ${code}: ${run.errText()}`)));
      check();
    }),
    15_000,
    'burrow login printing the address',
  );
}

function storedToken(): string | null {
  const cfg = JSON.parse(readFileSync(join(home, 'burrow', 'config.json'), 'utf8'));
  return cfg.contexts[cfg.currentContext]?.token ?? null;
}

test('burrow login --no-browser + Chromium through the provider login form stores a working key', async () => {
  idp.users.set('grace', { email: 'grace@example.com', email_verified: true, name: 'Grace Hopper' });
  const run = cli(['login', '--no-browser', '--provider', 'corp', '--server', t.url, '--context', 'work']);
  const url = await printedUrl(run);
  assert.ok(url.startsWith(`${t.url}/auth/v1/corp/authorize?port=`), url);

  const page = await browser!.newPage();
  try {
    await withDeadline(page.goto(url), 15_000, 'open the login address');
    await withDeadline(page.locator('input[name="login"]').fill('grace'), 10_000, 'fill login');
    await page.locator('input[name="password"]').fill('any password');
    await withDeadline(
      Promise.all([page.waitForURL(/^http:\/\/127\.0\.0\.1:\d+\/callback/, { timeout: 15_000 }), page.locator('button[type="submit"]').click()]),
      20_000,
      'submit the login form and land on the CLI callback',
    );
    const text = await withDeadline(page.locator('body').innerText(), 10_000, 'read the final page');
    assert.match(text, /logged in to burrow as grace@example\.com/i);
    // The page, its URL and the history hold no key.
    assert.not.ok(page.url().includes('bk_'));
  } finally {
    await page.close();
  }

  const code = await withDeadline(run.exit, 20_000, 'burrow login exit');
  assert.is(code, 0, run.errText());
  assert.match(run.out(), /Logged in to .* as grace@example\.com \(Grace Hopper\), role member/);
  assert.match(run.out(), /Key cli@\S+ \(bk_\w{12}…, expires .*\) saved in context "work"/);
  assert.not.ok(run.out().includes(storedToken()!), 'the key is never printed');
  assert.not.ok(run.errText().includes(storedToken()!), 'the key is never printed');

  const mode = statSync(join(home, 'burrow', 'config.json')).mode & 0o777;
  assert.is(mode, 0o600);
  const key = storedToken();
  assert.ok(key);
  const me = await api(t, 'GET', '/me', { key: key! });
  assert.is(me.status, 200);
  assert.is(me.body.email, 'grace@example.com');
  assert.not.ok(t.stderr().includes(key!), 'the key is in no server log line');

  // The CLI itself now works with the stored key, and logout revokes the login key.
  const who = cli(['whoami', '--json']);
  assert.is(await withDeadline(who.exit, 15_000, 'burrow whoami'), 0, who.errText());
  assert.is(JSON.parse(who.out()).email, 'grace@example.com');
  const out = cli(['logout']);
  assert.is(await withDeadline(out.exit, 15_000, 'burrow logout'), 0, out.errText());
  assert.match(out.out(), /revoked on the server/);
  assert.is(storedToken(), null);
  assert.is((await api(t, 'GET', '/me', { key: key! })).status, 401);
});

test('a deactivated user sees a clear page in the browser and the CLI exits 3 without a key', async () => {
  await createUser(t, { email: 'henry@example.com', deactivated: true });
  idp.users.set('henry', { email: 'henry@example.com', email_verified: true });
  const before = storedToken();
  const run = cli(['login', '--no-browser', '--provider', 'corp', '--server', t.url]);
  const url = await printedUrl(run);
  const page = await browser!.newPage();
  try {
    await withDeadline(page.goto(url), 15_000, 'open the login address');
    await withDeadline(page.locator('input[name="login"]').fill('henry'), 10_000, 'fill login');
    await page.locator('input[name="password"]').fill('x');
    await withDeadline(
      Promise.all([page.waitForURL(/^http:\/\/127\.0\.0\.1:\d+\/callback/, { timeout: 15_000 }), page.locator('button[type="submit"]').click()]),
      20_000,
      'submit the login form',
    );
    const text = await withDeadline(page.locator('body').innerText(), 10_000, 'read the final page');
    assert.match(text, /Login failed/);
    assert.match(text, /henry@example\.com is deactivated/);
  } finally {
    await page.close();
  }
  assert.is(await withDeadline(run.exit, 20_000, 'burrow login exit'), 3, run.errText());
  assert.match(run.errText(), /login refused: .*deactivated/);
  assert.is(storedToken(), before, 'nothing stored');
});

test('login names an unknown provider at once; logout only forgets a key it did not make', async () => {
  const wrong = cli(['login', '--no-browser', '--provider', 'nope', '--server', t.url]);
  assert.is(await withDeadline(wrong.exit, 15_000, 'burrow login --provider nope'), 2, wrong.errText());
  assert.match(wrong.errText(), /no login provider "nope"/);
  assert.match(wrong.errText(), /available: corp/);

  const made = cli(['context', 'create', 'seeded', '--server', t.url, '--token', t.adminKey, '--use', '--force']);
  assert.is(await withDeadline(made.exit, 15_000, 'burrow context create'), 0, made.errText());
  const out = cli(['logout']);
  assert.is(await withDeadline(out.exit, 15_000, 'burrow logout'), 0, out.errText());
  assert.not.match(out.out(), /revoked/);
  assert.is(storedToken(), null);
  assert.is((await api(t, 'GET', '/me', { key: t.adminKey })).status, 200, 'the seed key still works');
});

test.run();
