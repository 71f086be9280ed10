import { Worker } from 'node:worker_threads';
import type { Logger } from '../log.js';

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

export function startEmbedded(dataDir: string, log: Logger, opts: { templateFile?: string } = {}): Promise<EmbeddedDb> {
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
