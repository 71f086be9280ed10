// The request inspector in a real headless Chromium (fixtures/chromium.ts, driven by
// playwright-core), in front of a real `burrow http`, burrowd and local service: the page shows
// a request made through the tunnel as it happens (server-sent events), its detail shows the
// heads and bodies, Replay adds a second entry that reached the local service, and the HAR
// download arrives and parses.
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Browser, Page } from 'playwright-core';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { adminOf, closedPort, RunningBurrows, tempDir, waitFor } from '../cli/harness.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';
import { launchChromium } from './fixtures/chromium.js';

let browser: Browser | null = null;
let srv: TestServer;
let home: { dir: string; remove: () => void };
let local: Local;
let inspectorUrl: string;
let page: Page;
const burrows = new RunningBurrows();
const seen: string[] = [];
const UI_MS = 15_000;

test.before(async () => {
  try {
    browser = (await launchChromium()).browser;
  } catch (err) {
    console.error((err as Error).message); // uvu does not print a failing hook's error
    throw err;
  }
  srv = await startServer();
  home = tempDir();
  local = await listen(
    http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        seen.push(`${req.method} ${req.url} ${body}`);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ greeting: 'hello from the local service', body }));
      });
    }),
  );
  const alice = adminOf(srv, home.dir);
  const child = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['http', String(local.port), '--id', 'insp-browser']);
  await burrows.firstLine(child);
  inspectorUrl = await waitFor(() => /^burrow: inspector at (http:\/\/\S+)$/m.exec(child.output.stderr)?.[1], 10_000, 'inspector address');
  page = await browser.newPage({ acceptDownloads: true });
});

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
  const detail = await page.locator('#detail').innerText();
  assert.match(detail, /x-trace\s+browser-1/i);
  assert.match(detail, /"a": \[\s+1,\s+2\s+\]/); // the JSON request body, pretty-printed
  assert.match(detail, /"greeting": "hello from the local service"/);
  assert.match(detail, /status 200/);
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
  await page.getByLabel('Path').fill('/edited-in-the-browser');
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

test.run();
