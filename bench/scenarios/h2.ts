// HTTP/2 and gRPC visitors (issue #33, "Measured"). Two parts, each with its rows measured in
// the same run, one after the other, with the same load tool and arguments:
//
// h2load at a TLS edge (ALPN h2) and at an h2c edge (prior knowledge), GET 14 B and 1 MiB,
// --h2-connections × --streams:
//   direct       h2load ──h2 / h2c──▶ nginx origin (the files, served over HTTP/2 itself)
//   nginx-proxy  h2load ──h2 / h2c──▶ nginx proxy ──HTTP/1.1 pool──▶ nginx origin
//   burrow       h2load ──h2 / h2c──▶ burrowd ══ control WebSocket ══▶ burrow CLI ──HTTP/1.1──▶ nginx origin
//                (two burrowd: one with --tls-cert for the TLS edge, one plain for h2c: a port is
//                one or the other)
//
// gRPC, @grpc/grpc-js at both ends (bench/grpc/), h2c:
//   direct       caller ──h2c──▶ echo server
//   burrow       caller ──h2c, :authority <id>.localhost──▶ burrowd (plain) ══▶ `burrow http h2c://…` ──h2c──▶ echo server
//
// CPU per request (or call, or message) of every process on the path, from /proc: the server
// side (burrowd; the nginx proxy), the client side (the burrow CLI), the origin (nginx; the echo
// server) and their sum; for gRPC the caller's too (its own, over its window).
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { startOrigin, PATHS } from '../lib/origin.js';
import { waitForH2 } from '../lib/net.js';
import { h2load, type H2loadResult } from '../lib/h2load.js';
import { descendants, start, stop, waitForOutput, sleep, run, type Proc } from '../lib/procs.js';
import { benchCertificate, WILDCARD_DOMAIN } from '../lib/tls.js';
import { cpuSplitMicros } from '../lib/cpu.js';
import { measureSubjects, type Context, type Scenario, type ScenarioOutput } from '../lib/context.js';
import { ratioTable, type Measurement, type TargetInfo } from '../lib/report.js';
import { burrowTarget, type BurrowTarget } from '../targets/burrow.js';
import { startNginxH2Proxy } from '../targets/nginx-h2-proxy.js';
import * as grpc from '@grpc/grpc-js';
import { benchClient } from '../grpc/service.js';
import type { CallerOptions, CallerResult } from '../grpc/caller.js';

const GBIT = 1e9 / 8;
const MIB = 1 << 20;
/** gRPC messages: unary and ping-pong requests (each echoed), and each message of the download stream. */
const GRPC_SMALL = 16;
const GRPC_STREAM_MESSAGE = 64 << 10;
/** The targets. */
const TARGET_VS_NGINX_PROXY = 1.0;
const TARGET_UNARY_VS_DIRECT = 0.5;
const TARGET_UNARY_AT_CALLS = 64;
/** Bidirectional streams of the ping-pong case, each with one message in flight. */
const PING_PONG_STREAMS = 64;
const TARGET_STREAM_VS_DIRECT = 0.7;

type RowName = 'direct' | 'nginx-proxy' | 'burrow';
const ROWS: readonly RowName[] = ['direct', 'nginx-proxy', 'burrow'];

/** One row at one edge: where h2load connects, and whose CPU it reads. */
interface Edge {
  /** SNI and :authority; h2load connects to 127.0.0.1:port whatever it is. */
  host: string;
  port: number;
  serverPids(): number[];
  clientPids(): number[];
}

interface Row {
  name: RowName;
  at: { tls: Edge; h2c: Edge };
}

const NONE = (): number[] => [];

/** Processes on a request's path, besides the load tool. */
type Part = 'server' | 'client' | 'origin';
const PARTS: readonly Part[] = ['server', 'client', 'origin'];

interface Costed {
  /** CPU µs per request (per call, per message) of each part; NaN where the row has none. */
  cpuUs: Record<Part, number>;
}

export const h2Scenario: Scenario = {
  name: 'h2',
  summary: 'HTTP/2 visitors: h2load req/s, p50/p99 over TLS (ALPN h2) and h2c, 14 B and 1 MiB, direct nginx beside nginx as an h2 → HTTP/1.1 proxy and burrow; gRPC (grpc-js) unary calls/s and streaming, direct beside burrow',
  required: ['h2load', 'nginx', 'openssl'],
  optional: [],
  opensOwnTargets: true,
  run: runH2,
};

