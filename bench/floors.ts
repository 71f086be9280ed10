// The floors under a tunnelled request's cost: the two HTTP libraries every request passes
// through, each measured alone in one Node process on the same host, with nothing of burrow.
//   node dist/bench/floors.js [seconds=10] [edge|client|both]
//   edge:   uWebSockets.js (the build burrowd loads) answering GET /small with 14 bytes, wrk at
//           64 keep-alive connections — what burrowd cannot go below for the visitor's side
//   client: undici Pool.dispatch (the way the burrow CLI sends each request, streams.ts) with 64
//           requests in flight to the bench's nginx origin — what the CLI cannot go below
// Each prints requests per second and the process's CPU time per request (user + system);
// compare with the http table's `server/client CPU µs/req` rows. On a small shared host the
// figures move between runs minutes apart (undici: 30 to 54 µs here): run it several times.
import { cpuUsage } from 'node:process';
import { Pool, type Dispatcher } from 'undici';
import { loadUws } from '../src/http/uws-loader.js';
import { startOrigin, PATHS, SMALL_BODY } from './lib/origin.js';
import { stop } from './lib/procs.js';
import { freePort } from './lib/net.js';
import { wrk } from './lib/wrk.js';

const seconds = Number(process.argv[2] ?? 10);
const IN_FLIGHT = 64;

async function edgeFloor(): Promise<void> {
  const { uws } = loadUws();
  const port = await freePort();
  const app = uws.App().get('/*', (res) => void res.end(SMALL_BODY));
  const listen = await new Promise<unknown>((r) => app.listen('127.0.0.1', port, r));
  try {
    const base = { endpoint: { port }, path: PATHS.small.path, connections: IN_FLIGHT, threads: 1 };
    await wrk({ ...base, durationSecs: 2 });
    const cpu0 = cpuUsage();
    const r = await wrk({ ...base, durationSecs: seconds });
    const cpu = cpuUsage(cpu0);
    console.log(`edge floor (uWS alone, wrk ${IN_FLIGHT} conns): ${Math.round(r.reqPerSec)} req/s, ${((cpu.user + cpu.system) / r.requests).toFixed(1)} µs CPU per request`);
  } finally {
    if (listen) uws.us_listen_socket_close(listen as never);
  }
}

async function clientFloor(): Promise<void> {
  const origin = await startOrigin('nginx');
  const pool = new Pool(`http://127.0.0.1:${origin.port}`, { connections: 256, pipelining: 1 });
  const once = (): Promise<void> =>
    new Promise((resolve, reject) => {
      pool.dispatch({ path: PATHS.small.path, method: 'GET', headers: ['host', 'bench.localhost'] }, {
        onConnect: () => undefined,
        onHeaders: () => true,
        onData: () => true,
        onComplete: () => resolve(),
        onError: reject,
      } as unknown as Dispatcher.DispatchHandler);
    });
  const worker = async (until: number): Promise<number> => {
    let n = 0;
    for (; Date.now() < until; n++) await once();
    return n;
  };
  try {
    await Promise.all(Array.from({ length: IN_FLIGHT }, () => worker(Date.now() + 2_000)));
    const cpu0 = cpuUsage();
    const t0 = Date.now();
    const counts = await Promise.all(Array.from({ length: IN_FLIGHT }, () => worker(t0 + seconds * 1000)));
    const cpu = cpuUsage(cpu0);
    const requests = counts.reduce((a, b) => a + b, 0);
    console.log(`client floor (undici alone, ${IN_FLIGHT} in flight, ${origin.kind}): ${Math.round(requests / ((Date.now() - t0) / 1000))} req/s, ${((cpu.user + cpu.system) / requests).toFixed(1)} µs CPU per request`);
  } finally {
    await pool.close();
    await stop(origin.proc, 2_000);
  }
}

const which = process.argv[3] ?? 'both';
if (which !== 'edge') await clientFloor();
if (which !== 'client') await edgeFloor();
