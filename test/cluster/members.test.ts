import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startCluster, visitNode, type TestCluster } from './cluster.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, type Local } from '../tunnel/helpers.js';

// A client keeps connections on two nodes (it learns them from Welcome): the SIGKILL of the
// node holding its first connection costs no visitor request once the second is up. A pool's
// members may be on different nodes: visitors of any node are spread over all of them.

let cluster: TestCluster;
const clients: TunnelClient[] = [];
const locals: Local[] = [];

test.before(async () => {
  cluster = await startCluster(3);
});

test.after(async () => {
  for (const c of clients) await c.stop().catch(() => undefined);
  for (const l of locals) await l.close().catch(() => undefined);
  await cluster?.stop();
});

async function named(name: string, delayMs = 0): Promise<Local> {
  const l = await listen(http.createServer((_req, res) => setTimeout(() => res.end(name), delayMs)));
  locals.push(l);
  return l;
}

async function connections(id: string): Promise<{ node: string }[]> {
  return cluster.db.sql<{ node: string }[]>`
    select n.url as node from cluster_members m join cluster_nodes n on n.id = m.node_id where m.tunnel_id = ${id}`;
}

test('a pool of 3 clients on 3 nodes: a visitor at any node may reach any member; one leaving cuts nothing', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const members: TunnelClient[] = [];
  for (let i = 0; i < 3; i++) {
    const local = await named(`m${i}`, 10);
    const c = new TunnelClient({ server: cluster.nodes[i]!.nodeUrl, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'x-pool', pool: true });
    clients.push(c);
    members.push(c);
    await withDeadline(c.start(), 10_000, `member ${i}`);
  }
  // Every member's client also joins on a second node: 6 connections, 2 per client.
  await eventually(async () => (await connections('x-pool')).length === 6, 5_000, 'each member on two nodes');
  const seenAt = new Map<string, Set<string>>();
  for (const node of cluster.nodes) {
    const seen = new Set<string>();
    for (let round = 0; round < 6; round++) {
      const replies = await Promise.all(Array.from({ length: 6 }, () => visitNode(node, 'x-pool')));
      for (const r of replies) {
        assert.is(r.status, 200);
        seen.add(r.body.toString());
      }
    }
    seenAt.set(node.nodeUrl, seen);
  }
  for (const [url, seen] of seenAt) assert.equal([...seen].sort(), ['m0', 'm1', 'm2'], `visitors at ${url} reached every member`);

  let ok = 0;
  const failed: string[] = [];
  let stop = false;
  const load = Promise.all(
    cluster.nodes.map(async (node) => {
      while (!stop) {
        const r = await visitNode(node, 'x-pool').catch((e: Error) => ({ status: 0, body: Buffer.from(e.message) }));
        if (r.status === 200) ok++;
        else failed.push(`${node.nodeUrl}: ${r.status} ${r.body.toString().slice(0, 150)}`);
      }
    }),
  );
  await eventually(() => ok > 30, 5_000, 'load');
  await members[1]!.stop();
  const after = ok;
  await eventually(() => ok > after + 30, 5_000, 'served on after one member left');
  stop = true;
  await load;
  assert.is(failed.length, 0, `no request failed (${ok} served): ${failed.join('\n')}`);
  const listed = await api(cluster.nodes[2]!, 'GET', '/tunnels/x-pool', { key });
  assert.is(listed.body.pool, true);
  assert.is(listed.body.connections, 4);
});

test('a pool on node A refuses, at nodes B and C, a client asking for other credentials or none; the same ones join', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const start = async (node: number, basicAuth: string[] | undefined): Promise<string | null> => {
    const c = new TunnelClient({ server: cluster.nodes[node]!.nodeUrl, token: key, type: 'http', local: { host: '127.0.0.1', port: (await named(`n${node}`)).port }, id: 'x-pool-rules', pool: true, siblings: false, ...(basicAuth ? { access: { basicAuth } } : {}) });
    clients.push(c);
    return withDeadline(c.start(), 10_000, `member at ${node}`).then(
      () => null,
      (e: Error) => e.message,
    );
  };
  assert.is(await start(0, ['ops:one']), null);
  await eventually(async () => (await connections('x-pool-rules')).length === 1, 5_000, 'the pool registered');
  assert.match((await start(1, undefined)) ?? '', /basic auth differs \(the pool has basic auth\)/);
  assert.match((await start(2, ['ops:two'])) ?? '', /basic auth differs/);
  // The credentials' tag is keyed by a secret every node reads from the database: equal at every node.
  assert.is(await start(1, ['ops:one']), null);
  assert.is((await connections('x-pool-rules')).length, 2);
  const unauthenticated = await visitNode(cluster.nodes[2]!, 'x-pool-rules');
  assert.is(unauthenticated.status, 401, 'a visitor without the password reaches no member');
});

test('SIGKILL of the node holding a client\'s first connection: its second connection serves on, no request fails', async () => {
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  const local = await named('served');
  const [a, b, c] = cluster.nodes;
  const client = new TunnelClient({ server: a!.nodeUrl, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'x-kill' });
  clients.push(client);
  await withDeadline(client.start(), 10_000, 'client start');
  // The second connection is up when the registration has two members on two nodes.
  await eventually(async () => new Set((await connections('x-kill')).map((r) => r.node)).size === 2, 5_000, 'second connection up');
  const survivors = [b!, c!];
  for (const n of survivors) await eventually(async () => (await visitNode(n, 'x-kill')).status === 200, 3_000, `served at ${n.nodeUrl}`);
  let ok = 0;
  const failures: string[] = [];
  let stop = false;
  const load = Promise.all(
    survivors.map(async (node) => {
      while (!stop) {
        const r = await visitNode(node, 'x-kill').catch((e: Error) => ({ status: 0, body: Buffer.from(e.message) }));
        if (r.status === 200) ok++;
        else failures.push(`${node.nodeUrl}: ${r.status} ${r.body.toString().slice(0, 120)}`);
      }
    }),
  );
  await eventually(() => ok > 20, 5_000, 'load');
  const before = ok;
  const [nodeA] = await cluster.db.sql<{ id: string }[]>`select id from cluster_nodes where url = ${a!.nodeUrl}`;
  a!.proc.kill('SIGKILL');
  // A's lease runs out, B or C reaps it; meanwhile and after, the second connection serves.
  await eventually(async () => (await cluster.db.sql`select 1 from cluster_nodes where url = ${a!.nodeUrl}`).length === 0, 10_000, 'A reaped');
  await eventually(() => ok > before + 50, 5_000, 'served after the kill');
  // The client comes back on two nodes (its first connection through another node it knows).
  await eventually(async () => new Set((await connections('x-kill')).map((r) => r.node)).size === 2, 10_000, 'two connections again');
  stop = true;
  await load;
  // Requests in flight through A when it died are asked again of the second connection.
  assert.is(failures.length, 0, failures.join('\n'));
  // The session of the dead node's connection was written when it was admitted: the reaper closed it.
  const rows = await cluster.db.sql<{ disconnected_at: Date | null }[]>`select disconnected_at from sessions where tunnel_id = 'x-kill' and node_id = ${nodeA!.id}`;
  assert.is(rows.length, 1);
  assert.ok(rows[0]!.disconnected_at, 'the dead node\'s session is closed');
});

test.run();
