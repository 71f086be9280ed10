// Head-of-line blocking: latency of small requests while a bulk download shares the tunnel.
// Per target, one tunnel carries both: a wrk connection fetching /small back to back (its
// p50/p99 is the figure) and a second wrk connection downloading 64 MiB bodies back to back.
// burrow multiplexes both over one control WebSocket, ssh -R over one SSH connection; direct
// has no shared hop, so its figure shows what the shared cores alone cost; node-proxy shares
// one Node event loop but no connection (each visitor connection gets its own upstream one).
import { startOrigin, PATHS } from '../lib/origin.js';
import { wrk, type WrkResult } from '../lib/wrk.js';
import { stop, sleep } from '../lib/procs.js';
import { measureEach, type Context, type Scenario, type ScenarioOutput } from '../lib/context.js';
import type { Measurement } from '../lib/report.js';
import { exposeAll } from './http.js';

const GBIT = 1e9 / 8;
const BULK_LEAD_SECS = 1;

interface HolResult {
  small: WrkResult;
  bulk: WrkResult | null;
}

export const holScenario: Scenario = {
  name: 'hol',
  summary: 'latency of small requests alone and while a bulk download shares the tunnel',
  required: ['wrk', 'ssh', 'sshd', 'ssh-keygen'],
  optional: ['nginx'],
  httpOnlyTargets: true,
  async run(ctx: Context): Promise<ScenarioOutput> {
    const s = ctx.settings;
    const origin = await startOrigin(s.origin);
    try {
      const endpoints = await exposeAll(ctx, origin);
      const measurements: Measurement[] = [];
      const small = (ep: ReturnType<typeof endpoints.get>, secs: number) =>
        wrk({ endpoint: ep!, path: PATHS.small.path, connections: 1, threads: 1, durationSecs: secs });
      const latency = [
        { metric: 'p50 ms', higherIsBetter: false, value: (r: HolResult) => r.small.p50Ms },
        { metric: 'p99 ms', higherIsBetter: false, value: (r: HolResult) => r.small.p99Ms },
        { metric: 'req/s', higherIsBetter: true, value: (r: HolResult) => r.small.reqPerSec },
      ];
      const errorsOf = (r: HolResult) =>
        [r.small.errors ? `small: ${r.small.errorDetail}` : '', r.bulk?.errors ? `bulk: ${r.bulk.errorDetail}` : '']
          .filter(Boolean)
          .join('; ') || undefined;

      measurements.push(
        ...(await measureEach(
          ctx,
          'GET 14 B, 1 conn, tunnel otherwise idle',
          async (t) => {
            if (s.warmupSecs > 0) await small(endpoints.get(t), s.warmupSecs);
            return { small: await small(endpoints.get(t), s.durationSecs), bulk: null };
          },
          latency,
          errorsOf,
        )),
      );
      measurements.push(
        ...(await measureEach(
          ctx,
          'GET 14 B, 1 conn, while 1 conn downloads 64 MiB bodies on the same tunnel',
          async (t) => {
            const ep = endpoints.get(t);
            // The bulk download starts first and outlasts the measured window on both ends.
            const bulk = wrk({
              endpoint: ep!,
              path: PATHS.big.path,
              connections: 1,
              threads: 1,
              durationSecs: s.durationSecs + 2 * BULK_LEAD_SECS,
              timeoutSecs: 30,
            });
            await sleep(BULK_LEAD_SECS * 1000);
            const r = await small(ep, s.durationSecs);
            return { small: r, bulk: await bulk };
          },
          [
            ...latency,
            { metric: 'bulk Gbit/s', higherIsBetter: true, value: (r: HolResult) => (r.bulk?.readBytesPerSec ?? NaN) / GBIT },
          ],
          errorsOf,
        )),
      );
      return {
        measurements,
        notMeasured: ['bulk uploads sharing the tunnel (wrk only downloads); the download direction is the one where a busy tunnel queues responses'],
        settings: { origin: `${origin.kind} on 127.0.0.1`, bulk: `wrk -c1 GET ${PATHS.big.path} (${PATHS.big.bytes >> 20} MiB per request), started ${BULK_LEAD_SECS} s before the measured window` },
      };
    } finally {
      await Promise.all(ctx.targets.map((t) => t.closeTunnels()));
      await stop(origin.proc);
    }
  },
};
