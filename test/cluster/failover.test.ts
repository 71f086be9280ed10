import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCluster, visitNode, type TestCluster } from './cluster.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { keyPrefixOf } from '../../src/auth/key-format.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { postgresBinDir, startPostgres, type RunningPostgres } from '../../src/db/embedded-postgres.js';
import { connect } from '../../src/db/sql.js';
import { createLogger } from '../../src/log.js';
import { FENCE_AFTER_MS, LEASE_MS } from '../../src/cluster/node.js';
import { listen, type Local } from '../tunnel/helpers.js';

// A node's death, a partition between a node and the database, and a restart of PostgreSQL
// itself, as the cluster documents them (README "Cluster"): a dead node is noticed through its
// lease and another node closes its sessions at their last flushed counters; a node that
// cannot renew its lease ends its own tunnels first (so a revocation it cannot hear is bounded);
// a restart shorter than that bound costs the tunnels nothing.

let local: Local;
const clients: TunnelClient[] = [];

test.before(async () => {
  local = await listen(http.createServer((_req, res) => res.end('served')));
});

test.after(async () => {
  for (const c of clients) await c.stop().catch(() => undefined);
  await local?.close();
});

/** A client of one connection (no second one on another node): the tunnel lives and dies with its node. */
async function clientOn(cluster: TestCluster, nodeIndex: number, id: string, key?: string): Promise<{ client: TunnelClient; key: string }> {
  if (!key) {
    const u = await createUser(cluster.db);
    key = await createKeyFor(cluster.db, u.id);
  }
  const client = new TunnelClient({ server: cluster.nodes[nodeIndex]!.nodeUrl, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id, siblings: false });
  clients.push(client);
  await withDeadline(client.start(), 10_000, 'client start');
  return { client, key };
}

test('SIGKILL of a node: within seconds another node closes its sessions at their last counters and its routes disappear', async () => {
  const cluster = await startCluster(2);
  try {
    const [a, b] = cluster.nodes;
    const { client } = await clientOn(cluster, 0, 'k-dead');
    await eventually(async () => (await visitNode(b!, 'k-dead')).status === 200, 3_000, 'served at B');
    for (let i = 0; i < 4; i++) assert.is((await visitNode(b!, 'k-dead')).status, 200);
    // The counters as flushed (every second) before the kill.
    const flushed = await eventually(
      async () => {
        const [s] = await cluster.db.sql<{ requests: string }[]>`select requests from sessions where tunnel_id = 'k-dead'`;
        return s && Number(s.requests) === 5 ? s : null;
      },
      3_000,
      'counters flushed',
    );
    client.removeAllListeners();
    a!.proc.kill('SIGKILL');
    const killedAt = Date.now();
    await eventually(async () => (await cluster.db.sql`select 1 from cluster_nodes where url = ${a!.nodeUrl}`).length === 0, LEASE_MS + 5_000, 'the dead node reaped');
    const [s] = await cluster.db.sql<{ disconnected_at: Date | null; requests: string }[]>`select disconnected_at, requests from sessions where tunnel_id = 'k-dead'`;
    assert.ok(s!.disconnected_at, 'its session closed');
    assert.is(s!.requests, flushed!.requests, 'at its last flushed counters');
    assert.is((await cluster.db.sql`select 1 from cluster_tunnels where id = 'k-dead'`).length, 0);
    await eventually(async () => (await visitNode(b!, 'k-dead')).status === 404, 3_000, 'route gone at B');
    const listed = await api(b!, 'GET', '/tunnels', { key: cluster.adminKey });
    assert.not.ok((listed.body as { id: string }[]).some((t) => t.id === 'k-dead'));
    assert.ok(Date.now() - killedAt < LEASE_MS + 5_000, 'noticed within seconds');
    // The id is free again for its user on another node.
    await client.stop();
  } finally {
    await cluster.stop();
  }
});

