import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { startCluster, visitNode, type TestCluster } from './cluster.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, type Local } from '../tunnel/helpers.js';
import { lanePorts } from '../helpers/ports.js';
import { startServer } from '../helpers/server.js';
import { WsClient, WsRefused } from '../../src/protocol/ws-client.js';
import { LINK_TOKEN_WINDOW_MS, LinkTokens, linkToken } from '../../src/cluster/node-links.js';
import { decodeEach, encode } from '../../src/protocol/codec.js';

const TCP = lanePorts(20);

// Any node serves any tunnel: the client is connected to node A, visitors arrive at B and C
// and are carried over links between nodes, byte for byte, with the counters exact in the
// tunnel's session row (which only A writes).

let cluster: TestCluster;
let local: Local;
const clients: TunnelClient[] = [];

test.before(async () => {
  // Two shards a node: a link's stream may land on a shard that relays it over the shard mesh.
  cluster = await startCluster(3, ['--tcp-port-range', `${TCP.min}-${TCP.max}`], { workers: 2 });
  const server = http.createServer((req, res) => {
    if (req.url === '/sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      // The second event only once the visitor has the first: proves it streams across nodes.
      req.socket.once('data', () => undefined);
      setTimeout(() => res.end('data: two\n\n'), 300);
      return;
    }
    const h = createHash('sha256');
    let n = 0;
    req.on('data', (c: Buffer) => {
      h.update(c);
      n += c.length;
    });
    req.on('end', () => {
      const size = Number(req.headers['x-size'] ?? 0);
      const body = size > 0 ? Buffer.alloc(size, 0x61) : Buffer.from(`${req.method} ${req.url} ${n} ${h.digest('hex')}`);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'x-echo-host': String(req.headers.host) });
      res.end(body);
    });
  });
  server.on('upgrade', (req, socket: net.Socket, head: Buffer) => {
    // The tunnel's side may be cut while echoing (a node stopped): not the test's failure.
    socket.on('error', () => undefined);
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n');
    if (head.length) socket.write(head);
    socket.pipe(socket);
  });
  local = await listen(server);
});

test.after(async () => {
  for (const c of clients) await c.stop().catch(() => undefined);
  await local?.close();
  await cluster?.stop();
});

async function tunnelOnA(id: string): Promise<{ client: TunnelClient; key: string; userId: string }> {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const client = new TunnelClient({ server: cluster.nodes[0]!.nodeUrl, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id });
  clients.push(client);
  await withDeadline(client.start(), 10_000, 'client start');
  return { client, key, userId: u.id };
}

/** Every node routes `id`. The route travels by notification, well within the reconcile's
 *  5 s (which would otherwise hide a lost notification). */
async function routedEverywhere(id: string): Promise<void> {
  for (const node of cluster.nodes) await eventually(async () => (await visitNode(node, id, { path: '/ping' })).status === 200, 2_000, `${id} routed at ${node.nodeUrl}`);
}

test('a visitor at another node reaches the tunnel: bodies byte-exact both ways, counters exact in the session row', async () => {
  await tunnelOnA('xnode');
  await routedEverywhere('xnode');
  const [, b, c] = cluster.nodes;
  const upload = randomBytes(3 * 1024 * 1024 + 17);
  const r = await visitNode(b!, 'xnode', { method: 'POST', path: '/up', body: upload });
  assert.is(r.status, 200);
  assert.is(r.body.toString(), `POST /up ${upload.length} ${createHash('sha256').update(upload).digest('hex')}`);
  assert.is(r.headers['x-echo-host'], 'xnode.localhost');
  const down = await visitNode(c!, 'xnode', { path: '/down', headers: { 'x-size': String(5 * 1024 * 1024) } });
  assert.is(down.status, 200);
  assert.is(down.body.length, 5 * 1024 * 1024);
  assert.ok(down.body.every((x) => x === 0x61), 'download bytes intact');

  const [nodeA] = await cluster.db.sql<{ id: string }[]>`select id from cluster_nodes where url = ${cluster.nodes[0]!.nodeUrl}`;
  await eventually(async () => (await cluster.db.sql`select 1 from sessions where tunnel_id = 'xnode' and node_id = ${nodeA!.id}`).length === 1, 3_000, 'a session names the node that holds the connection');
  const pings = cluster.nodes.length; // routedEverywhere's
  const expectOut = r.body.length + down.body.length;
  await eventually(
    async () => {
      // The client's connections on two nodes each have a session: the tunnel's counters are their sum.
      const [s] = await cluster.db.sql<{ bytes_in: string; bytes_out: string; requests: string }[]>`
        select sum(bytes_in) as bytes_in, sum(bytes_out) as bytes_out, sum(requests) as requests from sessions where tunnel_id = 'xnode'`;
      if (!s) return false;
      const pingBytes = Number(s.bytes_out) - expectOut;
      return Number(s.bytes_in) === upload.length && Number(s.requests) === pings + 2 && pingBytes === pings * 'GET /ping 0 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'.length;
    },
    5_000,
    'session counters exact',
  );
});

