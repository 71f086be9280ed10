// HTTP through each target: requests per second and p50/p99 latency with wrk at each keep-alive
// connection count, for a small response (14 B) and a 1 MiB response.
import { startOrigin, PATHS } from '../lib/origin.js';
import { waitForHttp } from '../lib/net.js';
import { wrk, type WrkResult } from '../lib/wrk.js';
import { stop } from '../lib/procs.js';
import { dropTarget, measureEach, type Context, type Scenario, type ScenarioOutput } from '../lib/context.js';
import type { Endpoint, Target } from '../targets/target.js';
import type { Measurement } from '../lib/report.js';

const GBIT = 1e9 / 8;

export const httpScenario: Scenario = {
  name: 'http',
  summary: 'req/s and p50/p99 latency (wrk) at each connection count, 14 B and 1 MiB responses',
  required: ['wrk', 'ssh', 'sshd', 'ssh-keygen'],
  optional: ['nginx'],
  async run(ctx: Context): Promise<ScenarioOutput> {
    const { settings: s } = ctx;
    const origin = await startOrigin(s.origin);
    try {
      const endpoints = await exposeAll(ctx, origin.port);
      const measurements: Measurement[] = [];
      const bodies = [
        { label: 'GET 14 B', ...PATHS.small },
        { label: 'GET 1 MiB', ...PATHS['1m'] },
      ];
      for (const body of bodies) {
        for (const connections of s.connections) {
          const run = async (t: Target): Promise<WrkResult> => {
            const base = { endpoint: endpoints.get(t)!, path: body.path, connections, threads: s.threads };
            if (s.warmupSecs > 0) await wrk({ ...base, durationSecs: s.warmupSecs });
            return wrk({ ...base, durationSecs: s.durationSecs });
          };
          const metrics = [
            { metric: 'req/s', higherIsBetter: true, value: (r: WrkResult) => r.reqPerSec },
            { metric: 'p50 ms', higherIsBetter: false, value: (r: WrkResult) => r.p50Ms },
            { metric: 'p99 ms', higherIsBetter: false, value: (r: WrkResult) => r.p99Ms },
          ];
          if (body.bytes >= 1 << 20) {
            metrics.push({ metric: 'Gbit/s', higherIsBetter: true, value: (r: WrkResult) => r.readBytesPerSec / GBIT });
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
        ],
        settings: { origin: `${origin.kind} on 127.0.0.1 (${origin.kind === 'nginx' ? 'nginx-light, 1 worker, sendfile, keepalive_requests unlimited' : 'bench/origin/node-origin.ts'})` },
      };
    } finally {
      await Promise.all(ctx.targets.map((t) => t.closeTunnels()));
      await stop(origin.proc);
    }
  },
};

/** Exposes the origin through every target and checks both bodies arrive whole. */
export async function exposeAll(ctx: Context, originPort: number): Promise<Map<Target, Endpoint>> {
  const endpoints = new Map<Target, Endpoint>();
  for (const t of [...ctx.targets]) {
    try {
      const ep = await t.expose('http', originPort);
      await waitForHttp(ep.port, PATHS.small.path, ep.hostHeader, PATHS.small.bytes, 15_000, `${t.name} tunnel`);
      await waitForHttp(ep.port, PATHS['1m'].path, ep.hostHeader, PATHS['1m'].bytes, 15_000, `${t.name} tunnel`);
      endpoints.set(t, ep);
    } catch (err) {
      dropTarget(ctx, t, `HTTP tunnel did not work: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  return endpoints;
}
