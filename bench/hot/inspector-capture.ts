// The request inspector's per-request cost, in one process and without sockets: N synthetic
// exchanges through the capture API exactly as the tunnel client drives it (tunnel-client.ts
// guardedExchange per stream, then streams.ts: requestBody, response, responseBody, end), into
// the real inspector (startInspector on 127.0.0.1:0, its store and listeners; no page open).
//
//   node --expose-gc dist/bench/hot/inspector-capture.js [N]
//
// Prints, per exchange: CPU ns (process.cpuUsage), bytes allocated on the JS heap (the growth of
// used_heap_size over batches that start after a full collection). `--trace-gc` shows the
// collections that allocation costs. Run it against two checkouts to compare.
import v8 from 'node:v8';
import { guardedExchange, type TunnelObserver } from '../../src/client/observer.js';
import { startInspector } from '../../src/client/inspector/server.js';

const N = Number(process.argv[2] ?? 200_000);
const BATCH = 2_000;

// What burrowd hands the client for `wrk -c1 http://<id>.localhost:PORT/` (frames.ts HttpHead),
// and what a small origin answers (14 B).
const requestHead = () => ({
  kind: 'http' as const,
  method: 'GET',
  target: '/',
  headers: ['Host', 'k3j2h4g5.localhost:8080', 'User-Agent', 'wrk/4.2', 'Accept', '*/*', 'X-Forwarded-For', '127.0.0.1', 'X-Forwarded-Proto', 'http', 'X-Forwarded-Host', 'k3j2h4g5.localhost:8080'],
  upgrade: false,
  end: true,
});
const postHead = () => ({ ...requestHead(), method: 'POST', target: '/api/items?x=1', headers: [...requestHead().headers, 'Content-Type', 'application/json', 'Content-Length', '64'], end: false });
const responseHeaders = ['Content-Type', 'text/plain', 'Content-Length', '14', 'Date', 'Sat, 01 Jan 2028 00:00:00 GMT', 'Connection', 'keep-alive'];
const line = { version: 'HTTP/1.1' as const, reason: 'OK' };
const local = { host: '127.0.0.1', port: 3000 };
const requestBody = Buffer.alloc(64, 0x61);
const responseBody = Buffer.from('Hello, world!\n');

type Kind = 'get' | 'post';

function exchange(observer: TunnelObserver, kind: Kind): void {
  const head = kind === 'get' ? requestHead() : postHead();
  // As tunnel-client.ts openStream and streams.ts RawHttpStream call it.
  const capture = guardedExchange(observer, head, local);
  if (kind === 'post') capture?.requestBody(Buffer.from(requestBody)); // a fresh frame payload
  capture?.response(200, responseHeaders.slice(), line);
  capture?.responseBody(Buffer.from(responseBody)); // llhttp's slice of a fresh socket chunk
  capture?.end();
}

/** The JS heap growth of `n` exchanges, or null when a collection shrank it in between. */
function allocated(observer: TunnelObserver, kind: Kind, n: number): number | null {
  const before = v8.getHeapStatistics().used_heap_size;
  for (let i = 0; i < n; i++) exchange(observer, kind);
  const after = v8.getHeapStatistics().used_heap_size;
  return after >= before ? after - before : null;
}

async function measure(kind: Kind, bare: boolean): Promise<void> {
  const inspector = await startInspector({ address: { host: '127.0.0.1', port: 0 } });
  try {
    const ids = new Map([['web', 'k3j2h4g5']]);
    // `bare`: an observer that declines, so the row is what the harness itself costs (its heads,
    // buffers and calls), a lower bound: V8 may drop the allocations nobody keeps.
    const observer: TunnelObserver = bare ? { request: () => null } : inspector.observer(() => ids.get('web') ?? 'web', local);
    for (let i = 0; i < 20_000; i++) exchange(observer, kind); // warm up, fill the ring
    // Allocation: batches right after a full collection; the median drops the odd batch that
    // a scavenge cut short.
    const samples: number[] = [];
    for (let b = 0; b < 30 && samples.length < 10; b++) {
      global.gc?.();
      await new Promise((r) => setImmediate(r));
      const bytes = allocated(observer, kind, BATCH);
      if (bytes !== null) samples.push(bytes / BATCH);
    }
    samples.sort((a, b) => a - b);
    global.gc?.();
    await new Promise((r) => setImmediate(r));
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) exchange(observer, kind);
    const wallNs = Number(process.hrtime.bigint() - t0);
    const cpu = process.cpuUsage(cpu0);
    await new Promise((r) => setImmediate(r));
    const cpuNs = (cpu.user + cpu.system) * 1000;
    const median = samples.length ? samples[samples.length >> 1]!.toFixed(0) : 'n/a';
    console.log(
      `${(bare ? `${kind} (no capture)` : kind).padEnd(18)} N=${N}  cpu ${(cpuNs / N).toFixed(0)} ns/exchange  wall ${(wallNs / N).toFixed(0)} ns  heap ${median} B/exchange (median of ${samples.length})  kept ${inspector.store.size}`,
    );
  } finally {
    await inspector.close();
  }
}

for (const kind of ['get', 'post'] as const) for (const bare of [true, false]) await measure(kind, bare);
