import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { prefersHtml } from '../../src/http/problem-page.js';
import { listen, visit, type Local } from './helpers.js';

// Visitors' error pages: a browser (Accept preferring text/html) gets a small self-contained
// HTML page, anyone else problem+json; the API stays JSON whatever the Accept.

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8';
let server: TestServer;
let hang: Local;
const clients: TunnelClient[] = [];

async function tunnelTo(port: number, extra: { responseTimeoutMs?: number } = {}): Promise<string> {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port }, ...extra });
  clients.push(c);
  return (await withDeadline(c.start(), 10_000, 'tunnel start')).id;
}

function assertPage(body: string, status: number, detailPart: string): void {
  assert.match(body, /^<!doctype html>/);
  assert.match(body, new RegExp(`<title>${status} `));
  assert.ok(body.includes(detailPart), `detail "${detailPart}" in ${body}`);
  // Self-contained: nothing fetched from elsewhere.
  assert.not.match(body, /<(script|link|img)\b|src=|href=/i);
}

test.before(async () => {
  // One shard and one request per visitor IP: a second concurrent request is answered 429.
  server = await startServer({ workers: 1, args: ['--visitor-concurrency', '1'] });
  hang = await listen(http.createServer((req) => req.emit('hung')));
});

test.after(async () => {
  await Promise.all(clients.map((c) => c.stop()));
  await hang?.close();
  await server?.stop();
});

test('Accept negotiation: browsers get HTML, curl (*/*), JSON clients and no Accept get JSON', () => {
  assert.ok(prefersHtml(BROWSER));
  assert.ok(prefersHtml('text/html'));
  assert.not.ok(prefersHtml('*/*'));
  assert.not.ok(prefersHtml(undefined));
  assert.not.ok(prefersHtml(''));
  assert.not.ok(prefersHtml('application/json'));
  assert.not.ok(prefersHtml('application/problem+json, text/html;q=0.5'));
  assert.not.ok(prefersHtml('text/html;q=0'));
  assert.ok(prefersHtml('application/json;q=0.4, text/html'));
});

test('unknown tunnel: 404 as an HTML page for a browser, problem+json otherwise', async () => {
  const page = await visit(server.port, 'nosuchtunnel.localhost', { headers: { accept: BROWSER } });
  assert.is(page.status, 404);
  assert.is(page.headers['content-type'], 'text/html; charset=utf-8');
  assertPage(page.body.toString(), 404, 'no tunnel is registered for &#34;nosuchtunnel&#34;');
  const json = await visit(server.port, 'nosuchtunnel.localhost', { headers: { accept: '*/*' } });
  assert.is(json.status, 404);
  assert.is(json.headers['content-type'], 'application/problem+json');
  assert.is(JSON.parse(json.body.toString()).type, '/problems/not-found');
});

test('markup in the Host reaches the page escaped', async () => {
  // `'` and `&` are sub-delims a Host may carry (RFC 3986); `"` or `<` make the Host invalid (400).
  const page = await visit(server.port, `a'b&c.localhost`, { headers: { accept: 'text/html' } });
  assert.is(page.status, 404);
  const body = page.body.toString();
  assert.ok(body.includes('a&#39;b&#38;c'), body);
  assert.not.ok(body.includes(`a'b&c`));
  const quoted = await visit(server.port, `a"b<c.localhost`, { headers: { accept: 'text/html' } });
  assert.is(quoted.status, 400);
  assert.not.ok(quoted.body.toString().includes('<c'), 'the invalid Host is not echoed');
});

test('local service down: 502 page; local service silent: 504 page', async () => {
  const dead = net.createServer();
  const port = await new Promise<number>((r) => dead.listen(0, '127.0.0.1', () => r((dead.address() as net.AddressInfo).port)));
  await new Promise((r) => dead.close(r));
  const downId = await tunnelTo(port);
  const r502 = await visit(server.port, `${downId}.localhost`, { headers: { accept: BROWSER } });
  assert.is(r502.status, 502);
  assert.is(r502.headers['content-type'], 'text/html; charset=utf-8');
  assertPage(r502.body.toString(), 502, 'local service');
  const j502 = await visit(server.port, `${downId}.localhost`, { headers: { accept: 'application/json' } });
  assert.is(j502.headers['content-type'], 'application/problem+json');

  const slowId = await tunnelTo(hang.port, { responseTimeoutMs: 300 });
  const r504 = await visit(server.port, `${slowId}.localhost`, { headers: { accept: BROWSER } });
  assert.is(r504.status, 504);
  assertPage(r504.body.toString(), 504, 'did not answer in time');
});

test('too many requests from one address: 429 page', async () => {
  const slowId = await tunnelTo(hang.port, { responseTimeoutMs: 60_000 });
  const seen = new Promise((r) => hang.server.once('request', r));
  const first = http.get({ host: '127.0.0.1', port: server.port, path: '/', headers: { host: `${slowId}.localhost` }, agent: false });
  first.on('error', () => undefined);
  try {
    await withDeadline(seen, 10_000, 'first request reaches the local service');
    const r = await visit(server.port, `${slowId}.localhost`, { headers: { accept: BROWSER } });
    assert.is(r.status, 429);
    assertPage(r.body.toString(), 429, 'concurrent requests');
  } finally {
    first.destroy();
  }
});

test('the API stays problem+json for a browser', async () => {
  const api = await visit(server.port, `127.0.0.1:${server.port}`, { path: '/api/v1/me', headers: { accept: BROWSER } });
  assert.is(api.status, 401);
  assert.is(api.headers['content-type'], 'application/problem+json');
});

test.run();
