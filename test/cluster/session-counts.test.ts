import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startCluster, startNode, visitNode, type TestCluster } from './cluster.js';
import { createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { LEASE_MS } from '../../src/cluster/node.js';
import { listen, type Local } from '../tunnel/helpers.js';

// The sessions table has several writers in a cluster (src/actors/stats.ts says which): the claim
// writes a session's row, the StatsActor of its node its counters, and a live node the end of a
// dead node's sessions (the reaper, or the dead node's successor at its address). Whatever
// happens, each session counts exactly the requests it served: through a claim, a SIGKILL and
// its reap, and the node's restart at the same address.

let cluster: TestCluster;
let local: Local;
const clients: TunnelClient[] = [];

test.before(async () => {
  cluster = await startCluster(2);
  local = await listen(http.createServer((_req, res) => res.end('ok')));
});

test.after(async () => {
  for (const c of clients) await c.stop().catch(() => undefined);
  await local?.close();
  await cluster?.stop();
});

interface Row {
  id: string;
  requests: string;
  disconnected_at: Date | null;
}

const rows = () => cluster.db.sql<Row[]>`select id, requests::text, disconnected_at from sessions where tunnel_id = 'sc-count' order by connected_at`;

async function served(n: number, label: string): Promise<void> {
  for (let i = 0; i < n; i++) assert.is((await visitNode(cluster.nodes[1]!, 'sc-count')).status, 200, `${label} ${i}`);
}

test('a session counts exactly its requests through its claim, its node\'s SIGKILL and reap, and the node\'s restart', async () => {
  const key = await createKeyFor(cluster.db, (await createUser(cluster.db)).id);
  const [a, b] = cluster.nodes;
  const client = new TunnelClient({ server: a!.nodeUrl, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'sc-count', siblings: false });
  clients.push(client);
  await withDeadline(client.start(), 10_000, 'client start');
  // The claim wrote the row before any flush.
  const [claimed] = await rows();
  assert.ok(claimed, 'the claim wrote the session row');
  assert.is(claimed!.requests, '0');
  await eventually(async () => (await visitNode(b!, 'sc-count')).status === 200, 3_000, 'routed at B');
  await served(6, 'before the kill');
  await eventually(async () => (await rows())[0]?.requests === '7', 3_000, 'seven requests flushed');

  a!.proc.kill('SIGKILL');
  await eventually(async () => (await cluster.db.sql`select 1 from cluster_nodes where url = ${a!.nodeUrl}`).length === 0, LEASE_MS + 5_000, 'A reaped');
  const [dead] = await rows();
  assert.equal([dead!.requests, dead!.disconnected_at instanceof Date], ['7', true], 'closed by the reaper at its last flushed counters');

  // A again, at its address: the client comes back to it, in a session of its own.
  cluster.nodes[0] = await startNode(cluster.db, cluster.dataDir, 0, Number(new URL(a!.nodeUrl).port));
  await eventually(async () => (await rows()).length === 2 && (await visitNode(b!, 'sc-count')).status === 200, 15_000, 'the client back on A');
  await served(4, 'after the restart');
  await eventually(async () => (await rows())[1]?.requests === '5', 3_000, 'five requests flushed in the new session');
  const [old, now] = await rows();
  assert.is(old!.id, dead!.id);
  assert.equal([old!.requests, old!.disconnected_at?.getTime()], ['7', dead!.disconnected_at!.getTime()], 'the old session is left as the reaper closed it');
  assert.is(now!.disconnected_at, null);

  // A stopped cleanly: its sessions end with their final counters, none lost.
  await served(2, 'before the stop');
  await client.stop();
  await cluster.nodes[0]!.stop({ keepDatabase: true });
  const [, last] = await rows();
  assert.equal([last!.requests, last!.disconnected_at instanceof Date], ['7', true]);
});

test.run();
