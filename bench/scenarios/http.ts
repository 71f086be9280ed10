// HTTP through each target: requests per second and p50/p99 latency with wrk at each keep-alive
// connection count, for a small response (14 B) and a 1 MiB response. The https scenario is the
// same with every visitor on HTTPS (the certificate is lib/tls.ts's):
//
//   direct      wrk ──TLS──▶ nginx's TLS listener
//   burrow      wrk ──TLS──▶ burrowd --tls-cert ══ wss ══▶ burrow CLI ──HTTP──▶ nginx (plain)
//   node-proxy  wrk ──TLS──▶ node-proxy (https.createServer, same certificate) ──HTTP──▶ nginx (plain)
//   ssh -R      wrk ──TLS (carried as bytes by ssh)──▶ nginx's TLS listener
import { startOrigin, PATHS, type Origin } from '../lib/origin.js';
import { waitForHttp } from '../lib/net.js';
import { wrk, type WrkResult } from '../lib/wrk.js';
import { stop } from '../lib/procs.js';
import { benchCertificate } from '../lib/tls.js';
import { dropTarget, measureEach, type Context, type Scenario, type ScenarioOutput } from '../lib/context.js';
import type { Endpoint, Target } from '../targets/target.js';
import type { Measurement } from '../lib/report.js';
import { cpuSplitMicros } from '../lib/cpu.js';
import { mark, perfControl, windowFigures, type Probed } from '../lib/probes.js';

/** What one side (server or client) of a target spent per request during a wrk run. */
interface SideFigures {
  userUs: number;
  systemUs: number;
  syscalls: number;
  /** GC pause time as a share of the side's CPU time, % */
  gcPct: number;
}

/** A wrk run, and what the target's server and client side spent per request meanwhile. */
interface HttpRun extends WrkResult {
  server: SideFigures;
  client: SideFigures;
}

/** --perf: seconds of perf record per profiled target, in a wrk run of its own after the measured one. */
const PERF_SECS = 5;
/** Targets whose processes --perf records: the Node tunnels. */
const PERF_TARGETS = new Set(['burrow', 'burrow1', 'burrow-mesh', 'relay']);

const GBIT = 1e9 / 8;

export const httpScenario: Scenario = {
  name: 'http',
  summary: 'req/s and p50/p99 latency (wrk) at each connection count, 14 B and 1 MiB responses',
  required: ['wrk', 'ssh', 'sshd', 'ssh-keygen'],
  optional: ['nginx'],
  httpOnlyTargets: true,
  run: (ctx) => runHttp(ctx, false),
};

export const httpsScenario: Scenario = {
  name: 'https',
  summary: 'the http scenario with visitors on HTTPS (nginx with TLS; burrowd --tls-cert; node-proxy with TLS; ssh -R to nginx with TLS)',
  required: ['wrk', 'ssh', 'sshd', 'ssh-keygen', 'nginx', 'openssl'],
  optional: [],
  tls: true,
  httpOnlyTargets: true,
  run: (ctx) => runHttp(ctx, true),
};