test('a node cut from the database ends its own tunnels within the fence bound; a key revoked meanwhile through another node keeps nothing alive', async () => {
  const db = await (await import('../helpers/database.js')).startDatabase();
  const u = new URL(db.url);
  const proxy = await TcpProxy.start({ host: u.hostname, port: Number(u.port) });
  const cluster = await startCluster(2, [], { db, databaseUrls: [proxy.urlFor(db.url)] });
  try {
    const [, b] = cluster.nodes;
    const { client, key } = await clientOn(cluster, 0, 'p-cut');
    // A transient Closed: the client drops the connection and connects again (through the load balancer, to a healthy node).
    const closed = new Promise<{ reason: string }>((resolve) => client.once('reconnecting', resolve));
    await eventually(async () => (await visitNode(b!, 'p-cut')).status === 200, 3_000, 'served at B');
    proxy.freeze();
    const frozenAt = Date.now();
    // Revoked through B while A cannot hear it: the API answers once A's tunnel is gone (A
    // fenced itself, and B reaped A when its lease ran out).
    const [k] = await cluster.db.sql<{ id: string }[]>`select id from api_keys where key_prefix = ${keyPrefixOf(key)!}`;
    const r = await api(b!, 'DELETE', `/keys/${k!.id}`, { key });
    assert.is(r.status, 200, r.text);
    assert.is((await cluster.db.sql`select 1 from cluster_tunnels where id = 'p-cut'`).length, 0);
    // A's own tunnel ended by its fence, before the lease ran out.
    const ended = await withDeadline(closed, FENCE_AFTER_MS + 2_000, 'A fenced its tunnel');
    assert.match(ended.reason, /lost the cluster database/);
    assert.ok(Date.now() - frozenAt <= FENCE_AFTER_MS + 2_000, `fenced within the bound (${Date.now() - frozenAt} ms)`);
    assert.is.not((await visitNode(b!, 'p-cut')).status, 200);
    await proxy.restore();
    // Back: A rejoins and admits tunnels again (of a key that was not revoked).
    const other = await createKeyFor(cluster.db, (await createUser(cluster.db)).id);
    await eventually(async () => (await cluster.db.sql`select 1 from cluster_nodes where url = ${cluster.nodes[0]!.nodeUrl}`).length === 1, 5_000, 'A rejoined');
    await clientOn(cluster, 0, 'p-back', other);
    await eventually(async () => (await visitNode(b!, 'p-back')).status === 200, 3_000, 'A serves again, through B');
  } finally {
    await cluster.stop();
    await proxy.close();
  }
});

test('PostgreSQL restarted under load: visitors through another node keep being served, counters exact', async () => {
  const bin = postgresBinDir();
  assert.ok(bin, 'the embedded PostgreSQL binaries are installed (npm ci)');
  const dir = mkdtempSync(join(tmpdir(), 'burrow-pg-restart-'));
  const log = createLogger('fatal');
  let pg: RunningPostgres = await startPostgres(bin!, dir, log, { maxConnections: 100, ephemeral: true });
  const port = (url: string) => Number(new URL(url).port);
  const proxy = await TcpProxy.start({ host: '127.0.0.1', port: port(pg.url) });
  const url = proxy.urlFor(pg.url);
  const sql = connect(url, { max: 2, applicationName: 'burrow-test' });
  const db = { url, kind: 'embedded' as const, sql, stop: async () => void (await sql.end({ timeout: 1 })) };
  const cluster = await startCluster(2, [], { db });
  try {
    const [, b] = cluster.nodes;
    await clientOn(cluster, 0, 'pg-load');
    await eventually(async () => (await visitNode(b!, 'pg-load')).status === 200, 3_000, 'served at B');
    let ok = 1;
    let failed = 0;
    let stop = false;
    const load = (async () => {
      while (!stop) {
        const r = await visitNode(b!, 'pg-load').catch(() => null);
        if (r?.status === 200 && r.body.toString() === 'served') ok++;
        else failed++;
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    await pg.stop();
    pg = await startPostgres(bin!, dir, log, { maxConnections: 100, ephemeral: true });
    proxy.retarget({ host: '127.0.0.1', port: port(pg.url) });
    await new Promise((r) => setTimeout(r, 1_500));
    stop = true;
    await load;
    assert.ok(ok > 5, `requests served through the restart: ${ok}`);
    assert.is(failed, 0, 'no visitor request failed');
    await eventually(
      async () => {
        const [s] = await sql<{ requests: string }[]>`select requests from sessions where tunnel_id = 'pg-load' and disconnected_at is null`;
        return s && Number(s.requests) === ok;
      },
      5_000,
      `the session counts every request (${ok})`,
    );
  } finally {
    await cluster.stop();
    await proxy.close();
    await pg.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
