import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { NodePeers, startCluster, type TestCluster } from './cluster.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { lanePorts } from '../helpers/ports.js';
import { F } from '../../src/protocol/frames.js';
import { refusalIn, type RawPeer } from '../tunnel/raw-peer.js';

// Per-user limits hold over the whole cluster, not per node: --max-registrations-per-minute and
// --max-tcp-ports-per-user (as --max-tunnels-per-user always did) are counted by the claim, in
// the database, whichever node the Opens arrive at.

const TCP = lanePorts(10);
let cluster: TestCluster;
const peers = new NodePeers(() => cluster);

test.before(async () => {
  cluster = await startCluster(2, ['--max-registrations-per-minute', '3', '--max-tcp-ports-per-user', '1', '--tcp-port-range', `${TCP.min}-${TCP.max}`]);
});

test.after(async () => {
  peers.end();
  await cluster?.stop();
});

const peer = (node: number, key: string): Promise<RawPeer> => peers.at(node, key);

test('registrations a minute: two on node A and one on node B spend the three; the fourth, on B, is refused (transient, with when to retry)', async () => {
  const key = await createKeyFor(cluster.db, (await createUser(cluster.db)).id);
  const [a, b] = [await peer(0, key), await peer(1, key)];
  for (const [p, id] of [[a, 'rl-1'], [a, 'rl-2'], [b, 'rl-3']] as const) assert.is((await p.open({ type: 'http', id }))[0], F.Opened, id);
  const refused = await b.open({ type: 'http', id: 'rl-4' });
  assert.is(refused[0], F.Refused);
  const r = refusalIn(refused);
  assert.match(r.message, /^rate-limited: at most 3 tunnel registrations per user per minute/);
  assert.is(r.permanent, false);
  assert.ok((r.retryAfterMs ?? 0) > 0, 'says when to try again');
});

test('TCP ports: one held on node A, a second asked of node B is refused', async () => {
  const key = await createKeyFor(cluster.db, (await createUser(cluster.db)).id);
  const [a, b] = [await peer(0, key), await peer(1, key)];
  assert.is((await a.open({ type: 'tcp', id: 'tp-1' }))[0], F.Opened);
  const refused = await b.open({ type: 'tcp', id: 'tp-2' });
  assert.is(refused[0], F.Refused);
  assert.match(refusalIn(refused).message, /at most 1 TCP ports per user \(max-tcp-ports-per-user\)/);
  // Still one: the node that refused bound nothing that stays.
  assert.is((await cluster.db.sql`select 1 from cluster_tunnels where tunnel_type = 'tcp'`).length, 1);
});

test.run();
