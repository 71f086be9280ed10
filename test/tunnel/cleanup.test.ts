import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { loadUws } from '../../src/http/uws-loader.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import type { DataPlaneCounts } from '../../src/protocol/tunnel-messages.js';
import { listen, visit, type Local } from './helpers.js';
import type { us_listen_socket } from '@trufflesuite/uws-js-unofficial';
import { lanePorts } from '../helpers/ports.js';

// Nothing of the data plane outlives its peers: after HTTP, WebSocket and TCP traffic on both
// shards (visitors landing on either, so the mesh carries about half), and peers that leave
// mid-request, every live-object count of GET /readyz?detail=1 returns to 0. Counts, not RSS:
// RSS depends on the allocator (see the churn bench), a map that keeps an entry does not.

const { uws } = loadUws();
let server: TestServer;
let origin: Local;
let echo: Local;
let wsListen: us_listen_socket | null = null;
let wsPort = 0;
const wsLocal = new Set<{ close(): void }>();
const RANGE_MIN = lanePorts(21).min;
const TUNNELS = 4;

async function counts(): Promise<DataPlaneCounts> {
  const r = await api(server, 'GET', '/readyz?detail=1', { key: server.adminKey });
  assert.is(r.status, 200, r.text);
  return r.body as DataPlaneCounts;
}

/** Every count of main and of each shard that should be 0 with no peers (heap figures aside). */
function live(c: DataPlaneCounts): string[] {
  const out: string[] = [];
  if (c.registry.tunnels) out.push(`registry tunnels ${c.registry.tunnels}`);
  if (c.registry.sessions) out.push(`registry sessions ${c.registry.sessions}`);
  for (const s of c.shards) {
    for (const k of ['tunnels', 'routes', 'control_connections', 'streams', 'mesh_streams', 'pending_admissions'] as const) {
      if (s[k]) out.push(`shard ${s.shard} ${k} ${s[k]}`);
    }
  }
  return out;
}

