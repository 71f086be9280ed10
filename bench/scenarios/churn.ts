// Churn: does the server give memory back once its peers have left? For `--churn-secs`
// (default 60) each target runs cycles of: open TUNNELS_PER_CYCLE tunnels (burrow: `burrow
// http` processes; ssh: `ssh -R` processes), load each for a moment (1 MiB and 14 B bodies),
// a burst of requests for an unknown tunnel (burrow: 404s), close the tunnels. The server's
// memory (burrowd: the process with all its threads by RSS, its PostgreSQL children by PSS;
// sshd: the listener by RSS, every session child by PSS: lib/rss.ts serverKiB) is sampled
// before, throughout (peak) and `--after-secs` (default 60) after the last cycle.
// Target: after within 20 % of before.
import { startOrigin, PATHS } from '../lib/origin.js';
import { wrk } from '../lib/wrk.js';
import { waitForHttp } from '../lib/net.js';
import { serverKiB, settledServerKiB } from '../lib/rss.js';
import { stop, sleep } from '../lib/procs.js';
import { measureEach, type Context, type Scenario, type ScenarioOutput } from '../lib/context.js';
import type { Target } from '../targets/target.js';

const TUNNELS_PER_CYCLE = 2;
const LOAD_SECS = 1;
const RSS_SAMPLE_MS = 250;
/** Host of a tunnel nobody registered: burrowd answers 404 (problem+json). */
const UNKNOWN_HOST = 'no-such-tunnel.localhost';

interface ChurnResult {
  beforeMiB: number;
  peakMiB: number;
  afterMiB: number;
  cycles: number;
  requests: number;
  unknownRequests: number;
  errors: number;
}

const MiB = (kib: number): number => kib / 1024;

/** One cycle: open, load, probe an unknown tunnel, close. Returns request counts. */
async function cycle(t: Target, originPort: number): Promise<{ requests: number; unknown: number; errors: number }> {
  const eps = await Promise.all(Array.from({ length: TUNNELS_PER_CYCLE }, () => t.expose('http', originPort)));
  let requests = 0;
  let unknown = 0;
  let errors = 0;
  try {
    await Promise.all(eps.map((ep) => waitForHttp(ep, PATHS.small.path, PATHS.small.bytes, 15_000, `${t.name} tunnel`)));
    const loads = eps.flatMap((ep) => [
      wrk({ endpoint: ep, path: PATHS['1m'].path, connections: 4, threads: 1, durationSecs: LOAD_SECS }),
      wrk({ endpoint: ep, path: PATHS.small.path, connections: 16, threads: 1, durationSecs: LOAD_SECS }),
    ]);
    for (const r of await Promise.all(loads)) {
      requests += r.requests;
      errors += r.errors;
    }
    // An unknown tunnel only exists for burrow: ssh -R has no name routing (a port nobody
    // forwards is refused by the kernel, sshd never sees it).
    const ep = eps[0]!;
    if (ep.hostHeader) {
      const r = await wrk({ endpoint: { port: ep.port, hostHeader: UNKNOWN_HOST }, path: '/', connections: 32, threads: 1, durationSecs: LOAD_SECS });
      unknown += r.requests;
    }
  } finally {
    await t.closeTunnels();
  }
  return { requests, unknown, errors };
}

export const churnScenario: Scenario = {
  name: 'churn',
  summary: 'server RSS before, at the peak and after cycles of connect / load / disconnect (+ 404 bursts)',
  required: ['wrk', 'ssh', 'sshd', 'ssh-keygen'],
  optional: ['nginx'],
  async run(ctx: Context): Promise<ScenarioOutput> {
    const s = ctx.settings;
    const origin = await startOrigin(s.origin);
    // direct has no server whose memory could be kept.
    const withServer = { ...ctx, targets: ctx.targets.filter((t) => t.name !== 'direct') };
    try {
      const measurements = await measureEach<ChurnResult>(
        withServer,
        `churn ${s.churnSecs} s (${TUNNELS_PER_CYCLE} tunnels per cycle), RSS ${s.afterSecs} s later`,
        async (t) => {
          const beforeKiB = await settledServerKiB(() => t.serverPids());
          let peakKiB = beforeKiB;
          const sampler = setInterval(() => (peakKiB = Math.max(peakKiB, serverKiB(t.serverPids()))), RSS_SAMPLE_MS);
          let cycles = 0;
          let requests = 0;
          let unknownRequests = 0;
          let errors = 0;
          try {
            for (const until = Date.now() + s.churnSecs * 1000; Date.now() < until; cycles++) {
              const c = await cycle(t, origin.port);
              requests += c.requests;
              unknownRequests += c.unknown;
              errors += c.errors;
            }
          } finally {
            clearInterval(sampler);
          }
          await sleep(s.afterSecs * 1000);
          const afterKiB = serverKiB(t.serverPids());
          return { beforeMiB: MiB(beforeKiB), peakMiB: MiB(peakKiB), afterMiB: MiB(afterKiB), cycles, requests, unknownRequests, errors };
        },
        [
          { metric: 'RSS after − before, % of before', higherIsBetter: false, value: (r) => (100 * (r.afterMiB - r.beforeMiB)) / r.beforeMiB },
          { metric: 'RSS before, MiB', higherIsBetter: false, value: (r) => r.beforeMiB },
          { metric: 'RSS peak, MiB', higherIsBetter: false, value: (r) => r.peakMiB },
          { metric: `RSS ${s.afterSecs} s after, MiB`, higherIsBetter: false, value: (r) => r.afterMiB },
          { metric: 'cycles', higherIsBetter: true, value: (r) => r.cycles },
          { metric: 'requests through tunnels', higherIsBetter: true, value: (r) => r.requests },
          { metric: 'requests to an unknown tunnel', higherIsBetter: true, value: (r) => r.unknownRequests },
        ],
        (r) => (r.errors ? `${r.errors} wrk errors (non-2xx or socket) through tunnels` : undefined),
      );
      return {
        measurements,
        notMeasured: [
          'direct: no server in between, nothing to keep memory.',
          'ssh: no requests to an unknown tunnel (ssh -R has no name routing; the kernel refuses a port nobody forwards).',
        ],
        settings: {
          'churn seconds': s.churnSecs,
          'RSS after, seconds after the last cycle': s.afterSecs,
          'RSS of': 'the server process by VmRSS, its children (burrowd: the embedded PostgreSQL; sshd: sessions) by PSS, so shared buffers count once',
          'cycle': `${TUNNELS_PER_CYCLE} tunnels opened; per tunnel wrk ${LOAD_SECS} s of GET 1 MiB (4 conns) and GET 14 B (16 conns) at once; burrow: wrk ${LOAD_SECS} s, 32 conns, Host ${UNKNOWN_HOST} (404); tunnels closed`,
        },
      };
    } finally {
      await stop(origin.proc);
    }
  },
};
