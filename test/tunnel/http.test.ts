import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, visit, sleep, type Local } from './helpers.js';

// HTTP tunnels end to end: real burrowd (2 shards, so about half the visitor connections
// land on the shard that does not hold the control connection and cross the mesh), a real
// local service, the client library, raw visitors on loopback.

let server: TestServer;
let local: Local;
const clients: TunnelClient[] = [];
let id = '';
let host = '';

async function tunnelTo(port: number, extra: { responseTimeoutMs?: number } = {}): Promise<string> {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port }, ...extra });
  clients.push(c);
  const r = await withDeadline(c.start(), 10_000, 'tunnel start');
  return r.id;
}

test.before(async () => {
  server = await startServer();
  local = await listen(
    http.createServer((req, res) => {
      const url = req.url ?? '/';
      if (url === '/echo') {
        res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
        req.pipe(res);
      } else if (url === '/headers') {
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify(req.rawHeaders));
      } else if (url === '/ordered') {
        // Raw header case and order, as the visitor must see them.
        res.writeHead(200, ['X-First', '1', 'x-second', '2', 'X-THIRD', '3', 'Set-Cookie', 'a=1', 'Set-Cookie', 'b=2', 'Content-Type', 'text/plain']);
        res.end('ok');
      } else if (url.startsWith('/download/')) {
        const n = Number(url.slice('/download/'.length));
        const chunk = Buffer.alloc(64 * 1024, 0x61);
        res.writeHead(200, { 'Content-Length': String(n) });
        let left = n;
        const pump = (): void => {
          while (left > 0) {
            const k = Math.min(left, chunk.length);
            left -= k;
            if (!res.write(chunk.subarray(0, k))) return void res.once('drain', pump);
          }
          res.end();
        };
        pump();
      } else if (url === '/sse') {
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
        let i = 0;
        const t = setInterval(() => {
          res.write(`data: ${i}\n\n`);
          if (++i === 5) {
            clearInterval(t);
            res.end();
          }
        }, 300);
      } else if (url === '/slow') {
        setTimeout(() => res.end('finally'), 3_000);
      } else if (url === '/hang') {
        // never answers
      } else if (url === '/empty') {
        res.writeHead(204);
        res.end();
      } else {
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.end(`hello ${req.method} ${url}`);
      }
    }),
  );
  id = await tunnelTo(local.port, { responseTimeoutMs: 1_500 });
  host = `${id}.localhost:${server.port}`;
});

test.after(async () => {
  await Promise.all(clients.map((c) => c.stop()));
  await local?.close();
  await server?.stop();
});

test('GET: 20 requests on fresh connections (both shards) all reach the local service', async () => {
  for (let i = 0; i < 20; i++) {
    const r = await visit(server.port, host, { path: `/x?i=${i}` });
    assert.is(r.status, 200);
    assert.is(r.body.toString(), `hello GET /x?i=${i}`);
  }
});

test('keep-alive visitor connection carries many requests', async () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  for (let i = 0; i < 10; i++) {
    const r = await visit(server.port, host, { path: `/k${i}`, agent });
    assert.is(r.body.toString(), `hello GET /k${i}`);
  }
  agent.destroy();
});

test('request headers: order kept, hop-by-hop stripped, X-Forwarded-* set from the socket', async () => {
  const r = await visit(server.port, host, {
    path: '/headers',
    headers: ['X-A', '1', 'Connection', 'keep-alive, X-Drop-Me', 'X-Drop-Me', 'x', 'Keep-Alive', 'timeout=5', 'X-B', '2', 'X-Forwarded-For', '6.6.6.6', 'X-Forwarded-Host', 'evil', 'X-C', '3'],
  });
  const raw = JSON.parse(r.body.toString()) as string[];
  const names = raw.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
  const get = (n: string): string[] => raw.filter((_, i) => i % 2 === 1 && raw[i - 1]!.toLowerCase() === n);
  assert.ok(names.indexOf('x-a') < names.indexOf('x-b') && names.indexOf('x-b') < names.indexOf('x-c'), `order: ${names}`);
  assert.not.ok(names.includes('x-drop-me'), 'listed in Connection: stripped');
  assert.not.ok(names.includes('keep-alive'));
  assert.equal(get('x-forwarded-for'), ['127.0.0.1']);
  assert.equal(get('x-forwarded-host'), [host]);
  assert.equal(get('x-forwarded-proto'), ['http']);
  assert.equal(get('host'), [host]);
});

test('response headers: case and order kept, repeated headers kept', async () => {
  const r = await visit(server.port, host, { path: '/ordered' });
  const mine = r.rawHeaders.filter((_, i) => i % 2 === 0 && /^(x-|set-cookie|content-type)/i.test(r.rawHeaders[i]!));
  assert.equal(mine, ['X-First', 'x-second', 'X-THIRD', 'Set-Cookie', 'Set-Cookie', 'Content-Type']);
  assert.equal(r.headers['set-cookie'], ['a=1', 'b=2']);
});

