// The request inspector in a real headless Chromium (fixtures/chromium.ts, driven by
// playwright-core), in front of a real `burrow http`, burrowd and local service: the page shows
// a request made through the tunnel as it happens (server-sent events), its detail shows the
// heads and bodies, Replay adds a second entry that reached the local service, the HAR
// download arrives and parses; the filter, Clear, the raw view, copy as cURL (the command on the
// clipboard, run by /bin/sh), a phone-sized viewport and the /status page.
// INSPECTOR_SCREENSHOTS=DIR also saves the screenshots of docs/screenshots there.
import http from 'node:http';
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Browser, Page } from 'playwright-core';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { adminOf, closedPort, RunningBurrows, tempDir, waitFor } from '../cli/harness.js';
import { call } from '../inspector/http.js';
import { burrowVersion } from '../../src/version.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';
import { launchBrowserForTest } from './fixtures/chromium.js';

let browser: Browser | null = null;
let srv: TestServer;
let home: { dir: string; remove: () => void };
let local: Local;
let inspectorUrl: string;
let page: Page;
const burrows = new RunningBurrows();
const seen: string[] = [];
const UI_MS = 15_000;
/** A 1×1 PNG. */
const PIXEL_PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

test.before(async () => {
  browser = await launchBrowserForTest();
  srv = await startServer();
  home = tempDir();
  local = await listen(
    http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        seen.push(`${req.method} ${req.url} ${body}`);
        if (req.url === '/page.html') {
          // A script and a remote image: the preview must run and load neither.
          res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
          return void res.end('<!doctype html><h1>Hello preview</h1><script>document.body.append("script ran")</script><img src="http://127.0.0.1:9/tracker.png">');
        }
        if (req.url === '/pixel.png') {
          res.writeHead(200, { 'content-type': 'image/png' });
          return void res.end(PIXEL_PNG);
        }
        res.writeHead(req.url!.startsWith('/missing') ? 404 : 200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ greeting: 'hello from the local service', body }));
      });
    }),
  );
  const alice = adminOf(srv, home.dir);
  const child = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['http', String(local.port), '--id', 'insp-browser']);
  await burrows.firstLine(child);
  inspectorUrl = await waitFor(() => /^burrow: inspector at (http:\/\/\S+)$/m.exec(child.output.stderr)?.[1], 10_000, 'inspector address');
  page = await browser.newPage({ acceptDownloads: true, viewport: { width: 1280, height: 800 } });
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(inspectorUrl).origin });
});

const screenshots = process.env.INSPECTOR_SCREENSHOTS;
/** Saves the page as docs/screenshots shows it, when asked (INSPECTOR_SCREENSHOTS=DIR). */
async function screenshot(p: Page, name: string): Promise<void> {
  if (!screenshots) return;
  mkdirSync(screenshots, { recursive: true });
  await p.evaluate('document.activeElement?.blur()'); // no focus ring left from the last step
  await p.screenshot({ path: join(screenshots, `${name}.png`) });
}

const tunnelHost = () => `insp-browser.localhost:${srv.port}`;
const shown = () => page.locator('#list li:not([hidden]) button');

test.after(async () => {
  burrows.killAll();
  await browser?.close();
  await local?.close();
  await srv?.stop();
  home?.remove();
});

const rowsFor = (path: string) => page.locator('#list button', { hasText: path });