async function runH2(ctx: Context): Promise<ScenarioOutput> {
  const s = ctx.settings;
  const cert = await benchCertificate();
  const workers = s.burrowWorkers ?? availableParallelism();
  const info: Record<string, TargetInfo> = {};
  const procs: Proc[] = [];
  const burrows: BurrowTarget[] = [];
  const origin = await startOrigin('nginx', cert, true);
  procs.push(origin.proc);
  const group = (p: Proc) => (p.isRunning() ? [p.pid, ...descendants(p.pid)] : []);
  try {
    const rows: Row[] = [];
    rows.push({
      name: 'direct',
      at: {
        tls: { host: 'localhost', port: origin.tlsPort!, serverPids: NONE, clientPids: NONE },
        h2c: { host: 'localhost', port: origin.h2cPort!, serverPids: NONE, clientPids: NONE },
      },
    });
    info.direct = { describe: `h2load (or the gRPC caller) straight at the origin: nginx (1 worker) with \`listen … ssl http2\` and \`listen … http2\` (h2c) beside its HTTP/1.1 port, same files; the gRPC echo server (bench/grpc/echo-server.ts)` };
    try {
      const proxy = await startNginxH2Proxy(origin.port, cert, workers);
      procs.push(proxy.proc);
      const pids = { serverPids: () => group(proxy.proc), clientPids: NONE };
      rows.push({ name: 'nginx-proxy', at: { tls: { host: 'localhost', port: proxy.tlsPort, ...pids }, h2c: { host: 'localhost', port: proxy.h2cPort, ...pids } } });
      info['nginx-proxy'] = { describe: proxy.describe };
    } catch (err) {
      info['nginx-proxy'] = { unavailable: `did not start: ${(err as Error).message.split('\n')[0]}` };
      console.error(`bench: nginx-proxy not available: ${info['nginx-proxy'].unavailable}`);
    }
    // Two burrowd: --port is TLS (with --tls-cert) or plain (h2c by preface), never both.
    let h2cBurrow: BurrowTarget | undefined;
    try {
      const open = (tls: boolean) => burrowTarget({ name: 'burrow', repoRoot: ctx.repoRoot, workers: s.burrowWorkers, databaseUrl: s.burrowDatabaseUrl, cpuProfDir: s.cpuProfDir, tls: tls ? cert : undefined, domain: WILDCARD_DOMAIN });
      const tlsBurrow = await open(true);
      burrows.push(tlsBurrow);
      h2cBurrow = await open(false);
      burrows.push(h2cBurrow);
      const tlsEp = await tlsBurrow.expose('http', origin.port);
      const h2cEp = await h2cBurrow.expose('http', origin.port);
      const plain = h2cBurrow;
      rows.push({
        name: 'burrow',
        at: {
          tls: { host: tlsEp.hostHeader!, port: tlsEp.port, serverPids: () => tlsBurrow.serverPids(), clientPids: () => tlsBurrow.clientPids() },
          h2c: { host: h2cEp.hostHeader!, port: h2cEp.port, serverPids: () => plain.serverPids(), clientPids: () => plain.clientPids() },
        },
      });
      info.burrow = { describe: `TLS edge: ${tlsBurrow.describe}. h2c edge: a second burrowd, the same without --tls-cert (both with \`--domain ${WILDCARD_DOMAIN}\`: tunnels are <id>.${WILDCARD_DOMAIN}, which the certificate's wildcard covers). gRPC: \`burrow http h2c://127.0.0.1:<echo port>\` on the h2c one. CPU rows: the burrowd of the edge measured (with its embedded PostgreSQL) and its CLIs (the gRPC rows: the idle HTTP one too)` };
    } catch (err) {
      info.burrow = { unavailable: `did not start: ${(err as Error).message.split('\n')[0]}` };
      console.error(`bench: burrow not available: ${info.burrow.unavailable}`);
    }

    // Every row must answer both bodies over HTTP/2 at both edges before anything is measured.
    const ready: Row[] = [];
    for (const r of rows) {
      try {
        for (const [tls, ep] of [[true, r.at.tls], [false, r.at.h2c]] as const) {
          for (const body of [PATHS.small, PATHS['1m']]) await waitForH2({ host: ep.host, port: ep.port, tls }, body.path, body.bytes, 15_000, r.name);
        }
        ready.push(r);
      } catch (err) {
        info[r.name] = { ...info[r.name], unavailable: `HTTP/2 did not work: ${(err as Error).message.split('\n')[0]}` };
        console.error(`bench: ${r.name} not available: ${info[r.name]!.unavailable}`);
      }
    }

    const measurements: Measurement[] = [];
    for (const tls of [true, false]) {
      for (const body of [{ label: '14 B', ...PATHS.small }, { label: '1 MiB', ...PATHS['1m'] }]) {
        for (const connections of s.h2Connections) {
          const caseName = `${tls ? 'h2 (TLS)' : 'h2c'} GET ${body.label}, ${connections} conn × ${s.h2Streams} streams`;
          const measure = async (r: Row): Promise<H2loadResult & Costed> => {
            const edge = tls ? r.at.tls : r.at.h2c;
            const base = { host: edge.host, port: edge.port, tls, path: body.path, connections, streams: s.h2Streams, threads: s.threads };
            if (s.warmupSecs > 0) await h2load({ ...base, durationSecs: s.warmupSecs });
            const pids = { server: edge.serverPids(), client: edge.clientPids(), origin: group(origin.proc) };
            const before = cpuOf(pids);
            const res = await h2load({ ...base, durationSecs: s.durationSecs });
            return { ...res, cpuUs: perOp(before, cpuOf(pids), res.requests) };
          };
          const metrics = [
            { metric: 'req/s', higherIsBetter: true, value: (x: H2loadResult) => x.reqPerSec },
            { metric: 'p50 ms', higherIsBetter: false, value: (x: H2loadResult) => x.p50Ms },
            { metric: 'p99 ms', higherIsBetter: false, value: (x: H2loadResult) => x.p99Ms },
            ...(body.bytes >= MIB ? [{ metric: 'Gbit/s', higherIsBetter: true, value: (x: H2loadResult) => x.readBytesPerSec / GBIT }] : []),
            ...cpuMetrics<H2loadResult & Costed>('req'),
          ];
          measurements.push(...(await measureSubjects(s, ready, caseName, measure, metrics, (x) => (x.errors ? `${x.errors} errors (${x.errorDetail})` : undefined))));
        }
      }
    }

    const grpc = await measureGrpc(ctx, h2cBurrow && ready.some((r) => r.name === 'burrow') ? h2cBurrow : undefined, info, procs);
    measurements.push(...grpc);

    const shown = ROWS.filter((r) => info[r] !== undefined);
    const table = [ratioTable(measurements, shown, [{ over: 'burrow', under: 'direct' }, { over: 'burrow', under: 'nginx-proxy' }]), '', ...verdicts(measurements)].join('\n');
    return {
      measurements,
      table,
      tableNote: '↑ higher is better, ↓ lower is better. Ratios divide the left row\'s figure by the right one\'s. CPU µs are per request (h2load), per call (unary), per round trip (ping-pong) or per message (download).',
      targets: info,
      notMeasured: [
        'gRPC over TLS: the gRPC rows use h2c (the TLS handshake is in the h2load rows); nginx as a gRPC proxy (grpc_pass) is not a row: the issue compares burrow with direct for gRPC',
        'the load tools\' own CPU for h2load (a C program like wrk, not in the rows); the gRPC caller\'s is its own process.cpuUsage() over its window',
        'request bodies over HTTP/2 beyond the gRPC messages: h2load sends GETs',
      ],
      settings: {
        origin: 'nginx on 127.0.0.1 (1 worker, sendfile, keepalive_requests unlimited), HTTP/1.1, h2 by ALPN (TLS) and h2c, on three ports',
        h2load: `-c <connections> -m ${s.h2Streams} -t ${s.threads} -D <duration> --connect-to 127.0.0.1:<port> --log-file (p50/p99 from it), --npn-list h2 over TLS; the warm-up a run of its own`,
        'h2 connections': s.h2Connections.join(', '),
        'gRPC concurrent calls (unary)': s.grpcCalls.join(', '),
        'gRPC streaming': `ping-pong: ${PING_PONG_STREAMS} bidi streams of ${GRPC_SMALL} B messages, each answered before the next; download: one server stream of ${GRPC_STREAM_MESSAGE / 1024} KiB messages, as fast as flow control lets it`,
        certificate: `one self-signed ECDSA P-256 certificate (openssl req -x509, localhost, *.localhost, *.${WILDCARD_DOMAIN}, 127.0.0.1) for nginx (origin and proxy) and the TLS burrowd; h2load does not verify it`,
      },
    };
  } finally {
    await Promise.all(burrows.map((b) => b.close()));
    await Promise.all(procs.map((p) => stop(p)));
  }
}

