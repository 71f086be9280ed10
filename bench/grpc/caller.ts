// The h2 scenario's gRPC load: a process of its own, one grpc-js channel (one HTTP/2
// connection), `concurrency` calls or streams kept busy for the warm-up and then the measured
// seconds; prints one JSON line (CallerResult) and exits.
//
//   node caller.js '{"address":"127.0.0.1:port","authority":"<id>.localhost","mode":"unary",…}'
//
//   unary     each of `concurrency` loops: call, wait for the answer, call again
//   pingPong  each of `concurrency` bidi streams: a message, wait for its echo, the next
//   download  `concurrency` server streams of `size`-byte messages, read as fast as they come;
//             latency is each message's age on arrival (its sender's clock in its first bytes)
//
// Only what ends inside the measured window counts. CPU is read at the window's edges: this
// process's own, and that of the processes the harness names (cpuOf), from /proc.
import { benchClient, downloadRequest, type BenchClient } from './service.js';
import { percentile } from '../lib/stats.js';
import { cpuSplitMicros } from '../lib/cpu.js';

export interface CallerOptions {
  address: string;
  authority?: string;
  mode: 'unary' | 'pingPong' | 'download';
  concurrency: number;
  /** Message bytes: the request for unary and pingPong, each streamed message for download. */
  size: number;
  warmupSecs: number;
  durationSecs: number;
  /** Processes by part (server, client, origin) whose CPU is read at the edges of the window. */
  cpuOf: Record<string, number[]>;
}

export interface CallerResult {
  /** Calls (unary), round trips (pingPong) or messages (download) completed in the window. */
  ops: number;
  opsPerSec: number;
  /** Message bytes received per second (payload only). */
  bytesPerSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  errorDetail: string;
  /** This process's CPU over the window, µs. */
  cpuUserUs: number;
  cpuSystemUs: number;
  /** CPU µs of each part of `cpuOf` over the window; null (NaN) for a part with no process. */
  cpuUs: Record<string, number>;
}

const opts = JSON.parse(process.argv[2] ?? '{}') as CallerOptions;
const client = benchClient(opts.address, opts.authority);
const payload = Buffer.alloc(opts.size, 0x61);

let measuring = false;
let stopping = false;
let ops = 0;
let bytes = 0;
const latencies: number[] = [];
let errors = 0;
let firstError = '';

function done(startNs: bigint, size: number): void {
  if (!measuring) return;
  ops++;
  bytes += size;
  latencies.push(Number(process.hrtime.bigint() - startNs) / 1e6);
}

function failed(err: Error): void {
  if (stopping) return;
  errors++;
  firstError ||= err.message;
}

function unaryLoop(c: BenchClient): void {
  if (stopping) return;
  const t0 = process.hrtime.bigint();
  c.unary(payload, (err, res) => {
    if (err) failed(err);
    else done(t0, res?.length ?? 0);
    unaryLoop(c);
  });
}

function pingPongStream(c: BenchClient): void {
  const call = c.pingPong();
  let t0 = process.hrtime.bigint();
  call.on('data', (m: Buffer) => {
    done(t0, m.length);
    if (stopping) return void call.end();
    t0 = process.hrtime.bigint();
    call.write(payload);
  });
  call.on('error', failed);
  call.write(payload);
}

function downloadStream(c: BenchClient): void {
  const call = c.download(downloadRequest(opts.size));
  call.on('data', (m: Buffer) => {
    if (stopping) return;
    done(m.readBigUInt64BE(0), m.length);
  });
  call.on('error', (err: Error & { code?: number }) => {
    // 1 = CANCELLED: ours, at the end.
    if (err.code !== 1) failed(err);
  });
  closers.push(() => call.cancel());
}
const closers: (() => void)[] = [];

function partsCpu(): Record<string, number> {
  return Object.fromEntries(
    Object.entries(opts.cpuOf).map(([part, pids]) => {
      const c = cpuSplitMicros(pids);
      return [part, pids.length ? c.user + c.system : NaN];
    }),
  );
}

const start = { unary: unaryLoop, pingPong: pingPongStream, download: downloadStream }[opts.mode];
for (let i = 0; i < opts.concurrency; i++) start(client);

setTimeout(() => {
  measuring = true;
  const parts0 = partsCpu();
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  setTimeout(() => {
    measuring = false;
    stopping = true;
    const cpu = process.cpuUsage(cpu0);
    const parts = partsCpu();
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    for (const close of closers) close();
    const sorted = Float64Array.from(latencies).sort();
    const result: CallerResult = {
      ops,
      opsPerSec: ops / secs,
      bytesPerSec: bytes / secs,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      errors,
      errorDetail: firstError,
      cpuUserUs: cpu.user,
      cpuSystemUs: cpu.system,
      cpuUs: Object.fromEntries(Object.keys(parts).map((k) => [k, parts[k]! - parts0[k]!])),
    };
    process.stdout.write(`${JSON.stringify(result)}\n`, () => {
      client.close();
      // Calls still in flight are not waited for: their answers would land outside the window.
      setTimeout(() => process.exit(0), 200).unref();
    });
  }, opts.durationSecs * 1000);
}, opts.warmupSecs * 1000);
