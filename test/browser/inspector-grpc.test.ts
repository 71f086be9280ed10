// gRPC calls in the request inspector, in a real headless Chromium (fixtures/chromium.ts): a
// @grpc/grpc-js client calls through burrowd (h2c) and a real `burrow http h2c://…` to a
// @grpc/grpc-js server, and the page lists each call as gRPC with its grpc-status, says its
// grpc-message, and shows its request and response bodies as framed messages (length, flag,
// bytes in hex with their printable characters).
// INSPECTOR_SCREENSHOTS=DIR also saves docs/screenshots/inspector-grpc-1280.png there.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Browser, Page } from 'playwright-core';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { adminOf, closedPort, RunningBurrows, tempDir, waitFor } from '../cli/harness.js';
import { echoClient, startEcho, streamRequest, unaryCall, type Echo, type EchoClient } from '../helpers/grpc-echo.js';
import { launchBrowserForTest } from './fixtures/chromium.js';

let browser: Browser | null = null;
let srv: TestServer;
let echo: Echo;
let client: EchoClient;
let inspectorUrl: string;
let page: Page;
const home = tempDir();
const burrows = new RunningBurrows();
const UI_MS = 15_000;

test.before(async () => {
  browser = await launchBrowserForTest();
  srv = await startServer();
  echo = await startEcho();
  const alice = adminOf(srv, home.dir);
  const child = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['http', `h2c://127.0.0.1:${echo.port}`, '--id', 'insp-grpc']);
  client = echoClient(`127.0.0.1:${srv.port}`, new URL(await burrows.firstLine(child)).host);
  inspectorUrl = await waitFor(() => /^burrow: inspector at (http:\/\/\S+)$/m.exec(child.output.stderr)?.[1], 10_000, 'inspector address');
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
});

test.after(async () => {
  client?.close();
  burrows.killAll();
  await browser?.close();
  echo?.server.forceShutdown();
  await srv?.stop();
  home.remove();
});

/** Saves the page as docs/screenshots shows it, when asked (INSPECTOR_SCREENSHOTS=DIR). */
async function screenshot(name: string): Promise<void> {
  const dir = process.env.INSPECTOR_SCREENSHOTS;
  if (!dir) return;
  mkdirSync(dir, { recursive: true });
  await page.evaluate('document.activeElement?.blur()');
  await page.screenshot({ path: join(dir, `${name}.png`) });
}

const row = (text: string) => page.locator('#list button', { hasText: text });

test('gRPC calls are listed as gRPC with their grpc-status; the detail shows grpc-message and the framed messages', async () => {
  await withDeadline(page.goto(inspectorUrl), UI_MS, 'open the inspector');
  await page.locator('#conn', { hasText: 'live' }).waitFor({ timeout: UI_MS });
  assert.is((await withDeadline(unaryCall(client, Buffer.from('hi\x00there')), 10_000, 'ok call')).err, null);
  assert.ok((await withDeadline(unaryCall(client, Buffer.from('fail')), 10_000, 'failing call')).err);

  // Live (SSE): both rows, each tagged gRPC, with its grpc-status once the trailers came.
  await row('grpc 0 OK').waitFor({ timeout: UI_MS });
  await row('grpc 5 NOT_FOUND').waitFor({ timeout: UI_MS });
  assert.match(await row('grpc 0 OK').innerText(), /POST[\s\S]*\/burrow\.test\.Echo\/Unary[\s\S]*200 OK[\s\S]*gRPC[\s\S]*grpc 0 OK/);
  assert.match((await row('grpc 5 NOT_FOUND').getAttribute('aria-label')) ?? '', /grpc-status 5 NOT_FOUND, gRPC/);

  await row('grpc 5 NOT_FOUND').click();
  await page.locator('#summary-grpc').waitFor({ timeout: UI_MS });
  assert.is(await page.locator('#summary-grpc').innerText(), 'grpc-status 5 NOT_FOUND · no such thing: ünïcode');
  assert.match(await page.locator('#detail p.note').first().innerText(), /200 OK · grpc-status 5 NOT_FOUND · gRPC · /);

  await row('grpc 0 OK').click();
  await page.getByRole('tab', { name: 'Request', exact: true }).click();
  const requestMessages = page.locator('#detail ol.grpc-messages li');
  await requestMessages.first().waitFor({ timeout: UI_MS });
  assert.is(await requestMessages.count(), 1);
  assert.is(await requestMessages.locator('.grpc-prefix').innerText(), '8 bytes · not compressed · at byte 0');
  // Hex and the printable characters, the NUL as a dot.
  assert.match(await requestMessages.locator('pre').innerText(), /^00000000 {2}68 69 00 74 68 65 72 65 +hi\.there$/);
  assert.match(await page.locator('#detail .body-kind').innerText(), /^application\/grpc.* · 13 bytes · 1 message$/);

  await page.getByRole('tab', { name: 'Response', exact: true }).click();
  await page.locator('#detail ol.grpc-messages li').first().waitFor({ timeout: UI_MS });
  assert.match(await page.locator('#detail ol.grpc-messages').innerText(), /8 bytes · not compressed · at byte 0[\s\S]*hi\.there/);
  assert.is(await page.locator('#response-grpc').innerText(), 'grpc-status 0 OK · grpc-message OK');
});

test('a server stream: every message of the answer, in order', async () => {
  await withDeadline(
    new Promise<void>((resolve, reject) => {
      const call = client.serverStream(streamRequest(3, 0));
      call.on('data', () => undefined);
      call.on('error', reject);
      call.on('end', () => resolve());
    }),
    10_000,
    'server stream',
  );
  await row('ServerStream').filter({ hasText: 'grpc 0 OK' }).click();
  await page.getByRole('tab', { name: 'Response', exact: true }).click();
  const messages = page.locator('#detail ol.grpc-messages li');
  await messages.nth(2).waitFor({ timeout: UI_MS });
  assert.is(await messages.count(), 3);
  for (let i = 0; i < 3; i++) {
    assert.is(await messages.nth(i).locator('.grpc-prefix').innerText(), `9 bytes · not compressed · at byte ${i * 14}`);
    assert.match(await messages.nth(i).locator('pre').innerText(), new RegExp(`message ${i}$`));
  }
  await screenshot('inspector-grpc-1280');
});

test.run();