test('a request through the tunnel appears live, with its heads and bodies', async () => {
  await withDeadline(page.goto(inspectorUrl), UI_MS, 'open the inspector');
  await page.locator('#conn', { hasText: 'live' }).waitFor({ timeout: UI_MS });
  assert.is(await rowsFor('/from-the-browser-test').count(), 0);
  // Made after the page loaded: only the live list (SSE) can bring it.
  const r = await visit(srv.port, `insp-browser.localhost:${srv.port}`, { method: 'POST', path: '/from-the-browser-test', headers: { 'content-type': 'application/json', 'x-trace': 'browser-1' }, body: '{"a":[1,2]}' });
  assert.is(r.status, 200);
  const row = rowsFor('/from-the-browser-test');
  await row.first().waitFor({ timeout: UI_MS });
  await page.locator('#list button', { hasText: '/from-the-browser-test' }).filter({ hasText: '200' }).first().waitFor({ timeout: UI_MS });
  assert.match(await row.first().innerText(), /POST[\s\S]*\/from-the-browser-test[\s\S]*200/);
  assert.match(await page.locator('#count').innerText(), /^1 request$/);

  // Keyboard: focus the row and press Enter.
  await row.first().focus();
  await page.keyboard.press('Enter');
  await page.locator('#detail h2', { hasText: 'POST /from-the-browser-test' }).waitFor({ timeout: UI_MS });
  // The Summary tab first; the request and the response each one tab away, never below each other.
  assert.is(await page.getByRole('tab', { selected: true }).innerText(), 'Summary');
  assert.match(await page.locator('#summary-response').innerText(), /^200 OK · application\/json · \d+ bytes · /);
  await page.getByRole('tab', { name: 'Request', exact: true }).click();
  let detail = await page.locator('#detail').innerText();
  assert.match(detail, /x-trace\s+browser-1/i);
  assert.match(detail, /"a": \[\s+1,\s+2\s+\]/); // the JSON request body, pretty-printed
  assert.not.match(detail, /hello from the local service/);
  // Arrow keys move between the tabs.
  await page.getByRole('tab', { name: 'Request', exact: true }).press('ArrowRight');
  await page.getByRole('tab', { name: 'Response', exact: true, selected: true }).waitFor({ timeout: UI_MS });
  detail = await page.locator('#detail').innerText();
  assert.match(detail, /"greeting": "hello from the local service"/);
  assert.match(detail, /200 OK/);
  // The date in ISO 8601 (local time, with its offset), the instant the list's row names.
  const time = page.locator('#detail-time');
  assert.match(await time.innerText(), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$/);
  assert.is(Date.parse(await time.innerText()), Date.parse((await time.getAttribute('datetime'))!));
  await page.getByRole('tab', { name: 'Summary', exact: true }).click();
});

test('the list shows the reason phrase with the status', async () => {
  assert.match(await rowsFor('/from-the-browser-test').first().locator('.st').innerText(), /^200 OK$/);
});

test('Replay adds a second entry that reached the local service', async () => {
  seen.length = 0;
  await page.getByRole('button', { name: 'Replay', exact: true }).click();
  await page.locator('#list button', { hasText: 'replay' }).first().waitFor({ timeout: UI_MS });
  assert.is(await rowsFor('/from-the-browser-test').count(), 2);
  // The service records a request at its body's end, which a loaded machine may reach after the row shows.
  await waitFor(() => (seen.length > 0 ? true : undefined), UI_MS, 'the replay at the local service');
  assert.equal(seen, ['POST /from-the-browser-test {"a":[1,2]}']);
  // The replay is now selected, marked as one.
  await page.locator('#detail', { hasText: 'replay of #' }).waitFor({ timeout: UI_MS });
});

test('Edit and replay sends the edited request', async () => {
  seen.length = 0;
  await page.getByRole('button', { name: 'Edit and replay' }).click();
  await page.getByLabel('Path', { exact: true }).fill('/edited-in-the-browser');
  await page.getByLabel('Body').fill('{"edited":true}');
  await page.getByRole('button', { name: 'Send' }).click();
  await rowsFor('/edited-in-the-browser').first().waitFor({ timeout: UI_MS });
  await waitFor(() => (seen.length > 0 ? true : undefined), UI_MS, 'the edited replay at the local service');
  assert.equal(seen, ['POST /edited-in-the-browser {"edited":true}']);
});

test('the HAR download arrives and parses, with the requests', async () => {
  const [download] = await withDeadline(Promise.all([page.waitForEvent('download', { timeout: UI_MS }), page.locator('#har').click()]), UI_MS, 'HAR download');
  assert.match(download.suggestedFilename(), /^burrow-.*\.har$/);
  const file = await withDeadline(download.path(), UI_MS, 'download saved');
  const har = JSON.parse(readFileSync(file, 'utf8'));
  assert.is(har.log.version, '1.2');
  const urls = har.log.entries.map((e: { request: { url: string } }) => e.request.url);
  assert.equal(urls, [
    `http://insp-browser.localhost:${srv.port}/from-the-browser-test`,
    `http://insp-browser.localhost:${srv.port}/from-the-browser-test`,
    `http://insp-browser.localhost:${srv.port}/edited-in-the-browser`,
  ]);
  assert.is(har.log.entries[0].response.status, 200);
});

