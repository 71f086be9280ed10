// TCP bulk throughput through each target, both directions, with iperf3 (one stream).
//   "to origin":   iperf3 -c at the public side sends, the iperf3 server (the origin) receives
//   "from origin": iperf3 -c -R, the origin sends toward the public side
import { start, stop, run, sleep } from '../lib/procs.js';
import { freePort, waitForPort, LOOPBACK } from '../lib/net.js';
import { dropTarget, measureEach, type Context, type Scenario, type ScenarioOutput } from '../lib/context.js';
import type { Endpoint, Target } from '../targets/target.js';
import type { Measurement } from '../lib/report.js';

const CHECK_ATTEMPTS = 3;

interface IperfResult {
  gbitPerSec: number;
  retransmits: number;
  raw: unknown;
}

async function iperf(ep: Endpoint, reverse: boolean, durationSecs: number, omitSecs: number): Promise<IperfResult> {
  const args = ['-c', LOOPBACK, '-p', String(ep.port), '-t', String(durationSecs), '-O', String(omitSecs), '-J'];
  if (reverse) args.push('-R');
  const res = await run('iperf3-client', 'iperf3', args, (durationSecs + omitSecs + 30) * 1000);
  let json: {
    error?: string;
    end?: { sum_received?: { bits_per_second: number }; sum_sent?: { retransmits?: number } };
  };
  try {
    json = JSON.parse(res.stdout);
  } catch {
    throw new Error(`iperf3 printed no JSON (exit ${res.code}): ${res.stderr || res.stdout}`);
  }
  if (json.error) throw new Error(`iperf3: ${json.error}`);
  const bps = json.end?.sum_received?.bits_per_second;
  if (bps === undefined) throw new Error('iperf3: no end.sum_received in its JSON');
  return { gbitPerSec: bps / 1e9, retransmits: json.end?.sum_sent?.retransmits ?? 0, raw: json.end };
}

export const tcpScenario: Scenario = {
  name: 'tcp',
  summary: 'bulk TCP throughput both directions (iperf3, 1 stream)',
  required: ['iperf3', 'ssh', 'sshd', 'ssh-keygen'],
  optional: [],
  async run(ctx: Context): Promise<ScenarioOutput> {
    const s = ctx.settings;
    const port = await freePort();
    const server = start('iperf3-server', 'iperf3', ['-s', '-B', LOOPBACK, '-p', String(port)]);
    try {
      await waitForPort(port, 10_000, 'iperf3 server');
      const endpoints = new Map<Target, Endpoint>();
      for (const t of [...ctx.targets]) {
        try {
          const ep = await t.expose('tcp', port);
          // A one-second check that iperf3's control and data connections both pass. No
          // plain connect probe first: iperf3 -s serves one test at a time and would take a
          // probe that reaches it late through a tunnel for a client, refusing the next one.
          for (let attempt = 1; ; attempt++) {
            try {
              await iperf(ep, false, 1, 0);
              break;
            } catch (err) {
              if (attempt === CHECK_ATTEMPTS) throw err;
              await sleep(1_000);
            }
          }
          endpoints.set(t, ep);
        } catch (err) {
          dropTarget(ctx, t, `TCP tunnel did not work: ${(err as Error).message.split('\n')[0]}`);
        }
      }
      const measurements: Measurement[] = [];
      for (const [label, reverse] of [
        ['to origin (iperf3 -c)', false],
        ['from origin (iperf3 -c -R)', true],
      ] as const) {
        measurements.push(
          ...(await measureEach(
            ctx,
            label,
            (t) => iperf(endpoints.get(t)!, reverse, s.durationSecs, s.warmupSecs),
            [{ metric: 'Gbit/s', higherIsBetter: true, value: (r) => r.gbitPerSec }],
          )),
        );
      }
      for (const m of measurements) {
        // Keep the JSON's raw section readable: iperf3's end summary only.
        if (m.raw) m.raw = Object.fromEntries(Object.entries(m.raw).map(([k, v]) => [k, (v as IperfResult).raw]));
      }
      return {
        measurements,
        notMeasured: ['parallel streams (iperf3 -P): one stream is the case a single tunnelled connection sees'],
        settings: { iperf3: `one stream, ${s.durationSecs} s measured after ${s.warmupSecs} s omitted (-O)` },
      };
    } finally {
      await Promise.all(ctx.targets.map((t) => t.closeTunnels()));
      await stop(server);
    }
  },
};