test('SSE streams event by event through another node', async () => {
  await tunnelOnA('xsse');
  await routedEverywhere('xsse');
  const b = cluster.nodes[1]!;
  const first = await withDeadline(
    new Promise<{ at: number; text: string; done: Promise<string> }>((resolve, reject) => {
      const req = http.request({ host: b.address, port: Number(new URL(b.nodeUrl).port), path: '/sse', headers: { host: 'xsse.localhost' }, agent: false, setHost: false });
      req.on('error', reject);
      req.on('response', (res) => {
        let all = '';
        const done = new Promise<string>((r) => res.on('end', () => r(all)));
        res.setEncoding('utf8');
        res.once('data', (d: string) => {
          all += d;
          resolve({ at: Date.now(), text: d, done });
          res.on('data', (more: string) => (all += more));
        });
      });
      req.end();
    }),
    5_000,
    'first event',
  );
  assert.is(first.text, 'data: one\n\n');
  assert.is(await withDeadline(first.done, 5_000, 'stream end'), 'data: one\n\ndata: two\n\n');
});

test('a WebSocket (any upgrade) relays both ways through another node', async () => {
  await tunnelOnA('xws');
  await routedEverywhere('xws');
  const c = cluster.nodes[2]!;
  const sock = net.connect(Number(new URL(c.nodeUrl).port), c.address);
  sock.on('error', () => undefined);
  const payload = randomBytes(256 * 1024);
  let got = Buffer.alloc(0);
  const echoed = new Promise<void>((resolve) => {
    sock.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
      const at = got.indexOf('\r\n\r\n');
      if (at >= 0 && got.length - at - 4 >= payload.length) resolve();
    });
  });
  sock.write('GET /ws HTTP/1.1\r\nHost: xws.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n');
  await eventually(() => got.includes('\r\n\r\n'), 5_000, '101');
  assert.match(got.toString('latin1', 0, 12), /^HTTP\/1\.1 101/);
  sock.write(payload);
  await withDeadline(echoed, 5_000, 'echo');
  const at = got.indexOf('\r\n\r\n') + 4;
  assert.ok(got.subarray(at).equals(payload), 'echo byte-exact');
  sock.destroy();
});

test('a TCP tunnel\'s port answers on every node, byte-exact both ways, with half-close', async () => {
  const echo = await listen(net.createServer({ allowHalfOpen: true }, (s) => s.pipe(s)));
  try {
    const u = await createUser(cluster.db);
    const key = await createKeyFor(cluster.db, u.id);
    const client = new TunnelClient({ server: cluster.nodes[0]!.nodeUrl, token: key, type: 'tcp', local: { host: '127.0.0.1', port: echo.port } });
    clients.push(client);
    const { url } = await withDeadline(client.start(), 10_000, 'tcp client start');
    const port = Number(new URL(url).port);
    for (const node of cluster.nodes) {
      const payload = randomBytes(1024 * 1024 + 3);
      const got = await eventually(
        () =>
          new Promise<Buffer | null>((resolve) => {
            const sock = net.connect({ host: node.address, port, allowHalfOpen: true });
            const parts: Buffer[] = [];
            // An attempt that hears nothing for 5 s fails (and the next one tries), instead of waiting forever.
            const stall = setTimeout(() => (sock.destroy(), resolve(null)), 5_000);
            sock.on('close', () => clearTimeout(stall));
            sock.on('error', () => resolve(null));
            sock.on('data', (d: Buffer) => parts.push(d));
            sock.on('end', () => {
              sock.end();
              resolve(Buffer.concat(parts));
            });
            sock.on('connect', () => sock.end(payload));
          }),
        15_000,
        `port ${port} at ${node.nodeUrl}`,
      );
      assert.ok(got!.equals(payload), `echo through ${node.nodeUrl} byte-exact (${got!.length} of ${payload.length})`);
    }
  } finally {
    await echo.close();
  }
});

test('a link is refused without the cluster\'s token, or with one of two windows ago (a leaked token expires); a node without --node-url has no link endpoint', async () => {
  const a = cluster.nodes[0]!;
  const [row] = await cluster.db.sql<{ secret: Buffer }[]>`select secret from server_secrets where name = 'cluster-link'`;
  const stale = linkToken(Buffer.from(row!.secret), Math.floor(Date.now() / LINK_TOKEN_WINDOW_MS) - 2);
  for (const headers of [{}, { authorization: 'Bearer not-the-token' }, { authorization: `Bearer ${stale}` }] as Record<string, string>[]) {
    const refused = await WsClient.connect(`${a.nodeUrl}/cluster/v1/link`, headers, 1024, 5_000).then(
      (ws) => (ws.destroy(), 101),
      (e: unknown) => (e instanceof WsRefused ? e.status : -1),
    );
    assert.is(refused, 401, JSON.stringify(headers));
  }
  const single = await startServer({ workers: 1 });
  try {
    const status = await WsClient.connect(`${single.url}/cluster/v1/link`, {}, 1024, 5_000).then(
      (ws) => (ws.destroy(), 101),
      (e: unknown) => (e instanceof WsRefused ? e.status : -1),
    );
    assert.is(status, 404);
  } finally {
    await single.stop();
  }
});

