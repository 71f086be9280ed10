import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { NodePeers, startCluster, type TestCluster } from './cluster.js';
import { api, createKeyFor, createUser, eventually } from '../helpers/fixtures.js';
import { F } from '../../src/protocol/frames.js';
import { refusalIn, type RawPeer } from '../tunnel/raw-peer.js';
import { sleep } from '../tunnel/helpers.js';

// The --id-grace holds in a cluster: each node holds the ids of tunnels that ended on other
// nodes too, under the same bounds (--id-grace-min-lifetime, --id-grace-max-per-user). A user
// opening and closing ids on one node hoards none on another.

const MIN_LIFETIME_S = 2;
let cluster: TestCluster;
const peers = new NodePeers(() => cluster);

test.before(async () => {
  cluster = await startCluster(2, ['--id-grace', '1h', '--id-grace-min-lifetime', String(MIN_LIFETIME_S), '--id-grace-max-per-user', '1']);
});

test.after(async () => {
  peers.end();
  await cluster?.stop();
});

const peer = (node: number, key: string): Promise<RawPeer> => peers.at(node, key);

/** Live (or not) as node `node` sees it. */
async function liveOn(node: number, id: string, live: boolean): Promise<void> {
  await eventually(async () => (await api(cluster.nodes[node]!, 'GET', `/tunnels/${id}`, { key: cluster.adminKey })).status === (live ? 200 : 404), 10_000, `${id} ${live ? 'live' : 'gone'} on node ${node}`);
}

test('ids that ended on another node: a short-lived one is free, and past the cap the oldest hold ends', async () => {
  const keyA = await createKeyFor(cluster.db, (await createUser(cluster.db)).id);
  const keyB = await createKeyFor(cluster.db, (await createUser(cluster.db)).id);
  const a = await peer(0, keyA);
  const ids = ['x-hoard-1', 'x-hoard-2'];
  const owners: RawPeer[] = [];
  for (const id of ids) {
    const p = await peer(0, keyA);
    assert.is((await p.open({ type: 'http', id }))[0], F.Opened, id);
    await liveOn(1, id, true);
    owners.push(p);
  }
  assert.is((await a.open({ type: 'http', id: 'x-brief' }))[0], F.Opened);
  await liveOn(1, 'x-brief', true);
  a.ws.destroy();
  await liveOn(1, 'x-brief', false);
  await sleep(MIN_LIFETIME_S * 1000 + 200);
  for (const [i, id] of ids.entries()) {
    owners[i]!.ws.destroy();
    await liveOn(1, id, false);
  }
  const b = await peer(1, keyB);
  assert.is((await b.open({ type: 'http', id: 'x-brief' }))[0], F.Opened, 'a tunnel that lived a moment leaves no hold');
  assert.is((await b.open({ type: 'http', id: 'x-hoard-1' }))[0], F.Opened, 'the oldest hold ended at the cap');
  const r = await b.open({ type: 'http', id: 'x-hoard-2' });
  assert.is(r[0], F.Refused, 'the newest is still held');
  assert.match(refusalIn(r).message, /held for the user who last used it/);
});

test.run();