test('each row shows when it came and through which tunnel; the header shows the tunnel URL', async () => {
  const row = rowsFor('/edited-in-the-browser').first();
  const time = row.locator('time');
  assert.match(await time.innerText(), /^\d{2}:\d{2}:\d{2}$/);
  const at = Date.parse((await time.getAttribute('datetime'))!);
  assert.ok(Math.abs(Date.now() - at) < 5 * 60_000, `row time ${new Date(at).toISOString()}`);
  assert.match(await row.innerText(), /insp-browser/);
  await page.locator('#urls a', { hasText: `http://${tunnelHost()}` }).waitFor({ timeout: UI_MS });
});

test('the raw view shows the request as written to the local service and the response as received', async () => {
  await rowsFor('/from-the-browser-test').last().click();
  await page.locator('#detail h2', { hasText: 'POST /from-the-browser-test' }).waitFor({ timeout: UI_MS });
  await page.getByRole('tab', { name: 'Raw', exact: true }).click();
  const request = await page.locator('#raw-request').textContent();
  assert.match(request!, /^POST \/from-the-browser-test HTTP\/1\.1\r\n/);
  assert.match(request!, new RegExp(`\r\nHost: ${tunnelHost()}\r\n`, 'i'));
  assert.match(request!, /\r\nx-trace: browser-1\r\n/i);
  assert.match(request!, /\r\n\r\n\{"a":\[1,2\]\}$/); // the body as sent, not pretty-printed
  const response = await page.locator('#raw-response').textContent();
  assert.match(response!, /^HTTP\/1\.1 200 OK\r\n/);
  assert.match(response!, /\r\ncontent-type: application\/json\r\n/i);
  assert.match(response!, /\r\n\r\n\{"greeting":"hello from the local service"/);
  assert.match(await page.locator('#raw-note').innerText(), /^Rebuilt from the captured head and body/);
  // The choice stays while moving through the list.
  await rowsFor('/edited-in-the-browser').first().click();
  await page.locator('#raw-request', { hasText: 'POST /edited-in-the-browser HTTP/1.1' }).waitFor({ timeout: UI_MS });
  await screenshot(page, 'inspector-raw-1280');
  await page.getByRole('tab', { name: 'Summary', exact: true }).click();
});

test('copy as cURL puts a command on the clipboard that sends the request through the tunnel again', async () => {
  await rowsFor('/from-the-browser-test').last().click();
  await page.locator('#detail h2', { hasText: 'POST /from-the-browser-test' }).waitFor({ timeout: UI_MS });
  await page.evaluate(`navigator.clipboard.writeText('nothing copied yet')`); // strings: the tests compile without the DOM types
  await page.getByRole('button', { name: 'Copy as cURL' }).click();
  await page.locator('#replay-msg', { hasText: 'Copied as cURL' }).waitFor({ timeout: UI_MS });
  const command = (await page.evaluate('navigator.clipboard.readText()')) as string;
  assert.is(
    command,
    [`curl 'http://${tunnelHost()}/from-the-browser-test'`, `  -H 'content-type: application/json'`, `  -H 'x-trace: browser-1'`, `  --data-raw '{"a":[1,2]}'`].join(' \\\n'),
  );
  // Pasted into a shell it reaches the local service through the public URL.
  seen.length = 0;
  await new Promise<void>((resolve, reject) => execFile('/bin/sh', ['-c', `${command} --silent --show-error --fail`], { timeout: UI_MS }, (err, _o, stderr) => (err ? reject(new Error(`${err.message} ${stderr}`)) : resolve())));
  assert.equal(seen, ['POST /from-the-browser-test {"a":[1,2]}']);
});

test('the filter: by method, status class, path and text in headers or bodies', async () => {
  await visit(srv.port, tunnelHost(), { method: 'POST', path: '/orders', headers: { 'content-type': 'text/plain' }, body: 'order with needle-42 inside' });
  await visit(srv.port, tunnelHost(), { path: '/missing/page' });
  await visit(srv.port, tunnelHost(), { path: '/plain', headers: { 'x-client': 'needle-in-a-header' } });
  for (const p of ['/orders', '/missing/page', '/plain']) await page.locator('#list button', { hasText: p }).filter({ has: page.locator('.st', { hasText: /^\d{3}\b/ }) }).first().waitFor({ timeout: UI_MS });
  const total = await page.locator('#list li').count();
  const settled = () => page.locator('#filter:not([aria-busy])').waitFor({ timeout: UI_MS });
  const expectShown = async (paths: string[]) => {
    await settled();
    assert.is(await page.locator('#count').innerText(), `${paths.length} of ${total} requests`);
    const texts = await shown().locator('.path').allInnerTexts();
    assert.equal(texts.sort(), [...paths].sort());
  };
  await page.getByLabel('Status', { exact: true }).selectOption('4xx');
  await expectShown(['/missing/page']);
  await page.getByLabel('Status', { exact: true }).selectOption('');
  await page.getByLabel('Method', { exact: true }).selectOption('POST');
  await page.getByLabel('Path contains').fill('ORDERS');
  await expectShown(['/orders']);
  await page.getByLabel('Method', { exact: true }).selectOption('');
  await page.getByLabel('Path contains').fill('');
  await page.getByLabel('Text in headers or bodies').fill('needle-');
  await expectShown(['/orders', '/plain']);
  // A request that arrives while the filter is on is shown only when it matches.
  await visit(srv.port, tunnelHost(), { path: '/late-needle-free' });
  await visit(srv.port, tunnelHost(), { method: 'POST', path: '/late', body: 'another needle-7' });
  await page.locator('#count', { hasText: `3 of ${total + 2} requests` }).waitFor({ timeout: UI_MS });
  await settled();
  assert.equal((await shown().locator('.path').allInnerTexts()).sort(), ['/late', '/orders', '/plain']);
  await page.getByLabel('Text in headers or bodies').fill('');
  await settled();
  assert.is(await page.locator('#count').innerText(), `${total + 2} requests`);
  assert.is(await shown().count(), total + 2);
});

test('a phone-sized viewport (400 px): nothing wider than the screen; list above the detail', async () => {
  const phone = await browser!.newPage({ viewport: { width: 400, height: 800 }, isMobile: true, hasTouch: true });
  try {
    // A long header value and path, as a hostile or careless visitor sends them.
    await visit(srv.port, tunnelHost(), { path: `/very/long/path/${'segment-'.repeat(20)}?q=${'x'.repeat(200)}`, headers: { 'x-very-long-header-name-for-the-layout': 'v'.repeat(400) } });
    await withDeadline(phone.goto(inspectorUrl), UI_MS, 'open the inspector on a phone');
    const row = phone.locator('#list button', { hasText: '/very/long/path' }).first();
    await row.waitFor({ timeout: UI_MS });
    await row.click();
    await phone.locator('#detail h2', { hasText: '/very/long/path' }).waitFor({ timeout: UI_MS });
    const overflow = async () => (await phone.evaluate('({ scroll: document.scrollingElement.scrollWidth, inner: innerWidth })')) as { scroll: number; inner: number };
    let o = await overflow();
    assert.ok(o.scroll <= o.inner, `the list and detail are ${o.scroll} px wide in a ${o.inner} px viewport`);
    const list = (await phone.locator('#list').boundingBox())!;
    const detail = (await phone.locator('#detail').boundingBox())!;
    assert.ok(list.y + list.height <= detail.y + 1, `list (${list.y}+${list.height}) above detail (${detail.y})`);
    assert.ok(detail.width > 350, `detail is ${detail.width} px wide`);
    await screenshot(phone, 'inspector-detail-400');
    await phone.getByRole('tab', { name: 'Raw', exact: true }).click();
    await phone.locator('#raw-request').waitFor({ timeout: UI_MS });
    o = await overflow();
    assert.ok(o.scroll <= o.inner, `the raw view is ${o.scroll} px wide in a ${o.inner} px viewport`);
    await phone.goto(`${inspectorUrl}/status`);
    await phone.locator('#st-tunnels td', { hasText: 'insp-browser' }).first().waitFor({ timeout: UI_MS });
    o = await overflow();
    assert.ok(o.scroll <= o.inner, `the status page is ${o.scroll} px wide in a ${o.inner} px viewport`);
    await screenshot(phone, 'status-400');
  } finally {
    await phone.close();
  }
});

test('the status page: tunnel, URL, local address, server, state, latency and version', async () => {
  await screenshot(page, 'inspector-list-1280');
  await withDeadline(page.goto(`${inspectorUrl}/status`), UI_MS, 'open the status page');
  const tunnel = page.locator('#st-tunnels tr', { hasText: 'insp-browser' });
  await tunnel.waitFor({ timeout: UI_MS });
  const cells = await tunnel.locator('td').allInnerTexts();
  assert.equal(cells, ['http (insp-browser)', `http://${tunnelHost()}`, `http://localhost:${local.port}`, 'up']);
  // The terminal's figures: every request so far counted, none open, the percentiles known.
  const figures = page.locator('#st-figures tr', { hasText: 'http' });
  await page.waitForFunction('Number(document.querySelector("#st-figures td:nth-child(2)")?.textContent) > 5', undefined, { timeout: UI_MS });
  const [name, ttl, opn, rt1, rt5, p50, p90] = await figures.locator('td').allInnerTexts();
  assert.is(name, 'http');
  assert.ok(Number(ttl) > 5, `ttl ${ttl}`);
  assert.is(opn, '0');
  assert.match(rt1!, /^\d+\.\d\d$/);
  assert.match(rt5!, /^\d+\.\d\d$/);
  assert.match(p50!, /^\d+(\.\d+)?m?s$/);
  assert.match(p90!, /^\d+(\.\d+)?m?s$/);
  assert.is(await page.locator('#st-server').innerText(), srv.url);
  assert.is(await page.locator('#st-state').innerText(), 'online');
  assert.match(await page.locator('#st-latency').innerText(), /^(—|\d+ ms)$/);
  assert.match(await page.locator('#st-server-version').innerText(), /^(—|\S+)$/);
  assert.is(await page.locator('#st-version').innerText(), burrowVersion());
  await screenshot(page, 'status-1280');
  await page.goto(inspectorUrl);
});

test('Clear empties the list and the inspector\'s store; new requests show after it', async () => {
  await page.locator('#conn', { hasText: 'live' }).waitFor({ timeout: UI_MS });
  await rowsFor('/orders').first().waitFor({ timeout: UI_MS });
  await page.getByRole('button', { name: 'Clear', exact: true }).click();
  await page.locator('#count', { hasText: /^0 requests$/ }).waitFor({ timeout: UI_MS });
  assert.is(await page.locator('#list li').count(), 0);
  assert.equal((await call(`${inspectorUrl}/api/requests`)).json(), []);
  await visit(srv.port, tunnelHost(), { path: '/after-clear' });
  await rowsFor('/after-clear').first().waitFor({ timeout: UI_MS });
  assert.match(await page.locator('#count').innerText(), /^1 request$/);
});

test('Summary: the query parameters and urlencoded form fields as tables', async () => {
  await visit(srv.port, tunnelHost(), { method: 'POST', path: '/search?q=burrow+tunnels&page=2&tag=a&tag=b', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'name=Ada+Lovelace&lang=en&note=%3Cb%3Ehi%3C%2Fb%3E' });
  await rowsFor('/search').first().click();
  await page.locator('#detail h2', { hasText: 'POST /search' }).waitFor({ timeout: UI_MS });
  const rowsOf = async (label: string) => {
    const table = page.getByRole('table', { name: label });
    return Promise.all((await table.locator('tr').all()).map(async (tr) => [await tr.locator('th').innerText(), await tr.locator('td').innerText()]));
  };
  assert.equal(await rowsOf('Query parameters'), [['q', 'burrow tunnels'], ['page', '2'], ['tag', 'a'], ['tag', 'b']]);
  // Decoded, and shown as text (the <b> is not markup).
  assert.equal(await rowsOf('Form fields'), [['name', 'Ada Lovelace'], ['lang', 'en'], ['note', '<b>hi</b>']]);
  await screenshot(page, 'inspector-summary-1280');
});

test('previews: HTML rendered without scripts or network, JSON highlighted, an image shown', async () => {
  await visit(srv.port, tunnelHost(), { path: '/page.html' });
  await rowsFor('/page.html').first().click();
  await page.getByRole('tab', { name: 'Response', exact: true }).click();
  const frame = page.locator('iframe.body-preview');
  await frame.waitFor({ timeout: UI_MS });
  assert.is(await frame.getAttribute('sandbox'), '');
  const inside = page.frameLocator('iframe.body-preview');
  assert.is(await inside.locator('h1').innerText({ timeout: UI_MS }), 'Hello preview');
  assert.not.match(await inside.locator('body').innerText(), /script ran/);
  // The source is one click away.
  assert.match(await page.locator('#detail details pre').textContent() ?? '', /<h1>Hello preview<\/h1>/);

  await visit(srv.port, tunnelHost(), { path: '/pixel.png' });
  await rowsFor('/pixel.png').first().click();
  const img = page.locator('img.body-preview');
  await img.waitFor({ timeout: UI_MS });
  await page.waitForFunction('document.querySelector("img.body-preview").complete');
  assert.is(await img.evaluate((i: unknown) => (i as { naturalWidth: number }).naturalWidth), 1);

  await rowsFor('/after-clear').first().click();
  await page.locator('.body-json .j-key', { hasText: '"greeting"' }).waitFor({ timeout: UI_MS });
  assert.is(await page.locator('.body-json .j-str', { hasText: 'hello from the local service' }).count(), 1);
  await screenshot(page, 'inspector-response-1280');
  await page.getByRole('tab', { name: 'Summary', exact: true }).click();
});

test('a basic-auth tunnel: Copy as cURL carries the credentials only with its visible toggle on; a failed request shows the 502 the visitor got', async () => {
  const file = join(home.dir, 'two-tunnels.yml');
  const down = await closedPort();
  writeFileSync(file, `version: 1\ntunnels:\n  locked: { proto: http, addr: ${local.port}, id: insp-locked, basic_auth: [ "alice:s3cret" ] }\n  down: { proto: http, addr: ${down}, id: insp-down }\n`);
  const alice = adminOf(srv, home.dir);
  const child = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['start', '--config', file]);
  await waitFor(() => (/insp-down/.test(child.output.stdout) && /insp-locked/.test(child.output.stdout) ? true : undefined), UI_MS, `both tunnels: ${child.output.stderr}`);
  const url = await waitFor(() => /^burrow: inspector at (http:\/\/\S+)$/m.exec(child.output.stderr)?.[1], UI_MS, 'inspector address');
  const locked = `insp-locked.localhost:${srv.port}`;
  const second = await browser!.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    await second.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(url).origin });
    assert.is((await visit(srv.port, locked, { path: '/secret', headers: { authorization: `Basic ${Buffer.from('alice:s3cret').toString('base64')}` } })).status, 200);
    assert.is((await visit(srv.port, `insp-down.localhost:${srv.port}`, { path: '/nothing-there' })).status, 502);
    await withDeadline(second.goto(url), UI_MS, 'open the second inspector');

    // The failed request: the status the visitor got, and why, not ERR.
    const failed = second.locator('#list button', { hasText: '/nothing-there' }).first();
    await failed.locator('.st', { hasText: '502 Bad Gateway' }).waitFor({ timeout: UI_MS });
    await failed.click();
    assert.match(await second.locator('#detail .error').first().innerText(), new RegExp(`^no connection to localhost:${down}: refused \\(the visitor got 502\\)$`));

    await second.locator('#list button', { hasText: '/secret' }).first().click();
    await second.locator('#detail h2', { hasText: 'GET /secret' }).waitFor({ timeout: UI_MS });
    const toggle = second.getByLabel("include the tunnel's basic-auth credentials");
    assert.ok(await toggle.isVisible(), 'the toggle is in sight, next to the button');
    assert.is(await toggle.isChecked(), false);
    await second.getByRole('button', { name: 'Copy as cURL' }).click();
    await second.locator('#replay-msg', { hasText: /^Copied as cURL:/ }).waitFor({ timeout: UI_MS });
    const without = (await second.evaluate('navigator.clipboard.readText()')) as string;
    assert.not.match(without, /s3cret|-u /);
    await toggle.check();
    await second.getByRole('button', { name: 'Copy as cURL' }).click();
    await second.locator('#replay-msg', { hasText: 'Copied as cURL with the basic-auth credentials' }).waitFor({ timeout: UI_MS });
    const withCredentials = (await second.evaluate('navigator.clipboard.readText()')) as string;
    assert.is(withCredentials, [`curl 'http://${locked}/secret'`, `  -u 'alice:s3cret'`].join(' \\\n'));
    // Pasted into a shell it gets past the edge's basic auth to the local service.
    seen.length = 0;
    await new Promise<void>((resolve, reject) => execFile('/bin/sh', ['-c', `${withCredentials} --silent --show-error --fail`], { timeout: UI_MS }, (err, _o, stderr) => (err ? reject(new Error(`${err.message} ${stderr}`)) : resolve())));
    assert.equal(seen, ['GET /secret ']);
  } finally {
    await second.close();
    child.kill('SIGINT');
  }
});

test.run();
