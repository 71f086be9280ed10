// The tunnel client's capture hook against a real burrowd and local service: what the store
// records of each exchange (a large body: 64 KiB kept, the visitor gets all of it; a refused
// local service: a failure in words), and an observer that throws costs its capture, never the
// request.
import http from 'node:http';
import net from 'node:net';
import { createHash } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import type { TunnelObserver } from '../../src/client/observer.js';
import { CaptureStore } from '../../src/client/inspector/store.js';
import { harEntry } from '../../src/client/inspector/har.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { waitFor } from '../cli/harness.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';

let server: TestServer;
let local: Local;
const clients: TunnelClient[] = [];
const BIG = Buffer.alloc(1024 * 1024);
for (let i = 0; i < BIG.length; i++) BIG[i] = (i * 7) & 0xff;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function tunnel(id: string, observer: TunnelObserver, port = local.port): Promise<string> {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port }, id, observer });
  clients.push(c);
  await withDeadline(c.start(), 10_000, 'tunnel start');
  return `${id}.localhost:${server.port}`;
}

test.before(async () => {
  server = await startServer();
  local = await listen(
    http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => {
        if (req.url === '/old-school') {
          // An HTTP/1.0 answer with a reason phrase of its own, as some embedded servers send.
          res.socket!.end('HTTP/1.0 200 Fine Thanks\r\nContent-Type: text/plain\r\n\r\nbye');
          return;
        }
        if (req.url === '/big') {
          res.writeHead(200, { 'content-type': 'application/octet-stream' });
          return void res.end(BIG);
        }
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end(`got ${Buffer.concat(chunks).length} bytes`);
      });
    }),
  );
});

test.after(async () => {
  for (const c of clients) await c.stop();
  await local?.close();
  await server?.stop();
});

test('a 1 MiB upload and a 1 MiB download: the visitor and the service get every byte, the capture keeps 64 KiB of each', async () => {
  const store = new CaptureStore();
  const host = await tunnel('cap-big', { request: (head) => store.begin('cap-big', head) });
  const up = await visit(server.port, host, { method: 'POST', path: '/up', body: BIG, headers: { 'content-type': 'application/octet-stream' } });
  assert.is(up.body.toString(), `got ${BIG.length} bytes`);
  const down = await visit(server.port, host, { path: '/big' });
  assert.is(down.body.length, BIG.length);
  assert.is(sha(down.body), sha(BIG));
  await waitFor(() => (store.size === 2 && store.list().every((c) => c.state === 'complete') ? true : undefined), 10_000, 'two captures complete');
  const [dl, ul] = store.list();
  assert.is(ul!.request.size, BIG.length);
  assert.is(ul!.request.kept, 64 * 1024);
  assert.ok(ul!.request.body().equals(BIG.subarray(0, 64 * 1024)));
  assert.is(ul!.status, 200);
  assert.is(dl!.response.size, BIG.length);
  assert.is(dl!.response.kept, 64 * 1024);
  assert.ok(dl!.response.body().equals(BIG.subarray(0, 64 * 1024)));
  assert.ok(store.bytes < 3 * 64 * 1024, `store holds ${store.bytes} bytes`);
});

test('the capture keeps the status line as the local service wrote it: its HTTP version and reason phrase', async () => {
  const store = new CaptureStore();
  const host = await tunnel('cap-line', { request: (head) => store.begin('cap-line', head) });
  const r = await visit(server.port, host, { path: '/old-school' });
  assert.is(r.body.toString(), 'bye');
  await waitFor(() => (store.list()[0]?.state === 'complete' ? true : undefined), 10_000, 'capture complete');
  const summary = store.list()[0]!.summary();
  assert.is(summary.status_text, 'Fine Thanks');
  assert.is(summary.http_version, 'HTTP/1.0');
  const entry = harEntry(store.list()[0]!) as { response: { statusText: string; httpVersion: string } };
  assert.is(entry.response.statusText, 'Fine Thanks');
  assert.is(entry.response.httpVersion, 'HTTP/1.0');
});

test('a local service that refuses: the visitor gets 502, the capture says why', async () => {
  const store = new CaptureStore();
  const dead = await listen(http.createServer());
  const port = dead.port;
  await dead.close();
  const host = await tunnel('cap-down', { request: (head) => store.begin('cap-down', head) }, port);
  assert.is((await visit(server.port, host, { path: '/x' })).status, 502);
  const c = await waitFor(() => (store.list()[0]?.state === 'failed' ? store.list()[0] : undefined), 10_000, 'capture failed');
  assert.is(c.status, null);
  assert.is(c.error, `no connection to 127.0.0.1:${port}: refused (the visitor got 502)`);
  assert.is(c.summary().visitor_status, 502);
});

test('a local service that takes the connection and resets it: said as a reset, not "no connection"', async () => {
  const store = new CaptureStore();
  const resetter = await listen(net.createServer((s) => s.once('data', () => s.resetAndDestroy())));
  try {
    const host = await tunnel('cap-reset', { request: (head) => store.begin('cap-reset', head) }, resetter.port);
    assert.is((await visit(server.port, host, { path: '/r' })).status, 502);
    const c = await waitFor(() => (store.list()[0]?.state === 'failed' ? store.list()[0] : undefined), 10_000, 'capture failed');
    assert.is(c.error, 'the local service reset the connection (the visitor got 502)');
    assert.is(c.summary().visitor_status, 502);
  } finally {
    await resetter.close();
  }
});

test('an observer that throws everywhere costs nothing but its captures', async () => {
  const boom = () => {
    throw new Error('observer bug');
  };
  const throwsAtStart = await tunnel('cap-throw1', { request: boom });
  const throwsLater = await tunnel('cap-throw2', { request: () => ({ requestBody: boom, response: boom, responseBody: boom, end: boom, fail: boom }) });
  for (const host of [throwsAtStart, throwsLater]) {
    const r = await visit(server.port, host, { method: 'POST', path: '/p', body: 'abc' });
    assert.is(r.status, 200);
    assert.is(r.body.toString(), 'got 3 bytes');
    const d = await visit(server.port, host, { path: '/big' });
    assert.is(sha(d.body), sha(BIG));
  }
});

test.run();
