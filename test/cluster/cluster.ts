import http from 'node:http';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, type TestServer } from '../helpers/server.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { withDeadline } from '../helpers/deadline.js';
import { rawPeer, type RawPeer } from '../tunnel/raw-peer.js';

// A cluster of real burrowd processes on one machine: node i listens on 127.0.0.(i+2) (every
// 127/8 address is loopback on Linux), all on one database of their own (the suite's
// PostgreSQL, or the embedded cluster's: both are a real PostgreSQL server reached by URL).

export interface ClusterNodeProc extends TestServer {
  /** its --node-url (also where visitors and clients reach it in the tests) */
  nodeUrl: string;
  address: string;
}

export interface TestCluster {
  nodes: ClusterNodeProc[];
  db: TestDatabase;
  /** the nodes' shared data dir (a node started again takes it: startNode) */
  dataDir: string;
  adminKey: string;
  stop(): Promise<void>;
}

/** A port free on `address` now (it is given to burrowd, which binds it a moment later). */
export function freePortOn(address: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, address, () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** Starts node `i` of a cluster (again, after a kill: same address and port). `databaseUrl`: the
 *  node's own way to the database (a proxy the test controls), else the database's. */
export async function startNode(db: TestDatabase, dataDir: string, i: number, port?: number, extra: string[] = [], databaseUrl?: string, workers = 1): Promise<ClusterNodeProc> {
  const address = `127.0.0.${i + 2}`;
  const p = port ?? (await freePortOn(address));
  const nodeUrl = `http://${address}:${p}`;
  // One data dir for all: the first node makes the seed key, the others read the same one.
  const s = await startServer({ db: databaseUrl ? { ...db, url: databaseUrl } : db, dataDir, workers, args: ['--host', address, '--port', String(p), '--node-url', nodeUrl, '--base-url', 'http://localhost:8080', ...extra] });
  return Object.assign(s, { nodeUrl, address, url: nodeUrl });
}

/** `workers`: shards per node (1 unless the test needs a node's own cross-shard path: the suite runs many nodes on few cores). */
export async function startCluster(n: number, extra: string[] = [], opts: { db?: TestDatabase; databaseUrls?: (string | undefined)[]; workers?: number } = {}): Promise<TestCluster> {
  const db = opts.db ?? (await startDatabase());
  const dataDir = mkdtempSync(join(tmpdir(), 'burrow-cluster-'));
  const nodes: ClusterNodeProc[] = [];
  // One after another: the first creates the seed admin and its key file.
  for (let i = 0; i < n; i++) nodes.push(await startNode(db, dataDir, i, undefined, extra, opts.databaseUrls?.[i], opts.workers ?? 1));
  return {
    nodes,
    db,
    dataDir,
    adminKey: nodes[0]!.adminKey,
    async stop() {
      await Promise.all(nodes.map((s) => s.stop({ keepDatabase: true })));
      await db.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** One visitor request to node `node` for tunnel `id`. */
export function visitNode(node: ClusterNodeProc, id: string, o: { method?: string; path?: string; body?: Buffer; headers?: Record<string, string> } = {}, ms = 10_000): Promise<Reply> {
  return withDeadline(
    new Promise<Reply>((resolve, reject) => {
      const port = Number(new URL(node.nodeUrl).port);
      const req = http.request({ host: node.address, port, method: o.method ?? 'GET', path: o.path ?? '/', headers: { host: `${id}.localhost`, ...o.headers }, agent: false, setHost: false });
      req.on('error', reject);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      req.end(o.body);
    }),
    ms,
    `${o.method ?? 'GET'} ${id} at ${node.nodeUrl}`,
  );
}

/** Raw control connections to the nodes of a test file's cluster, all ended by `end()`. */
export class NodePeers {
  private readonly peers: RawPeer[] = [];
  constructor(private readonly cluster: () => TestCluster) {}

  async at(node: number, key: string): Promise<RawPeer> {
    const p = await rawPeer(this.cluster().nodes[node]!.nodeUrl, key);
    this.peers.push(p);
    return p;
  }

  end(): void {
    for (const p of this.peers) p.ws.destroy();
  }
}
