import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { F, type Frame, type Opened, type Welcome } from '../../src/protocol/frames.js';
import type { DataPlaneCounts, ShardCounts } from '../../src/protocol/tunnel-messages.js';
import { listen, visit, type Local } from './helpers.js';
import { rawPeer, refusalIn, type RawPeer } from './raw-peer.js';

// Lanes on a server of two shards: a client whose tunnel has visitors holds a connection on
// the other shard too, and a visitor is served by the shard it reached (no mesh stream); a lane
// needs the registration's key, the same user and another shard, and ends with its tunnel.

let server: TestServer;
let local: Local;
/** Requests to /hang wait here until released. */
const hung: http.ServerResponse[] = [];
const clients: TunnelClient[] = [];
const peers: RawPeer[] = [];

test.before(async () => {
  server = await startServer();
  local = await listen(
    http.createServer((req, res) => {
      if (req.url === '/hang') return void hung.push(res);
      res.end(`local ${req.url}`);
    }),
  );
});

test.after(async () => {
  for (const r of hung.splice(0)) r.end();
  await Promise.all(clients.map((c) => c.stop()));
  for (const p of peers) p.ws.destroy();
  await local?.close();
  await server?.stop();
});

async function shardCounts(): Promise<ShardCounts[]> {
  const r = await api(server, 'GET', '/readyz?detail=1', { key: server.adminKey });
  assert.is(r.status, 200, r.text);
  return (r.body as DataPlaneCounts).shards;
}

const sum = (list: ShardCounts[], k: keyof ShardCounts): number => list.reduce((n, s) => n + (s[k] as number), 0);

function client(id: string): TunnelClient {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, id });
  clients.push(c);
  return c;
}

/** A raw peer whose connection landed on a shard `want` accepts (the kernel picks: retried). */
async function peerOn(key: string, want: (shard: number) => boolean): Promise<{ peer: RawPeer; shard: number }> {
  for (let i = 0; i < 40; i++) {
    const peer = await rawPeer(server.url, key);
    const shard = (peer.frames.find((f) => f[0] === F.Welcome)![1] as Welcome).shard!;
    if (want(shard)) {
      peers.push(peer);
      return { peer, shard };
    }
    peer.ws.destroy();
  }
  throw new Error('no connection landed on the wanted shard in 40 tries');
}

test('an idle tunnel holds one connection; once visited, a lane on the other shard serves the visitors there', async () => {
  const c = client('lanes-busy');
  const { url } = await withDeadline(c.start(), 10_000, 'start');
  const host = new URL(url).hostname;
  let now = await shardCounts();
  assert.is(sum(now, 'control_connections'), 1, 'no lane before a visitor');
  assert.is(sum(now, 'lanes'), 0);

  assert.is((await visit(server.port, host, { path: '/first' })).status, 200);
  now = (await eventually(async () => {
    const s = await shardCounts();
    return sum(s, 'lanes') === 1 ? s : null;
  }, 10_000, 'a lane on the other shard'))!;
  assert.ok(now.every((s) => s.control_connections === 1), JSON.stringify(now));
  assert.ok(now.every((s) => s.tunnels === 1), 'the owner on one shard, the lane on the other');

  // Fresh connections until visitors wait on both shards: none crosses the mesh.
  const waiting: Promise<{ status: number }>[] = [];
  let during: ShardCounts[] = [];
  for (let i = 0; i < 40; i++) {
    waiting.push(visit(server.port, host, { path: '/hang' }, 20_000));
    const n = waiting.length;
    await eventually(() => hung.length === n, 5_000, `request ${n} at the local service`);
    during = await shardCounts();
    if (during.every((s) => s.streams > 0)) break;
  }
  assert.ok(during.every((s) => s.streams > 0), `visitors on both shards: ${JSON.stringify(during)}`);
  assert.is(sum(during, 'mesh_streams'), 0, 'every visitor served by its own shard');
  for (const r of hung.splice(0)) r.end('done');
  for (const r of await Promise.all(waiting)) assert.is(r.status, 200);

  // Both connections' requests count in the one session.
  const total = waiting.length + 1;
  await eventually(async () => {
    const r = await api(server, 'GET', '/tunnels/lanes-busy', { key: server.adminKey });
    return (r.body as { stats: { requests: number } }).stats.requests === total;
  }, 5_000, `the session counts ${total} requests`);
  await c.stop();
  await eventually(async () => sum(await shardCounts(), 'control_connections') === 0, 5_000, 'the client and its lane gone');
});

