import { parentPort, threadId, workerData } from 'node:worker_threads';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { SessionQueue } from './pglite-session-queue.js';

// Thread entry of the embedded database (see embedded.ts). `memory://` keeps nothing on disk.
const { dataDir, templateFile } = workerData as { dataDir: string; templateFile?: string };
// Several pooled connections share PGlite's one session; SessionQueue keeps each
// connection's protocol exchanges and transactions whole.
const MAX_CONNECTIONS = 64;

/**
 * initdb is most of PGlite's start-up (3-6 s). A memory:// database can start from a dump of a
 * fresh one instead (0.6 s): the test suite starts dozens of servers and uses this.
 */
async function createDb(): Promise<PGlite> {
  if (!templateFile || !dataDir.startsWith('memory://')) return PGlite.create(dataDir);
  if (existsSync(templateFile)) return PGlite.create(dataDir, { loadDataDir: new Blob([readFileSync(templateFile)]) });
  const db = await PGlite.create(dataDir);
  const dump = await db.dumpDataDir('none');
  const tmp = `${templateFile}.${process.pid}.${threadId}`;
  writeFileSync(tmp, Buffer.from(await dump.arrayBuffer()));
  renameSync(tmp, templateFile); // atomic: parallel test processes never read half a file
  return db;
}

try {
  if (!dataDir.startsWith('memory://')) mkdirSync(dataDir, { recursive: true });
  const db = await createDb();
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: MAX_CONNECTIONS });
  // Replace pglite-socket's queue: see pglite-session-queue.ts for why.
  (server as unknown as { queryQueue: SessionQueue }).queryQueue = new SessionQueue(db);
  await server.start();
  parentPort!.postMessage({ url: `postgres://postgres@${server.getServerConn()}/postgres` });
  parentPort!.once('message', async () => {
    await server.stop().catch(() => undefined);
    await db.close().catch(() => undefined);
    process.exit(0);
  });
} catch (err) {
  parentPort!.postMessage({ error: (err as Error).message });
}