async function measureGrpc(ctx: Context, burrow: BurrowTarget | undefined, info: Record<string, TargetInfo>, procs: Proc[]): Promise<Measurement[]> {
  const s = ctx.settings;
  const echoJs = fileURLToPath(new URL('../grpc/echo-server.js', import.meta.url));
  const echo = start('grpc-echo', process.execPath, [echoJs]);
  procs.push(echo);
  const port = await waitForOutput(echo, 'stdout', (t) => /^(\d+)\n/.exec(t)?.[1], 15_000, 'the echo server\'s port');
  interface GrpcRow {
    name: RowName;
    address: string;
    authority?: string;
    serverPids(): number[];
    clientPids(): number[];
  }
  const rows: GrpcRow[] = [{ name: 'direct', address: `127.0.0.1:${port}`, serverPids: () => [], clientPids: () => [] }];
  if (burrow) {
    try {
      const ep = await burrow.exposeLocal(`h2c://127.0.0.1:${port}`);
      const row = { name: 'burrow' as const, address: `127.0.0.1:${ep.port}`, authority: ep.hostHeader!, serverPids: () => burrow.serverPids(), clientPids: () => burrow.clientPids() };
      await waitForUnary(row.address, row.authority, 15_000);
      rows.push(row);
    } catch (err) {
      const why = `gRPC through the tunnel did not work: ${(err as Error).message.split('\n')[0]}`;
      info.burrow = { ...info.burrow, unavailable: why };
      console.error(`bench: burrow (gRPC) not available: ${why}`);
    }
  }
  const callerJs = fileURLToPath(new URL('../grpc/caller.js', import.meta.url));
  type GrpcRun = CallerResult & Costed & { callerUs: number };
  const cases: { label: string; per: string; rate: string; opts: Pick<CallerOptions, 'mode' | 'concurrency' | 'size'> }[] = [
    ...s.grpcCalls.map((n) => ({ label: `gRPC unary ${GRPC_SMALL} B, ${n} concurrent call${n === 1 ? '' : 's'}`, per: 'call', rate: 'calls/s', opts: { mode: 'unary' as const, concurrency: n, size: GRPC_SMALL } })),
    { label: `gRPC ping-pong stream ${GRPC_SMALL} B, ${PING_PONG_STREAMS} streams`, per: 'msg', rate: 'round trips/s', opts: { mode: 'pingPong', concurrency: PING_PONG_STREAMS, size: GRPC_SMALL } },
    { label: `gRPC server stream ${GRPC_STREAM_MESSAGE / 1024} KiB messages, 1 stream`, per: 'msg', rate: 'messages/s', opts: { mode: 'download', concurrency: 1, size: GRPC_STREAM_MESSAGE } },
  ];
  const out: Measurement[] = [];
  for (const c of cases) {
    const measure = async (r: GrpcRow): Promise<GrpcRun> => {
      // The caller reads these processes' CPU at the edges of its own measured window.
      const cpuOf = { server: r.serverPids(), client: r.clientPids(), origin: [echo.pid] };
      const opts: CallerOptions = { ...c.opts, address: r.address, authority: r.authority, warmupSecs: s.warmupSecs, durationSecs: s.durationSecs, cpuOf };
      const res = await run('grpc-caller', process.execPath, [callerJs, JSON.stringify(opts)], (s.warmupSecs + s.durationSecs + 30) * 1000);
      const line = res.stdout.trim().split('\n').pop() ?? '';
      if (res.code !== 0 || !line.startsWith('{')) throw new Error(`the gRPC caller exited with ${res.code}: ${res.stderr.trim().split('\n').slice(-3).join(' / ')}`);
      const x = JSON.parse(line) as CallerResult;
      const perOpOf = (us: number) => (x.ops && Number.isFinite(us) ? us / x.ops : NaN);
      return { ...x, cpuUs: { server: perOpOf(x.cpuUs.server), client: perOpOf(x.cpuUs.client), origin: perOpOf(x.cpuUs.origin) }, callerUs: perOpOf(x.cpuUserUs + x.cpuSystemUs) };
    };
    const metrics = [
      c.opts.mode === 'download'
        ? { metric: 'MiB/s', higherIsBetter: true, value: (x: GrpcRun) => x.bytesPerSec / MIB }
        : { metric: c.rate, higherIsBetter: true, value: (x: GrpcRun) => x.opsPerSec },
      { metric: c.opts.mode === 'download' ? 'message age p50 ms' : 'p50 ms', higherIsBetter: false, value: (x: GrpcRun) => x.p50Ms },
      { metric: c.opts.mode === 'download' ? 'message age p99 ms' : 'p99 ms', higherIsBetter: false, value: (x: GrpcRun) => x.p99Ms },
      ...cpuMetrics<GrpcRun>(c.per),
      { metric: `caller CPU µs/${c.per}`, higherIsBetter: false, value: (x: GrpcRun) => x.callerUs },
    ];
    out.push(...(await measureSubjects(s, rows, c.label, measure, metrics, (x) => (x.errors ? `${x.errors} failed calls (${x.errorDetail})` : undefined))));
  }
  return out;
}

