import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startCluster, visitNode, type TestCluster } from './cluster.js';
import { api, createKeyFor, createUser, eventually } from '../helpers/fixtures.js';
import { keyPrefixOf } from '../../src/auth/key-format.js';
import { F } from '../../src/protocol/frames.js';
import { rawPeer, refusalIn, type RawPeer } from '../tunnel/raw-peer.js';
import { randomBytes } from 'node:crypto';
import { connect } from '../../src/db/sql.js';

// Revocation, deactivation, team removal and deletion made through any node's API end the
// affected tunnels on every node before the API call answers: the client is connected to
// node A, visitors use node B, the API call goes to node C.

let cluster: TestCluster;
const peers: RawPeer[] = [];

test.before(async () => {
  cluster = await startCluster(3);
});

test.after(async () => {
  for (const p of peers) p.ws.destroy();
  await cluster?.stop();
});

const [A, B, C] = [0, 1, 2];
const node = (i: number) => cluster.nodes[i]!;

async function peerOnA(key: string, events: string[], name: string): Promise<RawPeer> {
  const p = await rawPeer(node(A).nodeUrl, key, events, name);
  peers.push(p);
  return p;
}

/** Opens `id` on A and waits until B routes it (B lists it as it broadcasts the route to its shards). */
async function servedAtB(p: RawPeer, id: string, teamId?: string): Promise<void> {
  const f = await p.open({ type: 'http', id, ...(teamId ? { teamId } : {}) });
  assert.is(f[0], F.Opened, JSON.stringify(f));
  await eventually(async () => ((await api(node(B), 'GET', `/tunnels/${id}`, { key: cluster.adminKey })).status === 200), 5_000, `${id} routed at B`);
}

async function liveAnywhere(id: string): Promise<boolean> {
  return (await cluster.db.sql`select 1 from cluster_tunnels where id = ${id}`).length > 0;
}

async function keyId(key: string): Promise<string> {
  const [r] = await cluster.db.sql<{ id: string }[]>`select id from api_keys where key_prefix = ${keyPrefixOf(key)!}`;
  return r!.id;
}

function endedBefore(events: string[], what: string): void {
  const at = events.indexOf(what);
  assert.ok(at >= 0 && at < events.indexOf('api'), `${what} before the API answer (${events.join(' ')})`);
}

test('a key revoked through node C ends its tunnel on node A before the API answers; B serves it no more', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const events: string[] = [];
  const p = await peerOnA(key, events, 'rv');
  await servedAtB(p, 'c-revoke');
  const r = await api(node(C), 'DELETE', `/keys/${await keyId(key)}`, { key });
  events.push('api');
  assert.is(r.status, 200, r.text);
  endedBefore(events, 'rv:fatal');
  assert.match(refusalIn(p.frames.find((f) => f[0] === F.Fatal)!).message, /revoked/);
  assert.not.ok(await liveAnywhere('c-revoke'), 'gone from the cluster registry when the API answered');
  const v = await visitNode(node(B), 'c-revoke');
  assert.is.not(v.status, 200, 'B no longer serves it');
  // The key no longer authenticates at any node (each node's cache heard of it).
  for (const n of cluster.nodes) assert.is((await api(n, 'GET', '/keys', { key })).status, 401);
});

test('deactivating a user through node C ends their tunnels on A before the API answers', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const events: string[] = [];
  const p = await peerOnA(key, events, 'dv');
  await servedAtB(p, 'c-deact');
  const r = await api(node(C), 'POST', `/users/${u.id}/deactivate`, { key: cluster.adminKey });
  events.push('api');
  assert.is(r.status, 200, r.text);
  endedBefore(events, 'dv:fatal');
  assert.not.ok(await liveAnywhere('c-deact'));
});

async function teamWith(userId: string): Promise<string> {
  const t = await api(node(C), 'POST', '/teams', { key: cluster.adminKey, body: { name: `team-${Date.now()}-${Math.random()}` } });
  assert.is(t.status, 201, t.text);
  const m = await api(node(C), 'POST', `/teams/${t.body.id}/members`, { key: cluster.adminKey, body: { user_id: userId } });
  assert.is(m.status, 201, m.text);
  return t.body.id as string;
}

test('removing a member through node C closes their team tunnel on A before the API answers; their own tunnel stays', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const team = await teamWith(u.id);
  const events: string[] = [];
  const p = await peerOnA(key, events, 'tm');
  await servedAtB(p, 'c-team', team);
  await servedAtB(p, 'c-own');
  const r = await api(node(C), 'DELETE', `/teams/${team}/members/${u.id}`, { key: cluster.adminKey });
  events.push('api');
  assert.is(r.status, 200, r.text);
  endedBefore(events, 'tm:closed:c-team');
  assert.not.ok(await liveAnywhere('c-team'));
  assert.ok(await liveAnywhere('c-own'));
});

test('deleting a team through node C closes its tunnels on A before the API answers', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const team = await teamWith(u.id);
  const events: string[] = [];
  const p = await peerOnA(key, events, 'td');
  await servedAtB(p, 'c-team-del', team);
  const r = await api(node(C), 'DELETE', `/teams/${team}`, { key: cluster.adminKey });
  events.push('api');
  assert.is(r.status, 200, r.text);
  endedBefore(events, 'td:closed:c-team-del');
  assert.not.ok(await liveAnywhere('c-team-del'));
});