test('POST echo: 20 MB up and back, byte-exact', async () => {
  const body = randomBytes(20 * 1024 * 1024);
  const r = await visit(server.port, host, { method: 'POST', path: '/echo', body }, 30_000);
  assert.is(r.status, 200);
  assert.is(r.body.length, body.length);
  assert.is(createHash('sha256').update(r.body).digest('hex'), createHash('sha256').update(body).digest('hex'));
});

test('20 MB download with Content-Length arrives whole, length header kept', async () => {
  const n = 20 * 1024 * 1024 + 3;
  const r = await visit(server.port, host, { path: `/download/${n}` }, 30_000);
  assert.is(r.status, 200);
  assert.is(r.headers['content-length'], String(n));
  assert.is(r.body.length, n);
});

test('50 concurrent requests', async () => {
  const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => visit(server.port, host, { method: 'POST', path: '/echo', body: `body-${i}` })));
  rs.forEach((r, i) => assert.is(r.body.toString(), `body-${i}`));
});

test('server-sent events arrive as they are written, not buffered', async () => {
  const got: number[] = [];
  const t0 = Date.now();
  await withDeadline(
    new Promise<void>((resolve, reject) => {
      const req = http.get({ host: '127.0.0.1', port: server.port, path: '/sse', headers: { host }, agent: false }, (res) => {
        res.on('data', () => got.push(Date.now() - t0));
        res.on('end', resolve);
      });
      req.on('error', reject);
    }),
    10_000,
    'sse',
  );
  assert.ok(got.length >= 4, `events came in ${got.length} pieces`);
  // The first event is written at ~300 ms, the last at ~1500 ms: the first must not wait for the last.
  assert.ok(got[0]! < got[got.length - 1]! - 600, `first at ${got[0]} ms, last at ${got[got.length - 1]} ms`);
});

test('slow response (3 s) is waited for', async () => {
  const c = await tunnelTo(local.port);
  const r = await visit(server.port, `${c}.localhost`, { path: '/slow' });
  assert.is(r.status, 200);
  assert.is(r.body.toString(), 'finally');
});

test('HEAD and 204 have no body', async () => {
  const h = await visit(server.port, host, { method: 'HEAD', path: '/' });
  assert.is(h.status, 200);
  assert.is(h.body.length, 0);
  const e = await visit(server.port, host, { path: '/empty' });
  assert.is(e.status, 204);
  assert.is(e.body.length, 0);
});

test('local service that never answers: 504 problem+json', async () => {
  const r = await visit(server.port, host, { path: '/hang' });
  assert.is(r.status, 504);
  assert.is(r.headers['content-type'], 'application/problem+json');
  assert.is(JSON.parse(r.body.toString()).type, '/problems/gateway-timeout');
});

test('local service down: 502 problem+json', async () => {
  const dead = net.createServer();
  const port = await new Promise<number>((r) => dead.listen(0, '127.0.0.1', () => r((dead.address() as net.AddressInfo).port)));
  await new Promise((r) => dead.close(r));
  const downId = await tunnelTo(port);
  const r = await visit(server.port, `${downId}.localhost`);
  assert.is(r.status, 502);
  assert.is(r.headers['content-type'], 'application/problem+json');
  assert.is(JSON.parse(r.body.toString()).type, '/problems/bad-gateway');
});

test('unknown tunnel: 404 problem+json; API still answers on other hosts', async () => {
  const r = await visit(server.port, 'nosuchtunnel.localhost');
  assert.is(r.status, 404);
  assert.is(r.headers['content-type'], 'application/problem+json');
  const api = await visit(server.port, `127.0.0.1:${server.port}`, { path: '/api/v1/me' });
  assert.is(api.status, 401);
});

test('a visitor that disconnects mid-download does not disturb the tunnel', async () => {
  await withDeadline(
    new Promise<void>((resolve, reject) => {
      const req = http.get({ host: '127.0.0.1', port: server.port, path: `/download/${50 * 1024 * 1024}`, headers: { host }, agent: false }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', () => undefined);
      setTimeout(() => reject(new Error('no data')), 5_000);
    }),
    6_000,
    'partial download',
  );
  await sleep(100);
  const r = await visit(server.port, host, { path: '/after' });
  assert.is(r.body.toString(), 'hello GET /after');
});

test('a visitor that stops reading stalls only its own stream', async () => {
  // A 64 MiB download nobody reads: its credit runs out, the rest of the tunnel goes on.
  const stalled = http.get({ host: '127.0.0.1', port: server.port, path: `/download/${64 * 1024 * 1024}`, headers: { host }, agent: false }, (res) => res.pause());
  stalled.on('error', () => undefined);
  await sleep(300);
  for (let i = 0; i < 5; i++) {
    const r = await visit(server.port, host, { path: `/beside-${i}` }, 3_000);
    assert.is(r.body.toString(), `hello GET /beside-${i}`);
  }
  stalled.destroy();
});

test.run();