/** One unary call through `address` naming `authority`, retried until it answers (within the deadline). */
async function waitForUnary(address: string, authority: string | undefined, timeoutMs: number): Promise<void> {
  const client = benchClient(address, authority);
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const err = await new Promise<Error | null>((resolve) =>
        client.unary(Buffer.from('ready?'), new grpc.Metadata(), { deadline: Date.now() + 5_000 }, (e, res) => resolve(e ?? (res?.toString() === 'ready?' ? null : new Error('the echo differs')))),
      );
      if (!err) return;
      if (Date.now() > deadline) throw err;
      await sleep(100);
    }
  } finally {
    client.close();
  }
}

/** CPU µs so far of each part's processes; NaN for a part the row does not have. */
function cpuOf(pids: Record<Part, number[]>): Record<Part, number> {
  const of = (list: number[]) => {
    const c = cpuSplitMicros(list);
    return list.length ? c.user + c.system : NaN;
  };
  return { server: of(pids.server), client: of(pids.client), origin: of(pids.origin) };
}

function perOp(before: Record<Part, number>, after: Record<Part, number>, ops: number): Record<Part, number> {
  return Object.fromEntries(PARTS.map((p) => [p, ops ? (after[p] - before[p]) / ops : NaN])) as Record<Part, number>;
}