async function runHttp(ctx: Context, tls: boolean): Promise<ScenarioOutput> {
  const { settings: s } = ctx;
  const origin = await startOrigin(s.origin, tls ? await benchCertificate() : undefined);
  try {
    const negotiated: Record<string, string> = {};
    const endpoints = await exposeAll(ctx, origin, tls, negotiated);
    const measurements: Measurement[] = [];
    const scheme = tls ? 'HTTPS ' : '';
    const bodies = [
      { label: `${scheme}GET 14 B`, ...PATHS.small },
      { label: `${scheme}GET 1 MiB`, ...PATHS['1m'] },
    ];
    // --perf profiles one case: 14 B answers at the first connection count ≥ 64 (else the largest)
    const perfConnections = s.connections.find((c) => c >= 64) ?? Math.max(...s.connections);
    const profiled = new Set<string>();
    for (const body of bodies) {
      for (const connections of s.connections) {
        const run = async (t: Target): Promise<HttpRun> => {
          const base = { endpoint: endpoints.get(t)!, path: body.path, connections, threads: s.threads };
          if (s.warmupSecs > 0) await wrk({ ...base, durationSecs: s.warmupSecs });
          const probes = t.probes?.() ?? { server: [], client: [] };
          const marks = { server: mark(probes.server), client: mark(probes.client) };
          const before = { server: cpuSplitMicros(t.serverPids()), client: cpuSplitMicros(t.clientPids()) };
          const r = await wrk({ ...base, durationSecs: s.durationSecs });
          // Where the CPU of a request goes (burrowd vs the burrow CLI; sshd vs ssh; node-proxy
          // has a server side only): direct has neither.
          const side = (pids: number[], from: { user: number; system: number }, probed: Probed[], at: Map<string, number>): SideFigures => {
            if (!pids.length || !r.requests) return { userUs: NaN, systemUs: NaN, syscalls: NaN, gcPct: NaN };
            const now = cpuSplitMicros(pids);
            const user = now.user - from.user;
            const system = now.system - from.system;
            const w = windowFigures(probed, at);
            return { userUs: user / r.requests, systemUs: system / r.requests, syscalls: w.syscalls / r.requests, gcPct: (100 * w.gcMs * 1000) / (user + system) };
          };
          const out = { ...r, server: side(t.serverPids(), before.server, probes.server, marks.server), client: side(t.clientPids(), before.client, probes.client, marks.client) };
          if (s.perfDir && PERF_TARGETS.has(t.name) && body === bodies[0] && connections === perfConnections && !profiled.has(t.name)) {
            profiled.add(t.name);
            const all = [...probes.server, ...probes.client];
            process.stderr.write(`(perf record ${PERF_SECS} s) `);
            perfControl(all, 'enable');
            try {
              await wrk({ ...base, durationSecs: PERF_SECS });
            } finally {
              perfControl(all, 'disable');
            }
          }
          return out;
        };
        const metrics = [
          { metric: 'req/s', higherIsBetter: true, value: (r: HttpRun) => r.reqPerSec },
          { metric: 'p50 ms', higherIsBetter: false, value: (r: HttpRun) => r.p50Ms },
          { metric: 'p99 ms', higherIsBetter: false, value: (r: HttpRun) => r.p99Ms },
        ];
        if (body.bytes >= 1 << 20) {
          metrics.push({ metric: 'Gbit/s', higherIsBetter: true, value: (r: HttpRun) => r.readBytesPerSec / GBIT });
        }
        for (const which of ['server', 'client'] as const) {
          metrics.push(
            { metric: `${which} CPU µs/req`, higherIsBetter: false, value: (r: HttpRun) => r[which].userUs + r[which].systemUs },
            { metric: `${which} user µs/req`, higherIsBetter: false, value: (r: HttpRun) => r[which].userUs },
            { metric: `${which} system µs/req`, higherIsBetter: false, value: (r: HttpRun) => r[which].systemUs },
            { metric: `${which} syscalls/req`, higherIsBetter: false, value: (r: HttpRun) => r[which].syscalls },
            { metric: `${which} GC % of CPU`, higherIsBetter: false, value: (r: HttpRun) => r[which].gcPct },
          );
        }
        measurements.push(
          ...(await measureEach(ctx, `${body.label}, ${connections} conn`, run, metrics, (r) =>
            r.errors > 0 ? `${r.errors} errors (${r.errorDetail})` : undefined,
          )),
        );
      }
    }
    return {
      measurements,
      notMeasured: [
        'request bodies (uploads) over HTTP: wrk sends GETs; upload throughput is covered by the tcp scenario (iperf3 toward the origin)',
        ...(probeNotes(ctx)),
      ],
      settings: {
        origin: `${origin.kind} on 127.0.0.1 (${origin.kind === 'nginx' ? 'nginx-light, 1 worker, sendfile, keepalive_requests unlimited' : 'bench/origin/node-origin.ts'})`,
        ...(tls
          ? {
              certificate: 'one self-signed ECDSA P-256 certificate (openssl req -x509, localhost, *.localhost, 127.0.0.1) for nginx\'s TLS listener, burrowd --tls-cert and node-proxy; wrk does not verify it',
              'TLS negotiated (probe with Node\'s OpenSSL client before the runs)': negotiated,
            }
          : {}),
      },
    };
  } finally {
    await Promise.all(ctx.targets.map((t) => t.closeTunnels()));
    await stop(origin.proc);
  }
}

/**
 * Exposes the origin through every target and checks both bodies arrive whole. With `tls`,
 * every endpoint is HTTPS: a target that terminates TLS (burrowd, node-proxy) forwards to the
 * plain origin, the others to nginx's TLS listener; each target's negotiated protocol and
 * cipher go into `negotiated`.
 */
export async function exposeAll(ctx: Context, origin: Origin, tls = false, negotiated: Record<string, string> = {}): Promise<Map<Target, Endpoint>> {
  const endpoints = new Map<Target, Endpoint>();
  for (const t of [...ctx.targets]) {
    try {
      const endToEnd = tls && !t.terminatesTls;
      if (endToEnd && origin.tlsPort === undefined) throw new Error('the origin has no TLS listener');
      const exposed = await t.expose('http', endToEnd ? origin.tlsPort! : origin.port);
      const ep = endToEnd ? { ...exposed, tls: true } : exposed;
      if (tls && !ep.tls) throw new Error('the tunnel is not HTTPS');
      const cipher = await waitForHttp(ep, PATHS.small.path, PATHS.small.bytes, 15_000, `${t.name} tunnel`);
      await waitForHttp(ep, PATHS['1m'].path, PATHS['1m'].bytes, 15_000, `${t.name} tunnel`);
      if (cipher) negotiated[t.name] = cipher;
      endpoints.set(t, ep);
    } catch (err) {
      dropTarget(ctx, t, `HTTP tunnel did not work: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  return endpoints;
}

/** What the per-process rows could not count in this run, and how they count what they do. */
function probeNotes(ctx: Context): string[] {
  const notes = [
    'CPU µs/req: utime and stime of every thread of each process (and its reaped children) from /proc/<pid>/stat, in 10 ms ticks, over the measured run; GC % of CPU: the pause times node --trace-gc prints (scavenges, mark-compact pauses, incremental marking steps, on every JS thread) over that CPU time; concurrent marking and sweeping on V8\'s helper threads are in the CPU but not in the GC figure; the pauses are wall time, so on a busy machine (a thread descheduled inside a pause) the share reads high, past 100 % at worst',
  ];
  if (!ctx.settings.probes?.syscalls) notes.push('system calls: not counted (perf stat does not count raw_syscalls:sys_enter here)');
  else if (ctx.settings.perfDir) notes.push('system calls: not counted with --perf (the Node processes run under perf record instead of perf stat)');
  else notes.push('system calls: perf stat -I 100 -e raw_syscalls:sys_enter around each process of a target (it starts them: perf cannot attach to a running process on this VM; sshd with its session children, burrowd with its embedded PostgreSQL), summed over the 100 ms intervals written during the run (±100 ms at each end); GC % is n/a for ssh (not Node)');
  return notes;
}
