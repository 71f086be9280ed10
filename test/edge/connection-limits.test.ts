import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';

// An attacker with a few addresses opens connections and never sends a byte, to hold every file
// descriptor of burrowd (then each new visitor, /healthz and control reconnect is reset).
// Small caps through the flags keep the counts small; one shard, so the counts are exact.

interface Silent {
  sock: net.Socket;
  /** Resolves with how long after the connect the server closed it (and whatever it sent). */
  closed: Promise<{ afterMs: number; text: string }>;
}

/** A connection that sends nothing (or only `bytes`), from `localAddress`. */
async function silent(port: number, localAddress = '127.0.0.1', bytes?: string): Promise<Silent> {
  const sock = net.connect({ host: '127.0.0.1', port, localAddress });
  sock.on('error', () => undefined);
  await withDeadline(new Promise((r) => sock.once('connect', r)), 5_000, 'connect');
  const t0 = Date.now();
  let text = '';
  sock.on('data', (b: Buffer) => (text += b.toString('latin1')));
  if (bytes) sock.write(bytes);
  const closed = new Promise<{ afterMs: number; text: string }>((r) => sock.once('close', () => r({ afterMs: Date.now() - t0, text })));
  return { sock, closed };
}

/** Whether the server closes `s` within `ms`. */
async function closesWithin(s: Silent, ms: number): Promise<boolean> {
  return Promise.race([s.closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
}

/** GET `path` with Host `host` from `localAddress`: the status, or 0 when the connection failed. */
function get(port: number, path: string, localAddress = '127.0.0.1', host = 'localhost'): Promise<number> {
  return withDeadline(
    new Promise<number>((resolve) => {
      const req = http.request({ host: '127.0.0.1', port, localAddress, path, headers: { host }, agent: false });
      req.on('error', () => resolve(0));
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.end();
    }),
    5_000,
    `GET ${path} from ${localAddress}`,
  );
}

/** Lets the server's loop accept what the test connected. */
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 300));