/** CPU rows: each part, and their sum (what the path cost besides the load tool). */
function cpuMetrics<R extends Costed>(per: string) {
  return [
    ...PARTS.map((p) => ({ metric: `${p} CPU µs/${per}`, higherIsBetter: false, value: (x: R) => x.cpuUs[p] })),
    {
      metric: `total CPU µs/${per}`,
      higherIsBetter: false,
      value: (x: R) => {
        const known = PARTS.map((p) => x.cpuUs[p]).filter(Number.isFinite);
        return known.length ? known.reduce((a, b) => a + b, 0) : NaN;
      },
    },
  ];
}

/** The targets against this run's figures: a line per case they apply to. */
function verdicts(measurements: Measurement[]): string[] {
  const lines: string[] = [];
  const check = (m: Measurement, under: RowName, target: number): void => {
    const over = m.values.burrow;
    const base = m.values[under];
    const r = over !== undefined && base !== undefined && base > 0 ? over / base : NaN;
    const verdict = Number.isFinite(r) ? `${r.toFixed(2)}× — ${r >= target ? 'met' : 'missed'}` : 'not measured';
    lines.push(`- ${m.case}, ${m.metric}: burrow ≥ ${target.toFixed(1)}× ${under === 'direct' ? 'direct' : 'the nginx proxy'}: ${verdict}`);
  };
  for (const m of measurements) {
    const first = measurements.find((x) => x.case === m.case) === m;
    if (!first) continue;
    if (m.case.startsWith('h2')) check(m, 'nginx-proxy', TARGET_VS_NGINX_PROXY);
    else if (m.case.startsWith('gRPC unary') && m.case.includes(`, ${TARGET_UNARY_AT_CALLS} concurrent`)) check(m, 'direct', TARGET_UNARY_VS_DIRECT);
    else if (m.case.startsWith('gRPC') && m.case.includes('stream')) check(m, 'direct', TARGET_STREAM_VS_DIRECT);
  }
  return lines.length ? ["### The issue's targets (#33)", '', ...lines] : [];
}