/** A WebSocket upgrade the local service refuses, on a fresh connection; the response's head. */
function refusedUpgrade(host: string): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve, reject) => {
      const s = net.connect(server.port, '127.0.0.1');
      let got = '';
      s.on('error', reject);
      s.on('data', (d: Buffer) => {
        got += d.toString('latin1');
        if (got.includes('websocket only')) {
          s.destroy();
          resolve(got);
        }
      });
      s.write(`GET /refused HTTP/1.1\r\nHost: ${host}:${server.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
    }),
    5_000,
    'refused upgrade',
  );
}

test.before(async () => {
  server = await startServer({ args: ['--tcp-port-range', `${RANGE_MIN}-${RANGE_MIN + 20}`] });
  origin = await listen(
    http.createServer((req, res) => {
      if (req.url === '/hang') return; // answered never: the stream is open when its peer leaves
      if (req.url === '/echo') return void req.pipe(res);
      res.end(`hello ${req.url}`);
    }),
  );
  echo = await listen(net.createServer({ allowHalfOpen: true }, (s) => s.on('error', () => {}).pipe(s)));
  const app = uws.App();
  app.ws('/ws', {
    upgrade: (res, req, context) =>
      res.upgrade({}, req.getHeader('sec-websocket-key'), req.getHeader('sec-websocket-protocol'), req.getHeader('sec-websocket-extensions'), context),
    open: (ws) => void wsLocal.add(ws),
    close: (ws) => void wsLocal.delete(ws),
    message: (ws, m, isBinary) => void ws.send(m, isBinary),
  });
  // Any other path refuses the upgrade with an ordinary response.
  app.get('/*', (res) => void res.writeStatus('426 Upgrade Required').end('websocket only'));
  await new Promise<void>((r) =>
    app.listen('127.0.0.1', 0, (s) => {
      wsListen = s || null;
      wsPort = uws.us_socket_local_port(s as us_listen_socket);
      r();
    }),
  );
});

test.after(async () => {
  for (const s of wsLocal) s.close();
  if (wsListen) uws.us_listen_socket_close(wsListen);
  await origin?.close();
  await echo?.close();
  await server?.stop();
});

test('readiness detail is for admins with the management scope only', async () => {
  const anon = await api(server, 'GET', '/readyz?detail=1');
  assert.is(anon.status, 401);
  const member = await createUser(server);
  const memberKey = await createKeyFor(server, member.id);
  const notAdmin = await api(server, 'GET', '/readyz?detail=1', { key: memberKey });
  assert.is(notAdmin.status, 403);
  assert.match(notAdmin.body.detail, 'admin role');
  const admin = await createUser(server, { role: 'admin' });
  const tunnelsOnly = await createKeyFor(server, admin.id, { scopes: ['tunnels'] });
  const noScope = await api(server, 'GET', '/readyz?detail=1', { key: tunnelsOnly });
  assert.is(noScope.status, 403);
  assert.match(noScope.body.detail, 'management scope');
  const bad = await api(server, 'GET', '/readyz?detail=yes', { key: server.adminKey });
  assert.is(bad.status, 400);
  // The plain readiness check stays open to anyone.
  assert.is((await api(server, 'GET', '/readyz')).status, 200);
  const c = await counts();
  assert.is(c.shards.length, 2);
  assert.equal(live(c), []);
});

test('every count returns to 0 after HTTP, WebSocket and TCP peers leave', async () => {
  const clients: TunnelClient[] = [];
  // lanes: false keeps a tunnel's visitors on the other shard crossing the mesh.
  const start = async (type: 'http' | 'tcp', port: number, lanes = true): Promise<string> => {
    const c = new TunnelClient({ server: server.url, token: server.adminKey, type, local: { host: '127.0.0.1', port }, lanes });
    clients.push(c);
    return (await withDeadline(c.start(), 10_000, `${type} tunnel start`)).url;
  };
  // HTTP tunnels with lanes (their visitors are served where they land) and without.
  const httpIds: string[] = [];
  for (let i = 0; i < TUNNELS; i++) httpIds.push(new URL(await start('http', origin.port, i % 2 === 0)).hostname);
  // WebSocket tunnels until one lives on each shard (a control connection lands where the
  // kernel puts it): then a visitor, wherever it lands, crosses the mesh for one of the two.
  const wsIdOn = new Map<number, string>();
  for (let i = 0; i < 16 && wsIdOn.size < 2; i++) {
    const before = await counts();
    const id = new URL(await start('http', wsPort, false)).hostname;
    const after = await counts();
    const owner = after.shards.find((s) => s.tunnels > before.shards.find((b) => b.shard === s.shard)!.tunnels)!.shard;
    if (!wsIdOn.has(owner)) wsIdOn.set(owner, id);
  }
  assert.is(wsIdOn.size, 2, 'a tunnel on each shard');
  const wsIds = [...wsIdOn.values()];
  const tcpPort = Number(new URL(await start('tcp', echo.port)).port);

  // HTTP: fresh connections (agent: false) so the kernel spreads them over both shards.
  for (const host of httpIds) {
    for (let i = 0; i < 6; i++) {
      const r = await visit(server.port, host, { path: i % 2 ? '/echo' : `/small${i}`, method: i % 2 ? 'POST' : 'GET', body: i % 2 ? 'x'.repeat(100_000) : undefined });
      assert.is(r.status, 200);
    }
  }
  // Requests still waiting for an answer when their tunnel goes.
  const hanging = httpIds.flatMap((host) => [0, 1].map(() => visit(server.port, host, { path: '/hang' }, 30_000).catch(() => null)));

  // WebSocket: upgraded connections (some stay open), and refused upgrades (plain 426).
  const sockets: WsClient[] = [];
  for (let i = 0; i < 6; i++) {
    const ws = await WsClient.connect(`${server.url}/ws`, { host: `${wsIds[i % 2]}:${server.port}` }, 1024 * 1024, 5_000);
    const echoed = withDeadline(new Promise<Buffer>((r) => ws.once('message', r)), 5_000, 'ws echo');
    ws.send(Buffer.from(`m${i}`));
    assert.is(String(await echoed), `m${i}`);
    sockets.push(ws);
  }
  for (let i = 0; i < 4; i++) for (const id of wsIds) assert.match(await refusedUpgrade(id), /^HTTP\/1.1 426 /);
  for (const ws of sockets.splice(0, 3)) ws.close();

  // TCP: complete round trips, and connections left open.
  const tcpOpen: net.Socket[] = [];
  for (let i = 0; i < 4; i++) {
    const s = net.connect(tcpPort, '127.0.0.1');
    s.on('error', () => {});
    await withDeadline(new Promise<void>((r) => s.once('data', () => r()).write('ping')), 5_000, 'tcp echo');
    if (i % 2) s.end();
    else tcpOpen.push(s);
  }

  const during = await counts();
  assert.ok(during.shards.every((s) => s.routes === clients.length), JSON.stringify(during));
  assert.ok(during.shards.reduce((n, s) => n + s.streams, 0) > 0, 'some streams are live before the peers leave');

  await Promise.all(clients.map((c) => withDeadline(c.stop(), 10_000, 'client stop')));
  await Promise.all(hanging);
  for (const ws of sockets) ws.close();
  for (const s of tcpOpen) s.destroy();

  const left = await eventually(
    async () => {
      const c = await counts();
      return live(c).length === 0 ? c : null;
    },
    15_000,
    'every data-plane count back to 0',
  ).catch(async (err: Error) => {
    throw new Error(`${err.message}: ${live(await counts()).join(', ')}`);
  });
  assert.equal(live(left!), []);
});

test.run();
