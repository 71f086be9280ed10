// Runs h2load (Debian's nghttp2-client) and reads its report: HTTP/2 load, as wrk.ts is HTTP/1.1
// load. C like wrk, one event loop per thread, so it takes little of the shared cores.
// h2load prints no percentiles: its --log-file has one line per request (start µs, status,
// µs to the end of the answer), and p50/p99 come from there. A warm-up is a run of its own
// (as with wrk), so the CPU read around a measured run is that run's.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { run, tempDir } from './procs.js';
import { LOOPBACK } from './net.js';
import { percentile } from './stats.js';

export interface H2loadOptions {
  /** What the URL names: the SNI and :authority (h2load connects to 127.0.0.1:port whatever it is). */
  host: string;
  port: number;
  /** h2 over TLS (ALPN), else h2c with prior knowledge. */
  tls: boolean;
  path: string;
  /** Connections (h2load -c). */
  connections: number;
  /** Concurrent streams per connection (-m). */
  streams: number;
  threads: number;
  durationSecs: number;
}

export interface H2loadResult {
  requests: number;
  reqPerSec: number;
  /** Bytes per second h2load read (frames, headers and bodies). */
  readBytesPerSec: number;
  p50Ms: number;
  p99Ms: number;
  /** Requests done without a 2xx or 3xx answer (errors and timeouts too): a run with errors is flagged. */
  errors: number;
  errorDetail: string;
  /** What ALPN gave ("h2"), or "h2c". */
  protocol: string;
}

let logs: string | null = null;

export async function h2load(opts: H2loadOptions): Promise<H2loadResult> {
  logs ??= tempDir('h2load');
  const log = join(logs, 'requests.tsv');
  rmSync(log, { force: true });
  const args = [
    '-c', String(opts.connections),
    '-m', String(opts.streams),
    '-t', String(Math.max(1, Math.min(opts.threads, opts.connections))),
    '-D', String(opts.durationSecs),
    '--log-file', log,
    '--connect-to', `${LOOPBACK}:${opts.port}`,
    // Only h2 in ALPN: a target that cannot speak it fails rather than measuring HTTP/1.1.
    ...(opts.tls ? ['--npn-list', 'h2'] : []),
    `${opts.tls ? 'https' : 'http'}://${opts.host}:${opts.port}${opts.path}`,
  ];
  const res = await run('h2load', 'h2load', args, (opts.durationSecs + 30) * 1000);
  if (res.code !== 0) throw new Error(`h2load exited with ${res.code}: ${(res.stderr || res.stdout).trim().split('\n').slice(-5).join(' / ')}`);
  const r = parseH2load(res.stdout, opts.tls);
  const latencies = readLog(log);
  return { ...r, p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99) };
}

/** The per-request log: µs to the end of each answer that succeeded, ascending, in ms. */
function readLog(file: string): Float64Array {
  const out: number[] = [];
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const [, status, us] = line.split('\t');
    if (status !== undefined && Number(status) >= 200 && Number(status) < 300) out.push(Number(us) / 1000);
  }
  return Float64Array.from(out).sort();
}

export function parseH2load(out: string, tls: boolean): Omit<H2loadResult, 'p50Ms' | 'p99Ms'> {
  const need = (re: RegExp, what: string): RegExpExecArray => {
    const m = re.exec(out);
    if (!m) throw new Error(`h2load: no ${what} in output:\n${out}`);
    return m;
  };
  const finished = need(/^finished in ([\d.]+)(s|ms|us), [\d.]+ req\/s, ([\d.]+)(B|KB|MB|GB)\/s/m, 'summary line');
  const req = need(/^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/m, 'request counts');
  const codes = need(/^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/m, 'status codes');
  const secs = Number(finished[1]) / { s: 1, ms: 1e3, us: 1e6 }[finished[2] as 's'];
  // h2load's own req/s counts every request done, failed ones too: only 2xx answers count here.
  const ok = Number(codes[1]);
  // "failed" is every request done without a 2xx/3xx: 4xx and 5xx answers, and the errored and
  // timed-out ones, which it already counts.
  const failed = Number(req[5]);
  const unit = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 }[finished[4] as 'B'];
  const alpn = /^Application protocol: (\S+)/m.exec(out)?.[1];
  if (tls && alpn !== 'h2') throw new Error(`h2load: the server did not negotiate h2 (${alpn ?? 'no application protocol'})`);
  return {
    requests: ok,
    reqPerSec: secs > 0 ? ok / secs : NaN,
    readBytesPerSec: Number(finished[3]) * unit,
    errors: failed,
    errorDetail: failed ? `${req[0]}; ${codes[0]}` : '',
    protocol: tls ? alpn! : 'h2c',
  };
}