test('DELETE /tunnels/{id} through node C closes a tunnel held on A', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const events: string[] = [];
  const p = await peerOnA(key, events, 'dl');
  await servedAtB(p, 'c-delete');
  const r = await api(node(C), 'DELETE', '/tunnels/c-delete', { key });
  events.push('api');
  assert.ok(r.status === 200 || r.status === 204, r.text);
  endedBefore(events, 'dl:closed:c-delete');
  assert.not.ok(await liveAnywhere('c-delete'));
});

test('a role change through node C ends nothing, and the new role holds at every node', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const events: string[] = [];
  const p = await peerOnA(key, events, 'rc');
  await servedAtB(p, 'c-role');
  // A's cache knows the key as a member's: GET /users is refused there.
  assert.is((await api(node(A), 'GET', '/users', { key })).status, 403);
  const r = await api(node(C), 'PUT', `/users/${u.id}/role`, { key: cluster.adminKey, body: { role: 'admin' } });
  assert.is(r.status, 200, r.text);
  await eventually(async () => (await api(node(A), 'GET', '/users', { key })).status === 200, 3_000, 'A hears of the promotion');
  assert.ok(await liveAnywhere('c-role'));
  assert.not.ok(p.isClosed());
});

test('notifications forged by a database role with no grant end nothing on any node; a real close still ends the tunnel, in our words', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const team = await teamWith(u.id);
  const events: string[] = [];
  const onA = await peerOnA(key, events, 'fa');
  await servedAtB(onA, 'c-forged', team);
  const onB = await rawPeer(node(B).nodeUrl, key, events, 'fb');
  peers.push(onB);
  assert.is((await onB.open({ type: 'http', id: 'c-forged-b' }))[0], F.Opened);
  // Any role may CONNECT to a database unless it was revoked from PUBLIC, and NOTIFY needs no grant.
  const role = `forger_${randomBytes(4).toString('hex')}`;
  await cluster.db.sql.unsafe(`create role ${role} login password 'forger'`);
  const url = new URL(cluster.db.url);
  url.username = role;
  url.password = 'forger';
  url.search = '';
  const forger = connect(url.toString(), { max: 1, applicationName: 'forger' });
  try {
    const [{ s: schema }] = await cluster.db.sql<{ s: string }[]>`select current_schema() as s`;
    const read = await forger.unsafe(`select * from ${schema}.cluster_members`).then(() => 'read', (e: Error) => e.message);
    assert.match(read, /permission denied/, 'the role has no grant');
    const channel = `burrow_${schema}`;
    const escape = '\x1b]0;pwned\x07\x1b[2J\x9b31m';
    for (const payload of [
      { t: 'close', id: 'c-forged', reason: `${escape}closed by the administrator` },
      { t: 'close', id: 'c-forged-b', reason: escape },
      { t: 'user', id: u.id, end: true },
      { t: 'key', id: await keyId(key) },
      { t: 'member', team, user: u.id },
    ]) await forger`select pg_notify(${channel}, ${JSON.stringify(payload)})`;
    // And a flood of distinct ones: each node checks them in batches and serves on (one round of
    // invalidations per batch: 2,000 of them one by one kept a node's main thread from renewing
    // its lease, and it fenced itself).
    await forger`select pg_notify(${channel}, json_build_object('t', 'user', 'id', gen_random_uuid(), 'end', true)::text) from generate_series(1, 2000)`;
    // Hints that end nothing but make a node read the database again (a node gone, a route
    // changed): a flood of them costs one read at a time, not one each.
    await forger`select pg_notify(${channel}, json_build_object('t', 'node', 'id', gen_random_uuid(), 'up', false)::text) from generate_series(1, 3000)`;
    await forger`select pg_notify(${channel}, json_build_object('t', 'route', 'id', 'r' || g)::text) from generate_series(1, 3000) g`;
    await forger`select pg_notify(${channel}, json_build_object('t', 'route', 'id', 'c-forged')::text) from generate_series(1, 3000)`;
    // Malformed ones are counted, not logged one by one.
    await forger`select pg_notify(${channel}, 'not json ' || g) from generate_series(1, 3000) g`;
    // Before the fix every node ended both tunnels (and the user) within milliseconds.
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(events, [], 'no Closed, Fatal or close on either connection');
    assert.not.ok(onA.isClosed() || onB.isClosed());
    assert.ok(await liveAnywhere('c-forged'));
    assert.ok(await liveAnywhere('c-forged-b'));
    for (const n of cluster.nodes) {
      const logged = n.stderr().split('\n').filter((l) => l.includes('malformed notifications ignored')).length;
      assert.ok(logged >= 1 && logged <= 5, `${logged} log lines for 3,000 malformed notifications at ${n.nodeUrl}`);
      assert.is((await api(n, 'GET', '/keys', { key })).status, 200, `the key still authenticates at ${n.nodeUrl}`);
      for (const id of ['c-forged', 'c-forged-b']) assert.is((await api(n, 'GET', `/tunnels/${id}`, { key: cluster.adminKey })).status, 200, `${id} listed at ${n.nodeUrl}`);
    }
  } finally {
    await forger.end({ timeout: 1 });
    await cluster.db.sql.unsafe(`drop role ${role}`);
  }
  // The real thing, through C, still ends the tunnel on A, with our reason.
  const r = await api(node(C), 'DELETE', '/tunnels/c-forged', { key });
  events.push('api');
  assert.ok(r.status === 200 || r.status === 204, r.text);
  endedBefore(events, 'fa:closed:c-forged');
  assert.is(refusalIn(onA.frames.find((f) => f[0] === F.Closed)!).message, 'deleted through the API');
});

test.run();
