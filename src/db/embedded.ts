import { Worker } from 'node:worker_threads';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../log.js';
import { postgresBinDir, startPostgres } from './embedded-postgres.js';

// The embedded database behind --data-dir: a real PostgreSQL server (embedded-postgres.ts)
// where the platform package ships its binaries; PGlite (below) where it does not, and for a
// data directory PGlite created before (its cluster cannot be opened by another major version).
// `memory://` is a throwaway database deleted when the server stops.

export interface EmbeddedOptions {
  /** PGlite only: a dump of a fresh database to start `memory://` from. */
  templateFile?: string;
  /** PostgreSQL only: a fresh cluster to copy instead of running initdb (the test suite). */
  templateDir?: string;
  /** PostgreSQL's max_connections: every pool's size together, with room for a restart. */
  maxConnections?: number;
  engine?: 'postgres' | 'pglite';
}

const DEFAULT_MAX_CONNECTIONS = 100;

export async function startEmbedded(dataDir: string, log: Logger, opts: EmbeddedOptions = {}): Promise<EmbeddedDb> {
  const memory = dataDir.startsWith('memory://');
  const bin = postgresBinDir();
  const pgliteDir = !memory && existsSync(join(dataDir, 'PG_VERSION'));
  const engine = opts.engine ?? (bin && !pgliteDir ? 'postgres' : 'pglite');
  if (engine === 'pglite' || !bin) {
    if (!bin) log.warn(`no PostgreSQL binaries for ${process.platform}-${process.arch}; using PGlite (slower, more memory)`);
    else if (pgliteDir) log.warn({ dataDir }, 'this data directory holds a PGlite database; staying on PGlite (to move: pg_dump it into a fresh --data-dir)');
    return startPglite(dataDir, log, opts);
  }
  const dir = memory ? mkdtempSync(join(tmpdir(), 'burrow-pg-')) : dataDir;
  const t0 = performance.now();
  const db = await startPostgres(bin, dir, log, {
    maxConnections: opts.maxConnections ?? DEFAULT_MAX_CONNECTIONS,
    ephemeral: memory,
    templateDir: opts.templateDir,
    removeOnStop: memory,
  });
  log.info({ dataDir: dir, startMs: Math.round(performance.now() - t0) }, 'embedded database (PostgreSQL) ready');
  return db;
}

//   main thread                      embedded-db worker thread
//   startEmbedded() ──workerData──▶  PGlite(dataDir) + pglite-socket on 127.0.0.1:0
//                   ◀── {url} ─────
//   stop()          ──'stop'──────▶  close socket server, close PGlite (checkpoint), exit
//
// PGlite runs in its own thread so its single-threaded WASM Postgres never blocks the
// main thread's actors or the shards; everyone talks to it through postgres.js.

export interface EmbeddedDb {
  url: string;
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;

function startPglite(dataDir: string, log: Logger, opts: EmbeddedOptions): Promise<EmbeddedDb> {
  const worker = new Worker(new URL('./embedded-worker.js', import.meta.url), { workerData: { dataDir, templateFile: opts.templateFile } });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void worker.terminate();
      reject(new Error(`embedded database did not start within ${START_TIMEOUT_MS} ms`));
    }, START_TIMEOUT_MS);
    worker.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`embedded database failed: ${err.message}`));
    });
    worker.once('message', (msg: { url?: string; error?: string }) => {
      clearTimeout(timer);
      if (!msg.url) {
        reject(new Error(`embedded database failed: ${msg.error}`));
        return;
      }
      log.info({ dataDir }, 'embedded database (PGlite) ready');
      worker.on('error', (err) => log.error({ err }, 'embedded database thread failed'));
      resolve({
        url: msg.url,
        stop: () =>
          new Promise<void>((done) => {
            const kill = setTimeout(() => {
              log.warn('embedded database did not close in time; terminating its thread');
              void worker.terminate().then(() => done());
            }, STOP_TIMEOUT_MS);
            worker.once('exit', () => {
              clearTimeout(kill);
              done();
            });
            worker.postMessage('stop');
          }),
      });
    });
  });
}
