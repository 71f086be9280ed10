import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';

// burrowd behind a load balancer: a raw-socket balancer (node:net) in front of the real server.
//  - --trust-proxy: the balancer connects from 127.0.0.2 (trusted) and adds X-Forwarded-For;
//    a visitor connecting from 127.0.0.1 (not trusted) has its own X-Forwarded-* replaced.
//  - --proxy-protocol: the balancer writes a PROXY v2 header before the bytes.
// The address the balancer reports must be the one used everywhere: toward the local service,
// in the session's client_ip, and by the failed-authentication limit.

const LB_ADDRESS = '127.0.0.2';

interface Balancer {
  port: number;
  close(): Promise<void>;
}

/**
 * A layer-4 balancer: each accepted connection is relayed to burrowd from LB_ADDRESS.
 * `head(client)` is written first (a PROXY header); `xff`, when given, is inserted as an
 * X-Forwarded-For line into the first request head (what an HTTP balancer adds).
 */
function startBalancer(target: number, opts: { head?: (client: net.Socket) => Buffer; xff?: string; proto?: string }): Promise<Balancer> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const up = net.connect({ host: '127.0.0.1', port: target, localAddress: LB_ADDRESS });
    sockets.add(client).add(up);
    client.on('close', () => up.destroy());
    up.on('close', () => client.destroy());
    client.on('error', () => undefined);
    up.on('error', () => undefined);
    if (opts.head) up.write(opts.head(client));
    let first = true;
    let pending = Buffer.alloc(0);
    client.on('data', (d: Buffer) => {
      if (!first || opts.xff === undefined) return void up.write(d);
      pending = Buffer.concat([pending, d]);
      const eol = pending.indexOf('\r\n');
      if (eol < 0) return;
      first = false;
      const extra = `X-Forwarded-For: ${opts.xff}\r\n${opts.proto ? `X-Forwarded-Proto: ${opts.proto}\r\n` : ''}`;
      up.write(Buffer.concat([pending.subarray(0, eol + 2), Buffer.from(extra), pending.subarray(eol + 2)]));
    });
    up.pipe(client);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        port: (server.address() as net.AddressInfo).port,
        close: () => new Promise<void>((r) => {
          for (const s of sockets) s.destroy();
          server.close(() => r());
        }),
      }),
    ),
  );
}

/** A PROXY protocol v2 header (PROXY command, TCP over IPv4) naming `src` as the client. */
function proxyV2(src: string, srcPort: number, version = 2): Buffer {
  const b = Buffer.alloc(28);
  Buffer.from('0d0a0d0a000d0a515549540a', 'hex').copy(b);
  b[12] = (version << 4) | 0x1;
  b[13] = 0x11;
  b.writeUInt16BE(12, 14);
  src.split('.').forEach((o, i) => (b[16 + i] = Number(o)));
  b.set([127, 0, 0, 1], 20);
  b.writeUInt16BE(srcPort, 24);
  b.writeUInt16BE(443, 26);
  return b;
}

/** Sends raw bytes and collects what comes back until the server closes (or `ms`). */
function rawExchange(port: number, bytes: Buffer, ms = 5_000): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(bytes));
    let text = '';
    const t = setTimeout(() => {
      s.destroy();
      resolve({ text, closed: false });
    }, ms);
    s.on('data', (d) => (text += d.toString('latin1')));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(t);
      resolve({ text, closed: true });
    });
  });
}

let local: Local;
const clients: TunnelClient[] = [];
const cleanups: (() => Promise<unknown>)[] = [];

async function tunnel(server: string, key: string): Promise<{ id: string; client: TunnelClient }> {
  const client = new TunnelClient({ server, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port } });
  clients.push(client);
  const { id } = await withDeadline(client.start(), 15_000, 'tunnel start');
  return { id, client };
}

/** The forwarding headers the local service received. */
async function seenBy(port: number, host: string, headers: Record<string, string> = {}): Promise<Record<string, string>> {
  const r = await visit(port, host, { path: '/headers', headers });
  assert.is(r.status, 200, r.body.toString());
  return JSON.parse(r.body.toString());
}

