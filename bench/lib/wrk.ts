// Runs wrk (Debian's wrk 4.x) and parses its text report. wrk is used rather than autocannon
// because it is C with one epoll loop per thread: on a 2-core machine the load tool's own CPU
// share matters, and wrk takes the least of it.
import { run } from './procs.js';
import { LOOPBACK } from './net.js';
import type { Endpoint } from '../targets/target.js';

export interface WrkResult {
  requests: number;
  durationSecs: number;
  reqPerSec: number;
  /** Bytes per second read by wrk (headers + bodies). */
  readBytesPerSec: number;
  p50Ms: number;
  p75Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Socket errors plus non-2xx/3xx responses: a run with errors is flagged in the table. */
  errors: number;
  errorDetail: string;
}

export interface WrkOptions {
  endpoint: Endpoint;
  path: string;
  connections: number;
  threads: number;
  durationSecs: number;
  timeoutSecs?: number;
}

export async function wrk(opts: WrkOptions): Promise<WrkResult> {
  const args = [
    '-t', String(Math.max(1, Math.min(opts.threads, opts.connections))),
    '-c', String(opts.connections),
    '-d', `${opts.durationSecs}s`,
    '--timeout', `${opts.timeoutSecs ?? 10}s`,
    '--latency',
  ];
  if (opts.endpoint.hostHeader) args.push('-H', `Host: ${opts.endpoint.hostHeader}`);
  args.push(`${opts.endpoint.tls ? 'https' : 'http'}://${LOOPBACK}:${opts.endpoint.port}${opts.path}`);
  const res = await run('wrk', 'wrk', args, (opts.durationSecs + 30) * 1000);
  if (res.code !== 0) throw new Error(`wrk exited with ${res.code}: ${res.stderr || res.stdout}`);
  return parseWrk(res.stdout);
}

const TIME_UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const SIZE_UNIT: Record<string, number> = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3, TB: 1024 ** 4 };

function timeMs(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m|h)$/.exec(text.trim());
  if (!m) throw new Error(`wrk: cannot parse time "${text}"`);
  return Number(m[1]) * TIME_UNIT_MS[m[2]!]!;
}

function bytes(text: string): number {
  const m = /^([\d.]+)(B|KB|MB|GB|TB)$/.exec(text.trim());
  if (!m) throw new Error(`wrk: cannot parse size "${text}"`);
  return Number(m[1]) * SIZE_UNIT[m[2]!]!;
}

export function parseWrk(out: string): WrkResult {
  const need = (re: RegExp, what: string): RegExpExecArray => {
    const m = re.exec(out);
    if (!m) throw new Error(`wrk: no ${what} in output:\n${out}`);
    return m;
  };
  const pct = (p: number) => timeMs(need(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm'), `${p}th percentile`)[1]!);
  const total = need(/(\d+) requests in ([\d.]+\w+),/, 'request count');
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  const socketErrors = socket ? socket.slice(1, 5).reduce((a, b) => a + Number(b), 0) : 0;
  const badStatus = non2xx ? Number(non2xx[1]) : 0;
  const detail = [socket?.[0], non2xx?.[0]].filter(Boolean).join('; ');
  return {
    requests: Number(total[1]),
    durationSecs: timeMs(total[2]!) / 1000,
    reqPerSec: Number(need(/Requests\/sec:\s+([\d.]+)/, 'Requests/sec')[1]),
    readBytesPerSec: bytes(need(/Transfer\/sec:\s+(\S+)/, 'Transfer/sec')[1]!),
    p50Ms: pct(50),
    p75Ms: pct(75),
    p90Ms: pct(90),
    p99Ms: pct(99),
    maxMs: timeMs(need(/^\s+Latency\s+\S+\s+\S+\s+(\S+)/m, 'max latency')[1]!),
    errors: socketErrors + badStatus,
    errorDetail: detail,
  };
}
