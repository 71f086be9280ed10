import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomUUID } from 'node:crypto';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { migrate } from '../../src/db/migrate.js';
import { createUser } from '../../src/db/users.js';
import { createLogger } from '../../src/log.js';
import { ApiError } from '../../src/errors.js';
import { IdHolds } from '../../src/actors/id-holds.js';
import { LocalDirectory } from '../../src/actors/local-directory.js';
import type { Admit, DirectoryHost, Entry, Member } from '../../src/actors/tunnel-directory.js';
import { ClusterDirectory } from '../../src/cluster/directory.js';
import { ClusterNode } from '../../src/cluster/node.js';
import type { TunnelMainToShard } from '../../src/protocol/tunnel-messages.js';

// The two TunnelDirectory implementations in process: LocalDirectory (a node alone) and
// ClusterDirectory (two "nodes" on one real database, their shards played by a recording host).
// What the registry relies on: who holds an id, what the shards are told of it, and that a
// member the database no longer lists (taken over elsewhere, or its node reaped) is ended.

const log = createLogger('error', { test: 'directory' });
let db: TestDatabase;
let alice = '';
let bob = '';

test.before(async () => {
  db = await startDatabase();
  await migrate(db.sql, log);
  for (const name of ['alice', 'bob']) {
    const u = await createUser(db.sql, { email: `${name}@example.test`, name, role: 'member' });
    if (u === 'taken') throw new Error('taken');
    if (name === 'alice') alice = u.id;
    else bob = u.id;
  }
});

test.after(async () => {
  await db?.stop();
});

class RecordingHost implements DirectoryHost {
  readonly ended: Extract<TunnelMainToShard, { type: 'tunnel-close' }>[] = [];
  readonly closed: { id: string; reason: string }[] = [];
  readonly routed: string[] = [];
  readonly nodes: string[][] = [];
  endMember(_m: Member, msg: Extract<TunnelMainToShard, { type: 'tunnel-close' }>): void {
    this.ended.push(msg);
  }
  closeMembers(victims: { id: string; m: Member }[], reason: string): void {
    for (const v of victims) this.closed.push({ id: v.id, reason });
  }
  broadcastRoute(id: string): void {
    this.routed.push(id);
  }
  broadcastNodes(urls: string[]): void {
    this.nodes.push(urls);
  }
}

const LIMITS = { maxTunnelsPerUser: 10, maxTcpPortsPerUser: 10, maxRegistrationsPerMinute: 1_000 };
const holds = () => new IdHolds({ graceMs: 60_000, minLifetimeMs: 0, maxPerUser: 10 });

function member(userId: string, o: Partial<Member> = {}): Member {
  return { sessionId: randomUUID(), shard: 0, keyId: randomUUID(), userId, laneKey: null, client: randomUUID(), registeredAtMs: Date.now(), listens: false, ...o };
}

function entry(id: string, userId: string, o: Partial<Entry['info']> = {}, pool = false): () => Entry {
  return () => ({ info: { id, owner_id: userId, team_id: null, remote_port: null, tunnel_type: 'http', url: `http://${id}.tunnels.test`, local_target: null, ...o }, access: null, pool, registeredAtMs: Date.now(), usedSinceMs: Date.now() - 1_000, members: [] });
}

function admit(userId: string, id: string, more: Partial<Admit> = {}): Admit {
  return { type: 'tunnel-admit', userId, keyId: randomUUID(), tunnelType: 'http', id, teamId: null, remotePort: null, clientIp: null, access: null, claim: null, local: null, pool: false, member: null, ...more };
}

test('LocalDirectory: a member makes the id held; its route names the shard; the last member leaving holds the id for its user', async () => {
  const d = new LocalDirectory(holds());
  assert.is(d.held('web'), null);
  assert.is(await d.claim({ id: 'web', sessionId: randomUUID(), url: '', teamId: null, client: 'c', mode: { plain: true }, admit: admit(alice, 'web') }), null, 'a node alone decides in memory');
  const m = member(alice, { shard: 1, listens: true });
  d.addMember('web', entry('web', alice, { tunnel_type: 'tcp', remote_port: 30_001 }), m);
  assert.equal(d.held('web'), { userId: alice, teamId: null, pool: false, type: 'tcp', access: null });
  assert.ok(d.live('web'));
  const r = d.routeOf('web');
  assert.is(r.shard, 1);
  assert.is(r.port, 30_001);
  assert.is(r.portHeld, true, 'the member bound the port: no shard follows it');
  assert.equal(r.members, [{ session: m.sessionId, client: m.client, shard: 1 }]);
  assert.equal(d.members((_, x) => x.userId === alice).map((v) => v.id), ['web']);
  d.removeMember('web', m.sessionId);
  assert.is(d.live('web'), false);
  assert.is(d.routeOf('web').shard, null);
  assert.is(d.holds.get('web')?.userId, alice, 'held for its user');
  assert.ok(d.usedSince('web', alice) !== null, 'a reconnect keeps counting from the first use');
});

