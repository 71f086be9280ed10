import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { api } from '../helpers/fixtures.js';
import { TunnelClient, TunnelRefused } from '../../src/client/tunnel-client.js';
import { listen, once, type Local } from './helpers.js';
import { lanePorts } from '../helpers/ports.js';

// TCP tunnels: a public port of --tcp-port-range on the owning shard, byte-exact relay both
// ways, several connections at once, half-close in both directions.

let server: TestServer;
let echo: Local;
let halfClose: Local;
const clients: TunnelClient[] = [];
const RANGE = { min: lanePorts(51).min, span: 50 };

function client(port: number, remotePort?: number): TunnelClient {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'tcp', local: { host: '127.0.0.1', port }, remotePort });
  clients.push(c);
  return c;
}

/** Connects, writes `data`, half-closes, and reads everything until the peer closes. */
function roundTrip(port: number, data: Buffer): Promise<Buffer> {
  return withDeadline(
    new Promise<Buffer>((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port, noDelay: true, allowHalfOpen: true });
      const chunks: Buffer[] = [];
      s.on('data', (c: Buffer) => chunks.push(c));
      s.on('end', () => resolve(Buffer.concat(chunks)));
      s.on('error', reject);
      s.end(data);
    }),
    30_000,
    'tcp round trip',
  );
}

test.before(async () => {
  server = await startServer({ args: ['--tcp-port-range', `${RANGE.min}-${RANGE.min + RANGE.span}`] });
  echo = await listen(net.createServer({ allowHalfOpen: true }, (s) => s.pipe(s)));
  // Reads until the visitor's FIN, then answers with the byte count and closes.
  halfClose = await listen(
    net.createServer({ allowHalfOpen: true }, (s) => {
      let n = 0;
      s.on('data', (c: Buffer) => (n += c.length));
      s.on('end', () => s.end(`got ${n}`));
    }),
  );
});

test.after(async () => {
  await Promise.all(clients.map((c) => c.stop()));
  await echo?.close();
  await halfClose?.close();
  await server?.stop();
});

test('tcp tunnel: public URL in the range, byte-exact echo (8 MB)', async () => {
  const { url } = await withDeadline(client(echo.port).start(), 10_000, 'start');
  const m = /^tcp:\/\/localhost:(\d+)$/.exec(url);
  assert.ok(m, url);
  const port = Number(m![1]);
  assert.ok(port >= RANGE.min && port <= RANGE.min + RANGE.span);
  const data = randomBytes(8 * 1024 * 1024);
  const back = await roundTrip(port, data);
  assert.is(back.length, data.length);
  assert.is(createHash('sha1').update(back).digest('hex'), createHash('sha1').update(data).digest('hex'));
});

test('several connections at once', async () => {
  const { url } = await withDeadline(client(echo.port).start(), 10_000, 'start');
  const port = Number(url.split(':').pop());
  const bodies = Array.from({ length: 10 }, (_, i) => Buffer.from(`conn-${i}-`.repeat(1000 + i)));
  const backs = await Promise.all(bodies.map((b) => roundTrip(port, b)));
  backs.forEach((b, i) => assert.ok(b.equals(bodies[i]!), `connection ${i}`));
});

test('half-close: the visitor FIN reaches the local service, its answer still comes back', async () => {
  const c = client(halfClose.port);
  const { url } = await withDeadline(c.start(), 10_000, 'start');
  const seen = once<[{ bytesIn: number; bytesOut: number }]>(c, 'connection', 10_000);
  const back = await roundTrip(Number(url.split(':').pop()), Buffer.alloc(123_456, 1));
  assert.is(back.toString(), 'got 123456');
  const [conn] = await seen;
  assert.is(conn.bytesIn, 123_456);
  assert.is(conn.bytesOut, 'got 123456'.length);
});

test('requested remote port: granted, then a conflict for the next asker', async () => {
  // A port of the range that no earlier test's tunnel drew (they get random free ones).
  const live = await api(server, 'GET', '/tunnels', { key: server.adminKey });
  const taken = new Set((live.body as { remote_port: number | null }[]).map((t) => t.remote_port));
  let want = RANGE.min + RANGE.span;
  while (taken.has(want)) want--;
  const { url } = await withDeadline(client(echo.port, want).start(), 10_000, 'start');
  assert.is(url, `tcp://localhost:${want}`);
  const err = await client(echo.port, want).start().then(() => null, (e: unknown) => e);
  assert.instance(err, TunnelRefused);
  assert.is((err as TunnelRefused).code, 'conflict');
  const out = await client(echo.port, 80).start().then(() => null, (e: unknown) => e);
  assert.is((out as TunnelRefused).code, 'bad-request');
});

test('local service down: the visitor connection is closed', async () => {
  const dead = net.createServer();
  const port = await new Promise<number>((r) => dead.listen(0, '127.0.0.1', () => r((dead.address() as net.AddressInfo).port)));
  await new Promise((r) => dead.close(r));
  const { url } = await withDeadline(client(port).start(), 10_000, 'start');
  const closed = await withDeadline(
    new Promise<boolean>((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port: Number(url.split(':').pop()) });
      s.on('error', () => resolve(true));
      s.on('close', () => resolve(true));
    }),
    5_000,
    'closed',
  );
  assert.ok(closed);
});

test.run();