async function clientIpOf(server: TestServer, id: string, via: { url: string } = server): Promise<string | null> {
  return eventually(async () => {
    const r = await api(via, 'GET', '/sessions?all=true&limit=1000', { key: server.adminKey });
    const s = (r.body as { tunnel_id: string; client_ip: string | null }[]).find((x) => x.tunnel_id === id);
    if (!s) throw new Error(`no session for ${id} yet`);
    return s.client_ip;
  }, 10_000, 'session row');
}

test.before(async () => {
  local = await listen(
    http.createServer((req, res) => {
      const pick = (n: string) => String(req.headers[n] ?? '');
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ xff: pick('x-forwarded-for'), real: pick('x-real-ip'), proto: pick('x-forwarded-proto') }));
    }),
  );
});

test.after(async () => {
  for (const c of clients) await c.stop().catch(() => undefined);
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await local.close();
});

test('--trust-proxy: a trusted balancer\'s X-Forwarded-For is kept (peer appended) and names the client everywhere; anyone else\'s is replaced', async () => {
  const server = await startServer({ args: ['--trust-proxy', `${LB_ADDRESS}/32,10.9.0.0/16`, '--auth-failure-limit', '2'] });
  cleanups.push(() => server.stop());
  const lb = await startBalancer(server.port, { xff: '203.0.113.7', proto: 'https' });
  cleanups.push(() => lb.close());

  // The tunnel client itself connects through the balancer: its session records the balancer's client.
  const { id } = await tunnel(`http://127.0.0.1:${lb.port}`, server.adminKey);
  const host = `${id}.localhost`;

  const viaLb = await seenBy(lb.port, host);
  assert.equal(viaLb, { xff: '203.0.113.7, 127.0.0.2', real: '203.0.113.7', proto: 'https' });

  // Straight from 127.0.0.1 (not trusted): the visitor's own forwarding headers are not believed.
  const spoofed = await seenBy(server.port, host, { 'x-forwarded-for': '6.6.6.6', 'x-real-ip': '6.6.6.6', 'x-forwarded-proto': 'https' });
  assert.equal(spoofed, { xff: '127.0.0.1', real: '127.0.0.1', proto: 'http' });

  assert.is(await clientIpOf(server, id), '203.0.113.7');

  // Failed authentications count for the balancer's client, not for the balancer: 203.0.113.7
  // reaches the limit (2) and gets 429, while a bad key straight from 127.0.0.1 is a 401 (another
  // key prefix: the limit also counts per prefix).
  const bad = { authorization: 'Bearer bk_AAAAAAAAAAAA_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' };
  const otherBad = { authorization: 'Bearer bk_BBBBBBBBBBBB_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' };
  const lbUrl = { url: `http://127.0.0.1:${lb.port}` };
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push((await api(lbUrl, 'GET', '/me', { headers: bad })).status);
  assert.ok(statuses.includes(429), `statuses through the balancer: ${statuses.join(',')}`);
  assert.is((await api(server, 'GET', '/me', { headers: otherBad })).status, 401);
});

test('--trust-proxy: the client is the right-most untrusted X-Forwarded-For entry; trusted hops are skipped', async () => {
  const server = await startServer({ args: ['--trust-proxy', `${LB_ADDRESS},10.9.0.0/16`] });
  cleanups.push(() => server.stop());
  const lb = await startBalancer(server.port, { xff: '1.1.1.1, 198.51.100.4, 10.9.3.3' });
  cleanups.push(() => lb.close());
  const { id } = await tunnel(server.url, server.adminKey);
  const seen = await seenBy(lb.port, `${id}.localhost`);
  // 10.9.3.3 is a trusted inner proxy; 198.51.100.4 is who connected to it; 1.1.1.1 is unproven.
  assert.equal(seen, { xff: '1.1.1.1, 198.51.100.4, 10.9.3.3, 127.0.0.2', real: '198.51.100.4', proto: 'http' });
});

