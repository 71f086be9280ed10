import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import type { Browser } from 'playwright-core';
import { startServer, type TestServer } from '../helpers/server.js';
import { tlsFixture } from '../helpers/certs.js';
import { RunningBurrows, tempDir } from '../cli/harness.js';
import { listen, type Local } from '../tunnel/helpers.js';
import { launchBrowserForTest } from './fixtures/chromium.js';

// A page served over HTTP/2 through burrowd's TLS port, in a real headless Chromium: ALPN gives
// the browser h2 for a tunnel's host, the page and its subresources (from two tunnels under the
// one wildcard certificate) come over it, and the local service still speaks HTTP/1.1.

const DOMAIN = 'tunnels.test';
const fixture = tlsFixture('burrow-h2-browser-', DOMAIN);
const home = tempDir();
const burrows = new RunningBurrows();
let server: TestServer;
let local: Local;
let browser: Browser | null = null;
const hosts: string[] = [];

test.before(async () => {
  // Every name of the test domain is this machine: no resolver is asked.
  browser = await launchBrowserForTest([`--host-resolver-rules=MAP *.${DOMAIN} 127.0.0.1`]);
  local = await listen(
    http.createServer((req, res) => {
      if (req.url === '/') {
        res.setHeader('content-type', 'text/html; charset=utf-8');
        return void res.end('<!doctype html><title>h2</title><script src="/app.js"></script>');
      }
      if (req.url === '/app.js') {
        res.setHeader('content-type', 'text/javascript');
        res.setHeader('access-control-allow-origin', '*');
        return void res.end(`window.seenBy = ${JSON.stringify(req.httpVersion)};`);
      }
      res.setHeader('access-control-allow-origin', '*');
      // A cross-origin resource shows its protocol to the page only with this.
      res.setHeader('timing-allow-origin', '*');
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ version: req.httpVersion, host: req.headers.host }));
    }),
  );
  server = await startServer({ workers: 1, args: ['--domain', DOMAIN, '--tls-cert', fixture.main.cert, '--tls-key', fixture.main.key] });
  for (const id of ['page', 'data']) {
    const child = burrows.start({ configDir: home.dir, env: { BURROW_SERVER: server.url, BURROW_TOKEN: server.adminKey } }, ['http', String(local.port), '--id', id, '--ca', fixture.ca.cert, '--no-inspect']);
    hosts.push(new URL(await burrows.firstLine(child)).host);
  }
});

test.after(async () => {
  burrows.killAll();
  await browser?.close();
  await server?.stop();
  await local?.close();
  home.remove();
  fixture.tmp.remove();
});

test('a page and its subresources over h2, one of them from a second tunnel under the same certificate', async () => {
  const context = await browser!.newContext({ ignoreHTTPSErrors: true });
  try {
    const page = await context.newPage();
    const response = await page.goto(`https://${hosts[0]}/`);
    assert.is(response!.status(), 200);
    // The page's own code (a string: the test compiles without the DOM's types).
    const seen = (await page.evaluate(`(async () => {
      const data = await (await fetch('https://${hosts[1]}/data.json')).json();
      return {
        nav: performance.getEntriesByType('navigation')[0].nextHopProtocol,
        resources: performance.getEntriesByType('resource').map((e) => e.nextHopProtocol),
        data,
        script: window.seenBy,
      };
    })()`)) as { nav: string; resources: string[]; data: { version: string; host: string }; script: string };
    assert.is(seen.nav, 'h2');
    assert.ok(seen.resources.length >= 2);
    for (const p of seen.resources) assert.is(p, 'h2');
    // The local service heard HTTP/1.1 for all of them.
    assert.is(seen.script, '1.1');
    assert.is(seen.data.version, '1.1');
    assert.is(seen.data.host, hosts[1]);
  } finally {
    await context.close();
  }
});

test.run();