test('a node holding the token but sending malformed link messages loses its link; the node it dialled serves on', async () => {
  await tunnelOnA('xlinkabuse');
  await routedEverywhere('xlinkabuse');
  const a = cluster.nodes[0]!;
  const [row] = await cluster.db.sql<{ secret: Buffer }[]>`select secret from server_secrets where name = 'cluster-link'`;
  const token = new LinkTokens(Buffer.from(row!.secret)).current();
  // Envelopes of the right shape with nonsense inside: each is answered or dropped, the link stays.
  const ws = await WsClient.connect(`${a.nodeUrl}/cluster/v1/link`, { authorization: `Bearer ${token}` }, 1 << 20, 5_000);
  const answers: unknown[] = [];
  ws.on('message', (m) => decodeEach(m, (v) => answers.push(v)));
  for (const m of [
    { type: 'x-open', xid: 'one', tunnelId: 7, head: null },
    { type: 'x-open', xid: 2, tunnelId: 'xlinkabuse', head: { kind: 'udp' } },
    { type: 'x-open', xid: 3, tunnelId: 'nobody', head: { kind: 'http', method: 'GET', target: '/', headers: [], upgrade: false, end: true } },
    { type: 'x-data', xid: 99, bytes: 'not bytes' },
    { type: 'x-credit', xid: -5, bytes: -1 },
    { type: 'no-such-type', xid: 1 },
  ]) ws.send(encode({ k: 't', m }));
  // A raw x-data (0xc1, a 6-byte xid, the bytes) for a stream that does not exist: dropped.
  ws.send(Buffer.concat([Buffer.from([0xc1, 0, 0, 0, 0, 0, 99]), Buffer.alloc(9000, 1)]));
  await eventually(() => answers.some((v) => JSON.stringify(v).includes('no-tunnel')), 3_000, 'the unknown tunnel answered no-tunnel');
  assert.not.ok(ws.isClosed, 'well-framed nonsense costs the link nothing');
  // Bytes that are no envelope at all, or a raw message shorter than its head: the link goes.
  for (const garbage of [Buffer.from([0x92, 0x01]) /* an array of two that ends after one */, Buffer.from([0xc1, 0x00])]) {
    const link = garbage[0] === 0x92 ? ws : await WsClient.connect(`${a.nodeUrl}/cluster/v1/link`, { authorization: `Bearer ${token}` }, 1 << 20, 5_000);
    const closed = new Promise<void>((r) => link.once('close', () => r()));
    link.send(garbage);
    await withDeadline(closed, 5_000, `a link sending ${garbage.toString('hex')} is closed`);
  }
  for (const node of cluster.nodes) assert.is((await visitNode(node, 'xlinkabuse', { path: '/ping' })).status, 200, `${node.nodeUrl} serves on`);
});

test('GET /tunnels answers for the whole cluster, through any node', async () => {
  await tunnelOnA('xlist');
  for (const node of cluster.nodes) {
    await eventually(
      async () => {
        const r = await api(node, 'GET', '/tunnels', { key: cluster.adminKey });
        return r.status === 200 && (r.body as { id: string }[]).some((t) => t.id === 'xlist');
      },
      5_000,
      `xlist listed by ${node.nodeUrl}`,
    );
  }
});

test('the same id opened on two nodes at once by 100 clients of 10 users: exactly one user wins', async () => {
  const users = await Promise.all(Array.from({ length: 10 }, () => createUser(cluster.db)));
  const keys = await Promise.all(users.map((u) => createKeyFor(cluster.db, u.id)));
  const outcomes = await Promise.all(
    Array.from({ length: 100 }, async (_, i) => {
      const node = cluster.nodes[i % cluster.nodes.length]!;
      const c = new TunnelClient({ server: node.nodeUrl, token: keys[i % keys.length]!, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'xrace' });
      clients.push(c);
      try {
        await withDeadline(c.start(), 20_000, 'race start');
        return { user: i % keys.length, ok: true as const };
      } catch (err) {
        await c.stop().catch(() => undefined);
        return { user: i % keys.length, ok: false as const, why: (err as Error).message };
      }
    }),
  );
  const winners = new Set(outcomes.filter((o) => o.ok).map((o) => o.user));
  assert.is(winners.size, 1, `winning users: ${[...winners].join(',')}; ${JSON.stringify(outcomes.filter((o) => !o.ok).slice(0, 3))}`);
  for (const o of outcomes) if (!o.ok) assert.match(o.why, /in use by another user|taken over|held for/, o.why);
  const rows = await cluster.db.sql`select user_id from cluster_tunnels where id = 'xrace'`;
  assert.is(rows.length, 1);
  assert.is(rows[0]!.user_id, users[[...winners][0]!]!.id);
});

test.run();