test('--proxy-protocol: the PROXY v2 or v1 source is the client; LOCAL is the balancer; no header gets 400; a malformed or unfinished one is closed unanswered', async () => {
  const server = await startServer({ args: ['--proxy-protocol'] });
  cleanups.push(() => server.stop());
  const lb = await startBalancer(server.port, { head: () => proxyV2('198.51.100.20', 40000) });
  cleanups.push(() => lb.close());
  const { id } = await tunnel(`http://127.0.0.1:${lb.port}`, server.adminKey);
  const host = `${id}.localhost`;

  const seen = await seenBy(lb.port, host, { 'x-forwarded-for': '6.6.6.6' });
  assert.equal(seen, { xff: '198.51.100.20', real: '198.51.100.20', proto: 'http' });
  assert.is(await clientIpOf(server, id, { url: `http://127.0.0.1:${lb.port}` }), '198.51.100.20');

  const request = Buffer.from(`GET /headers HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  const bodyOf = (text: string): Record<string, string> => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
  // Version 1 (nginx, HAProxy send-proxy), IPv4 and IPv6.
  const v1 = await rawExchange(server.port, Buffer.concat([Buffer.from('PROXY TCP4 203.0.113.7 127.0.0.1 40001 443\r\n'), request]));
  assert.ok(v1.text.startsWith('HTTP/1.1 200'), v1.text.slice(0, 200));
  assert.equal(bodyOf(v1.text), { xff: '203.0.113.7', real: '203.0.113.7', proto: 'http' });
  const v1six = await rawExchange(server.port, Buffer.concat([Buffer.from('PROXY TCP6 2001:db8::7 ::1 40002 443\r\n'), request]));
  assert.is(bodyOf(v1six.text).real, '2001:db8::7', v1six.text.slice(0, 300));
  // LOCAL (a balancer's health check) speaks for itself: the peer is the client.
  const local = proxyV2('198.51.100.20', 1);
  local[12] = 0x20;
  const health = await rawExchange(server.port, Buffer.concat([local, request]));
  assert.equal(bodyOf(health.text), { xff: '127.0.0.1', real: '127.0.0.1', proto: 'http' });

  // No header at all: answered 400 (problem+json naming the flag) and closed.
  const bare = await rawExchange(server.port, request);
  assert.ok(bare.text.startsWith('HTTP/1.1 400'), bare.text.slice(0, 200));
  assert.ok(bare.text.includes('PROXY protocol'), bare.text);
  assert.ok(bare.closed);
  // The API too.
  const bareApi = await rawExchange(server.port, Buffer.from('GET /api/v1/me HTTP/1.1\r\nHost: localhost\r\n\r\n'));
  assert.ok(bareApi.text.startsWith('HTTP/1.1 400'), bareApi.text.slice(0, 200));
  // Malformed headers are closed at once, never served; one that never ends, after 5 s.
  const t0 = Date.now();
  const [wrongVersion, badV1, unfinished] = await Promise.all([
    rawExchange(server.port, Buffer.concat([proxyV2('198.51.100.20', 1, 1), request]), 30_000).then((r) => ({ ...r, ms: Date.now() - t0 })),
    rawExchange(server.port, Buffer.concat([Buffer.from('PROXY TCP4 198.51.100.20 127.0.0.1 99999 443\r\n'), request]), 30_000).then((r) => ({ ...r, ms: Date.now() - t0 })),
    rawExchange(server.port, Buffer.from('PROXY TCP4 198.51.100.20 127.0.0'), 30_000).then((r) => ({ ...r, ms: Date.now() - t0 })),
  ]);
  for (const r of [wrongVersion, badV1]) {
    assert.equal({ text: r.text, closed: r.closed }, { text: '', closed: true });
    assert.ok(r.ms < 3_000, `a malformed header was closed after ${r.ms} ms`);
  }
  assert.equal({ text: unfinished.text, closed: unfinished.closed }, { text: '', closed: true });
  assert.ok(unfinished.ms >= 4_500 && unfinished.ms < 15_000, `unfinished header closed after ${unfinished.ms} ms`);
});

test.run();
