import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, visit, type Local } from './helpers.js';

// Counters: what visitors send and receive shows up in /tunnels (live) and /sessions (the
// StatsActor's batched writes), and a PostgreSQL outage in the middle loses nothing and
// counts nothing twice. burrowd reaches the database through a TCP proxy the test can cut.

let db: TestDatabase;
let proxy: { server: net.Server; down: boolean; cut(): void; port: number };
let server: TestServer;
let local: Local;
const clients: TunnelClient[] = [];

function startProxy(target: URL): Promise<typeof proxy> {
  const pairs = new Set<net.Socket>();
  const p = {
    server: net.createServer((s) => {
      if (p.down) return void s.destroy();
      const up = net.connect({ host: target.hostname, port: Number(target.port || 5432) });
      pairs.add(s).add(up);
      const drop = (): void => {
        s.destroy();
        up.destroy();
        pairs.delete(s);
        pairs.delete(up);
      };
      s.pipe(up).pipe(s);
      s.on('error', drop).on('close', drop);
      up.on('error', drop).on('close', drop);
    }),
    down: false,
    port: 0,
    cut(): void {
      for (const s of pairs) s.destroy();
      pairs.clear();
    },
  };
  return new Promise((resolve) => p.server.listen(0, '127.0.0.1', () => resolve({ ...p, port: (p.server.address() as net.AddressInfo).port, server: p.server, cut: p.cut, get down() { return p.down; }, set down(v: boolean) { p.down = v; } })));
}

async function session(id: string): Promise<{ bytes_in: number; bytes_out: number; requests: number; disconnected_at: string | null }> {
  const r = await api(server, 'GET', '/sessions?all=true&limit=1000', { key: server.adminKey });
  return r.body.find((s: { tunnel_id: string }) => s.tunnel_id === id);
}

/** When the session row of `id` was last written (every second while the session is live). */
async function lastFlush(id: string): Promise<number> {
  const [row] = await db.sql<{ last_flush_at: Date }[]>`select last_flush_at from sessions where tunnel_id = ${id} order by connected_at desc limit 1`;
  return row ? new Date(row.last_flush_at).getTime() : 0;
}

test.before(async () => {
  db = await startDatabase();
  const target = new URL(db.url);
  proxy = await startProxy(target);
  const proxied = new URL(db.url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(proxy.port);
  server = await startServer({ db: { ...db, url: proxied.toString() } });
  local = await listen(
    http.createServer((req, res) => {
      let n = 0;
      req.on('data', (c: Buffer) => (n += c.length));
      req.on('end', () => res.end('x'.repeat(n * 2 + 10)));
    }),
  );
});

test.after(async () => {
  await Promise.all(clients.map((c) => c.stop()));
  await local?.close();
  await server?.stop();
  proxy?.server.close();
  proxy?.cut();
  await db?.stop();
});

async function traffic(host: string, sizes: number[]): Promise<{ bytesIn: number; bytesOut: number }> {
  let bytesIn = 0;
  let bytesOut = 0;
  for (const n of sizes) {
    const r = await visit(server.port, host, { method: 'POST', path: '/', body: Buffer.alloc(n, 1) });
    assert.is(r.status, 200);
    bytesIn += n;
    bytesOut += r.body.length;
  }
  return { bytesIn, bytesOut };
}

test('counters in /tunnels and /sessions match the bytes sent; the session closes with them', async () => {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'counted' });
  clients.push(c);
  await withDeadline(c.start(), 10_000, 'start');
  const host = `counted.localhost:${server.port}`;
  const sent = await traffic(host, [0, 1, 1000, 65_536, 300_000]);
  const want = { bytes_in: sent.bytesIn, bytes_out: sent.bytesOut, requests: 5 };
  await eventually(async () => {
    const t = await api(server, 'GET', '/tunnels/counted', { key: server.adminKey });
    return JSON.stringify(t.body.stats) === JSON.stringify(want);
  }, 3_000, '/tunnels stats');
  await eventually(async () => {
    const s = await session('counted');
    return s && s.bytes_in === want.bytes_in && s.bytes_out === want.bytes_out && s.requests === want.requests;
  }, 3_000, '/sessions counters');
  await c.stop();
  await eventually(async () => (await session('counted'))?.disconnected_at !== null, 3_000, 'session closed');
  const s = await session('counted');
  assert.is(s.bytes_in, want.bytes_in);
  assert.is(s.requests, 5);
});

test('a PostgreSQL outage during traffic loses no counters and counts none twice', async () => {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'outage' });
  clients.push(c);
  await withDeadline(c.start(), 10_000, 'start');
  const host = `outage.localhost:${server.port}`;
  const before = await traffic(host, [100, 200]);
  await eventually(async () => (await session('outage'))?.requests === 2, 3_000, 'first flush');

  proxy.down = true;
  proxy.cut();
  const during = await traffic(host, [1000, 2000, 3000]);
  // A flush fails meanwhile (it keeps the counters for the next one).
  await eventually(() => server.stderr().includes('cannot write session counters'), 10_000, 'the outage noticed by a flush');
  proxy.down = false;

  const after = await traffic(host, [7]);
  const want = {
    bytes_in: before.bytesIn + during.bytesIn + after.bytesIn,
    bytes_out: before.bytesOut + during.bytesOut + after.bytesOut,
    requests: 6,
  };
  await eventually(async () => {
    const s = await session('outage');
    return s && s.bytes_in === want.bytes_in && s.bytes_out === want.bytes_out && s.requests === want.requests;
  }, 10_000, 'counters written after the outage');
  // And they stay exact over two further flushes.
  for (let i = 0; i < 2; i++) {
    const last = await lastFlush('outage');
    await eventually(async () => (await lastFlush('outage')) > last, 5_000, 'a further flush');
  }
  const s = await session('outage');
  assert.equal({ bytes_in: s.bytes_in, bytes_out: s.bytes_out, requests: s.requests }, want);
});

test.run();