test('ClusterDirectory: a claim on node A is held on node B after a refresh; another user is refused; a release frees the id', async () => {
  const [nodeA, nodeB] = [new ClusterNode(db.sql, log, 'http://127.0.0.2:1', handlersNone()), new ClusterNode(db.sql, log, 'http://127.0.0.3:1', handlersNone())];
  for (const n of [nodeA, nodeB]) await db.sql`insert into cluster_nodes (id, url, lease_until) values (${n.id}, ${n.url}, now() + interval '1 hour')`;
  const [hostA, hostB] = [new RecordingHost(), new RecordingHost()];
  const a = new ClusterDirectory(holds(), nodeA, db.sql, log, hostA, LIMITS);
  const b = new ClusterDirectory(holds(), nodeB, db.sql, log, hostB, LIMITS);
  const sessionId = randomUUID();
  const reg = await a.claim({ id: 'api', sessionId, url: 'http://api.tunnels.test', teamId: null, client: 'cl1', mode: { plain: true }, admit: admit(alice, 'api') });
  assert.equal(reg, { userId: alice, teamId: null, access: null, port: null, url: 'http://api.tunnels.test', pool: false });
  a.addMember('api', entry('api', alice), member(alice, { sessionId, client: 'cl1' }));

  // The live nodes, told to the shards once they change (Welcome names them to clients).
  await b.readNodes();
  await b.readNodes();
  assert.equal(hostB.nodes, [[nodeA.url, nodeB.url]]);
  assert.equal(b.nodeUrls(), [nodeA.url, nodeB.url]);
  await b.refresh('api');
  assert.equal(b.held('api'), { userId: alice, teamId: null, pool: false, type: 'http', access: null });
  assert.equal(b.routeOf('api').members, [{ session: sessionId, client: 'cl1', node: nodeA.url }]);
  assert.ok(hostB.routed.includes('api'), 'B told its shards');
  assert.is(b.countElsewhere((_, user) => user === alice), 1);
  try {
    await b.claim({ id: 'api', sessionId: randomUUID(), url: 'x', teamId: null, client: 'cl2', mode: { plain: true }, admit: admit(bob, 'api') });
    assert.unreachable('another user claimed a live id');
  } catch (e) {
    assert.instance(e, ApiError);
    assert.is((e as ApiError).code, 'conflict');
  }
  // The view through B: A's member, counters as flushed (none yet).
  const [view] = await b.views(['api'], () => ({ bytes_in: 0, bytes_out: 0, requests: 0 }));
  assert.is(view!.connections, 1);

  a.removeMember('api', sessionId);
  await eventuallyGone(a, 'api');
  await b.refresh('api');
  assert.is(b.held('api'), null);
  assert.is(b.routeOf('api').shard, null);
  assert.is(b.holds.get('api')?.userId, alice, 'B holds the id for its user too');
  await db.sql`delete from cluster_nodes`;
});

test('ClusterDirectory: a member whose row is gone is ended by the reconcile (transient); a taken-over one for good; fence ends everything', async () => {
  const node = new ClusterNode(db.sql, log, 'http://127.0.0.2:2', handlersNone());
  await db.sql`insert into cluster_nodes (id, url, lease_until) values (${node.id}, ${node.url}, now() + interval '1 hour')`;
  const host = new RecordingHost();
  const d = new ClusterDirectory(holds(), node, db.sql, log, host, LIMITS);
  const claim = async (id: string, userId: string): Promise<Member> => {
    const m = member(userId);
    await d.claim({ id, sessionId: m.sessionId, url: `http://${id}`, teamId: null, client: m.client, mode: { plain: true }, admit: admit(userId, id) });
    d.addMember(id, entry(id, userId), m);
    return m;
  };
  await claim('gone', alice);
  const kept = await claim('kept', alice);
  await claim('other', bob);
  // Its row deleted behind its back (this node was declared dead, say).
  await db.sql`delete from cluster_tunnels where id = 'gone'`;
  // Taken over through another node: the row names another session now.
  const elsewhere = randomUUID();
  const nodeB = randomUUID();
  await db.sql`insert into cluster_nodes (id, url, lease_until) values (${nodeB}, 'http://127.0.0.3:2', now() + interval '1 hour')`;
  await db.sql`delete from cluster_members where tunnel_id = 'other'`;
  await db.sql`insert into cluster_members (session_id, tunnel_id, node_id, user_id, key_id, client) values (${elsewhere}, 'other', ${nodeB}, ${bob}, ${randomUUID()}, 'x')`;
  await d.reconcile();
  const byId = new Map(host.ended.map((m) => [m.tunnelId, m]));
  assert.is(byId.get('gone')?.code, 'unavailable');
  assert.is(byId.get('gone')?.permanent, false, 'the client connects again');
  assert.is(byId.get('other')?.code, 'taken-over');
  assert.is(byId.get('other')?.permanent, true);
  assert.not.ok(byId.has('kept'));
  assert.ok(d.live('other'), 'still live: on the other node');
  assert.is(d.tunnels.has('other'), false);
  host.ended.length = 0;
  d.fence();
  assert.equal(host.ended.map((m) => [m.tunnelId, m.sessionId, m.code]), [['kept', kept.sessionId, 'unavailable']]);
  assert.is(d.tunnels.size, 0);
  await db.sql`delete from cluster_nodes`;
});

function handlersNone() {
  return { event() {}, reconcile() {}, fenced() {} };
}

async function eventuallyGone(d: ClusterDirectory, id: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const [row] = await db.sql`select 1 from cluster_tunnels where id = ${id}`;
    if (!row) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${id} still in the database (${d.nodeId})`);
}

test.run();