test('a lane needs the registration key, the same user and another shard', async () => {
  const { peer: owner, shard: ownerShard } = await peerOn(server.adminKey, () => true);
  const opened = await owner.open({ type: 'http', id: 'lanes-keyed' });
  assert.is(opened[0], F.Opened, JSON.stringify(opened));
  const laneKey = (opened[2] as Opened).laneKey!;
  assert.type(laneKey, 'string');
  assert.ok(laneKey.length >= 24, 'a key of at least 18 random bytes');

  const { peer: other } = await peerOn(server.adminKey, (s) => s !== ownerShard);
  const wrong = await other.open({ type: 'http', id: 'lanes-keyed', lane: laneKey.slice(1) + (laneKey[0] === 'A' ? 'B' : 'A') });
  assert.is(refusalIn(wrong).code, 'forbidden');
  const missing = await other.open({ type: 'http', id: 'lanes-nobody', lane: laneKey });
  assert.is(refusalIn(missing).code, 'not-found');

  // Another user with the right key learns nothing: the same answer as a missing tunnel.
  const mallory = await createUser(server);
  const malloryKey = await createKeyFor(server, mallory.id, { scopes: ['tunnels'] });
  const { peer: thief } = await peerOn(malloryKey, (s) => s !== ownerShard);
  const stolen = await thief.open({ type: 'http', id: 'lanes-keyed', lane: laneKey });
  assert.is(refusalIn(stolen).code, 'not-found');
  assert.is(refusalIn(stolen).message, refusalIn(await thief.open({ type: 'http', id: 'lanes-nobody', lane: laneKey })).message.replace('lanes-nobody', 'lanes-keyed'));

  // On the tunnel's own shard a lane would carry nothing.
  const { peer: same } = await peerOn(server.adminKey, (s) => s === ownerShard);
  assert.is(refusalIn(await same.open({ type: 'http', id: 'lanes-keyed', lane: laneKey })).code, 'conflict');

  const joined = await other.open({ type: 'http', id: 'lanes-keyed', lane: laneKey });
  assert.is(joined[0], F.Opened, JSON.stringify(joined));
  assert.is(sum(await shardCounts(), 'lanes'), 1);
  const { peer: second } = await peerOn(server.adminKey, (s) => s !== ownerShard);
  assert.is(refusalIn(await second.open({ type: 'http', id: 'lanes-keyed', lane: laneKey })).code, 'conflict', 'one lane per shard');

  // The tunnel ends: so does its lane.
  owner.send([F.Close, 'lanes-keyed']);
  await other.waitFor((f: Frame) => f[0] === F.Closed && f[1] === 'lanes-keyed', 5_000, 'Closed on the lane');
  await eventually(async () => sum(await shardCounts(), 'lanes') === 0, 5_000, 'no lane left');
  for (const p of peers.splice(0)) p.ws.destroy();
  await eventually(async () => sum(await shardCounts(), 'control_connections') === 0, 5_000, 'the peers gone');
});

test('a malformed lane Open closes the connection', async () => {
  for (const open of [
    { type: 'tcp', id: 'lanes-tcp', lane: 'k'.repeat(24) },
    { type: 'http', lane: 'k'.repeat(24) },
    { type: 'http', id: 'lanes-x', lane: 7 },
  ]) {
    const { peer } = await peerOn(server.adminKey, () => true);
    peer.send([F.Open, 1, open] as unknown as Frame);
    const fatal = await peer.waitFor((f) => f[0] === F.Fatal, 5_000, 'Fatal');
    assert.match(refusalIn(fatal).message, 'open.lane', JSON.stringify(open));
    await withDeadline(peer.closed, 5_000, 'closed');
  }
});

test('a takeover ends the old lanes; the new registration gets its own', async () => {
  const first = client('lanes-moved');
  const host = new URL((await withDeadline(first.start(), 10_000, 'first start')).url).hostname;
  assert.is((await visit(server.port, host)).status, 200);
  await eventually(async () => sum(await shardCounts(), 'lanes') === 1, 10_000, 'the first lane');

  const closed = new Promise<{ code: string }>((r) => first.once('closed', r));
  const second = client('lanes-moved');
  await withDeadline(second.start(), 10_000, 'second start');
  assert.is((await withDeadline(closed, 5_000, 'first client closed')).code, 'taken-over');
  await eventually(async () => sum(await shardCounts(), 'control_connections') === 1, 5_000, 'the old connections gone');
  assert.is(sum(await shardCounts(), 'lanes'), 0);

  assert.is((await visit(server.port, host)).status, 200);
  await eventually(async () => {
    const s = await shardCounts();
    return sum(s, 'lanes') === 1 && sum(s, 'control_connections') === 2;
  }, 10_000, 'a lane for the new registration');
  for (let i = 0; i < 8; i++) assert.is((await visit(server.port, host, { path: `/after${i}` })).status, 200);
});

test.run();