test('silent connections are closed after --first-byte-timeout, not the 60 s idle timeout; a slow head that started in time is still served', async () => {
  const server = await startServer({ workers: 1, args: ['--first-byte-timeout', '1'] });
  const conns: Silent[] = [];
  try {
    for (let i = 0; i < 40; i++) conns.push(await silent(server.port, i % 2 ? '127.0.0.2' : '127.0.0.1'));
    // One that sends its first byte in time, and the rest of its head later.
    const slow = await silent(server.port, '127.0.0.3', 'G');
    const closed = await withDeadline(Promise.all(conns.map((c) => c.closed)), 6_000, 'silent connections closed by the server');
    for (const c of closed) {
      assert.ok(c.afterMs >= 800, `closed after ${c.afterMs} ms: by the timeout, not before`);
      assert.is(c.text, '', 'closed without a word');
    }
    assert.is(await closesWithin(slow, 0), false, 'a connection that started its request in time stays');
    slow.sock.write('ET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
    const answer = await withDeadline(slow.closed, 5_000, 'slow head answered');
    assert.match(answer.text, /^HTTP\/1\.1 200 /);
    assert.is(await get(server.port, '/healthz'), 200);
  } finally {
    for (const c of conns) c.sock.destroy();
    await server.stop();
  }
});

test('past --max-connections-per-ip an address is closed at once; another address is served, /healthz answers, and a freed slot is taken again', async () => {
  const CAP = 10;
  const server = await startServer({ workers: 1, args: ['--max-connections-per-ip', String(CAP), '--first-byte-timeout', '60'] });
  const conns: Silent[] = [];
  try {
    for (let i = 0; i < CAP; i++) conns.push(await silent(server.port, '127.0.0.1'));
    await settle();
    for (const c of conns) assert.is(await closesWithin(c, 0), false, 'within the cap: open');
    const over = await silent(server.port, '127.0.0.1');
    assert.ok(await closesWithin(over, 2_000), 'one past the cap is closed at once');
    // The attacker's address is full; another one is not.
    assert.is(await get(server.port, '/healthz', '127.0.0.2'), 200);
    assert.is(await get(server.port, '/healthz', '127.0.0.2'), 200);
    conns.shift()!.sock.destroy();
    await eventually(async () => (await get(server.port, '/healthz', '127.0.0.1')) === 200, 5_000, 'a slot freed on the full address');
  } finally {
    for (const c of conns) c.sock.destroy();
    await server.stop();
  }
});

test('--proxy-protocol: the cap counts the address the PROXY header names, not the load balancer', async () => {
  const CAP = 5;
  const server = await startServer({ workers: 1, args: ['--proxy-protocol', '--max-connections-per-ip', String(CAP), '--first-byte-timeout', '60'] });
  const header = (ip: string): string => `PROXY TCP4 ${ip} 127.0.0.1 40000 80\r\n`;
  const conns: Silent[] = [];
  try {
    for (let i = 0; i < CAP; i++) conns.push(await silent(server.port, '127.0.0.1', header('192.0.2.7')));
    await settle();
    const over = await silent(server.port, '127.0.0.1', header('192.0.2.7'));
    assert.ok(await closesWithin(over, 2_000), 'the header address past its cap is closed');
    // The same load balancer, for another client: served.
    const other = await silent(server.port, '127.0.0.1', `${header('192.0.2.8')}GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`);
    const answer = await withDeadline(other.closed, 5_000, 'another client through the balancer');
    assert.match(answer.text, /^HTTP\/1\.1 200 /);
  } finally {
    for (const c of conns) c.sock.destroy();
    await server.stop();
  }
});

test('--public-fd-limit: in the last tenth only control connections and the API are served (visitors get 503), past it new connections are closed', async () => {
  const BUDGET = 64;
  const RESERVE = 6;
  let local: Local | null = null;
  const server = await startServer({ workers: 1, args: ['--public-fd-limit', String(BUDGET), '--first-byte-timeout', '60'] });
  const clients: TunnelClient[] = [];
  const conns: Silent[] = [];
  try {
    local = await listen(http.createServer((_req, res) => res.end('ok')));
    const client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port } });
    clients.push(client);
    const { id } = await withDeadline(client.start(), 10_000, 'tunnel start');
    const host = `${id}.localhost`;
    assert.is((await visit(server.port, host)).status, 200);
    // The tunnel's control connection holds one descriptor; silent ones fill the rest up to the reserve.
    for (let i = 0; i < BUDGET - RESERVE - 1; i++) conns.push(await silent(server.port, `127.0.0.${2 + (i % 4)}`));
    await settle();
    // In the reserve: a visitor of the tunnel is told to come back…
    const refused = await visit(server.port, host);
    assert.is(refused.status, 503);
    assert.match(String(refused.headers['content-type']), /application\/problem\+json/);
    assert.match(refused.body.toString(), /as many connections as it can/);
    // …while the API and a tunnel client's control connection still get through.
    assert.is(await get(server.port, '/healthz', '127.0.0.9'), 200);
    const late = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port } });
    clients.push(late);
    await withDeadline(late.start(), 10_000, 'a tunnel client connects in the reserve');
    // Past the budget: closed at once.
    const extra: Silent[] = [];
    for (let i = 0; i < RESERVE + 2; i++) extra.push(await silent(server.port, '127.0.0.10'));
    conns.push(...extra);
    const cut = await Promise.all(extra.map((c) => closesWithin(c, 1_500)));
    assert.ok(cut.filter(Boolean).length >= 2, `past the budget some are closed at once (${cut.filter(Boolean).length} of ${extra.length})`);
    // The descriptors come back with the connections.
    for (const c of conns) c.sock.destroy();
    await eventually(async () => (await visit(server.port, host)).status === 200, 5_000, 'visitors served again');
  } finally {
    for (const c of conns) c.sock.destroy();
    for (const c of clients) await c.stop();
    await local?.close();
    await server.stop();
  }
});

test.run();
