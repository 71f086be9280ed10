import { parentPort, workerData } from 'node:worker_threads';
import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

// Thread entry of the embedded database (see embedded.ts). `memory://` keeps nothing on disk.
const { dataDir } = workerData as { dataDir: string };
// pglite-socket serialises queries and holds the others back while one connection is in
// a transaction, so several pooled connections keep transaction semantics.
const MAX_CONNECTIONS = 64;

try {
  if (!dataDir.startsWith('memory://')) mkdirSync(dataDir, { recursive: true });
  const db = await PGlite.create(dataDir);
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: MAX_CONNECTIONS });
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
