// Memory at rest: server RSS per idle tunnel, and per idle proxied TCP connection, at each
// count (default 1k then 10k, cumulative: the 10k figure is measured with the first 1k still
// open). Each part starts fresh server processes so memory retained by one part is not
// counted as free room by the next. Figures are (settled RSS − RSS before) / count.
//
//   tunnels:      burrow: N × TunnelClient (one control connection each) → burrowd
//                 ssh:    one ssh with N × -R → sshd session
//   connections:  N sockets from the harness → public port → tunnel → tcp-sink (holds them)
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { startOrigin } from '../lib/origin.js';
import { start, stop, waitForOutput, type Proc } from '../lib/procs.js';
import { LOOPBACK, waitForPort } from '../lib/net.js';
import { settledServerKiB, rssKiB } from '../lib/rss.js';
import { openTargets, type Context, type Scenario, type ScenarioOutput } from '../lib/context.js';
import type { Measurement } from '../lib/report.js';
import type { Target, TargetName } from '../targets/target.js';

/**
 * Connections opened at once: under every hop's accept backlog (sshd listens for forwards with
 * a backlog of 128), so no SYN is dropped and retried a second later.
 */
const CONNECT_BATCH = 64;
const CONNECT_TIMEOUT_MS = 10_000;
/**
 * Idle connections per TCP tunnel: burrow caps streams per control connection at 4096
 * (MAX_STREAMS_PER_CONNECTION in src/protocol/frames.ts), so 10k connections use 3 tunnels —
 * for every target alike.
 */
const CONNS_PER_TUNNEL = 4000;

interface Sample {
  /** Settled RSS of the server processes before any tunnel/connection, and at this count. */
  serverBaseKiB: number;
  serverKiB: number;
  /** The previous count's sample (cumulative counts), for the marginal cost. */
  prev: { count: number; serverKiB: number } | null;
  clientKiB: number;
}

type Table = Map<number, Partial<Record<TargetName, Sample>>>;

export const idleScenario: Scenario = {
  name: 'idle',
  summary: 'server RSS per idle tunnel and per idle proxied TCP connection (1k, 10k)',
  required: ['ssh', 'sshd', 'ssh-keygen'],
  optional: ['nginx'],
  opensOwnTargets: true,
  async run(ctx: Context): Promise<ScenarioOutput> {
    const counts = [...ctx.settings.idleCounts].sort((a, b) => a - b);
    const notes: Partial<Record<TargetName, string>> = {};
    const tunnels: Table = new Map(counts.map((c) => [c, {}]));
    const conns: Table = new Map(counts.map((c) => [c, {}]));

    // Part 1: idle tunnels.
    const origin = await startOrigin(ctx.settings.origin);
    try {
      await withFreshTargets(ctx, async (t) => {
        if (!t.openIdleTunnels) return;
        const base = await settledServerKiB(t.serverPids);
        let opened = 0;
        let prev: Sample['prev'] = null;
        for (const count of counts) {
          process.stderr.write(`bench: ${count} idle tunnels — ${t.name} … `);
          try {
            await t.openIdleTunnels(origin.port, count - opened);
            opened = count;
          } catch (err) {
            notes[t.name] = `${count} idle tunnels: ${(err as Error).message.split('\n')[0]}`;
            process.stderr.write(`failed: ${(err as Error).message}\n`);
            return;
          }
          const sample = await measure(t, base, prev);
          prev = { count, serverKiB: sample.serverKiB };
          tunnels.get(count)![t.name] = sample;
          process.stderr.write(`${perItem(sample, count).toFixed(1)} KiB per tunnel (server)\n`);
        }
      });
    } finally {
      await stop(origin.proc);
    }

    // Part 2: idle TCP connections through one TCP tunnel.
    const sinkJs = fileURLToPath(new URL('../origin/tcp-sink.js', import.meta.url));
    const sink = start('tcp-sink', process.execPath, [sinkJs]);
    try {
      const sinkPort = await waitForOutput(sink, 'stdout', (t) => (/^(\d+)\n/.exec(t) ? Number(/^(\d+)\n/.exec(t)![1]) : null), 10_000, 'the sink port');
      await withFreshTargets(ctx, async (t) => {
        const sockets: Socket[] = [];
        try {
          // All tunnels the largest count needs, opened before the baseline so their own
          // memory stays out of the per-connection figure.
          const ports: number[] = [];
          for (let i = 0; i < Math.ceil(counts[counts.length - 1]! / CONNS_PER_TUNNEL); i++) {
            const ep = await t.expose('tcp', sinkPort);
            await waitForPort(ep.port, 15_000, `${t.name} tcp tunnel`);
            ports.push(ep.port);
          }
          // waitForPort's probe connections reached the sink too; let them leave before the baseline.
          await waitForHeld(sink, 0);
          const base = await settledServerKiB(t.serverPids);
          let prev: Sample['prev'] = null;
          for (const count of counts) {
            process.stderr.write(`bench: ${count} idle TCP connections — ${t.name} … `);
            // Fill tunnel by tunnel, CONNS_PER_TUNNEL each.
            while (sockets.length < count) {
              const port = ports[Math.floor(sockets.length / CONNS_PER_TUNNEL)]!;
              const room = CONNS_PER_TUNNEL - (sockets.length % CONNS_PER_TUNNEL);
              await openSockets(port, Math.min(room, count - sockets.length), sockets);
            }
            // Every connection went all the way through the tunnel to the origin.
            await waitForHeld(sink, count);
            const sample = await measure(t, base, prev);
            prev = { count, serverKiB: sample.serverKiB };
            conns.get(count)![t.name] = sample;
            process.stderr.write(`${perItem(sample, count).toFixed(1)} KiB per connection (server)\n`);
          }
        } catch (err) {
          notes[t.name] = `${notes[t.name] ? `${notes[t.name]}; ` : ''}idle connections: ${(err as Error).message.split('\n')[0]}`;
          process.stderr.write(`failed: ${(err as Error).message}\n`);
        } finally {
          for (const s of sockets) s.destroy();
          await waitForHeld(sink, 0).catch(() => undefined);
        }
      });
    } finally {
      await stop(sink);
    }

    const measurements: Measurement[] = [];
    const rows = (table: Table, what: string, unit: string) => {
      for (const [count, byTarget] of table) {
        const entries = Object.entries(byTarget) as [TargetName, Sample][];
        const values = (f: (s: Sample) => number | null) =>
          Object.fromEntries(entries.flatMap(([k, v]) => (f(v) === null ? [] : [[k, f(v)!]])));
        const c = `${count} idle ${what}`;
        measurements.push(
          { case: c, metric: `server KiB per ${unit}`, higherIsBetter: false, values: values((s) => perItem(s, count)), raw: byTarget },
          { case: c, metric: `server KiB per ${unit}, marginal`, higherIsBetter: false, values: values((s) => (s.prev ? (s.serverKiB - s.prev.serverKiB) / (count - s.prev.count) : null)) },
          { case: c, metric: 'server RSS MiB total', higherIsBetter: false, values: values((s) => s.serverKiB / 1024) },
          { case: c, metric: `client KiB per ${unit}`, higherIsBetter: false, values: values((s) => s.clientKiB / count) },
        );
      }
    };
    rows(tunnels, 'tunnels', 'tunnel');
    rows(conns, 'TCP connections', 'connection');
    if (measurements[0]) measurements[0].notes = notes;
    return {
      measurements,
      notMeasured: [
        'direct: there is no tunnel server, so there is nothing to weigh',
        `counts above 10k: the file-descriptor hard limit here is 20000 and each idle connection holds one per process it crosses`,
        'kernel socket memory (not in RSS) — the same for every target',
        ...(ctx.settings.burrowDatabaseUrl
          ? []
          : [
              'burrow with the embedded database: PGlite lives in burrowd\'s process (~0.9 GB RSS) and its memory moves by more than the tunnels weigh (10k tunnels have measured as a negative figure); run with --database-url for figures that mean something',
            ]),
      ],
      settings: {
        method: '(settled server RSS − settled RSS before any tunnel) ÷ count; "marginal": (RSS at this count − RSS at the previous count) ÷ the difference, which leaves out start-up growth; counts are cumulative; fresh server processes for each part',
        'burrow tunnels': 'one TunnelClient (the CLI\'s library) per tunnel, each its own control connection, all in one client process (bench/targets/burrow-farm.ts)',
        'ssh tunnels': 'one ssh connection carrying N `-R 0:127.0.0.1:<origin>` forwards',
        connections: `TCP tunnels of at most ${CONNS_PER_TUNNEL} connections each (burrow allows 4096 streams per control connection), all opened before the baseline; the harness opens the sockets ${CONNECT_BATCH} at a time; each counted once the origin (bench/origin/tcp-sink.ts) holds it`,
      },
    };
  },
};

async function measure(t: Target, baseKiB: number, prev: Sample['prev']): Promise<Sample> {
  const serverKiB = await settledServerKiB(t.serverPids);
  // A figure from a dead server or dropped tunnels would look like a saving.
  if (t.serverPids().length === 0) throw new Error('the server process is gone');
  t.checkIdleTunnels?.();
  return {
    serverBaseKiB: baseKiB,
    serverKiB,
    prev,
    // Client processes only exist once tunnels are open, so their whole RSS is divided.
    clientKiB: rssKiB(t.clientPids()),
  };
}

function perItem(s: Sample, count: number): number {
  return (s.serverKiB - s.serverBaseKiB) / count;
}

/** Starts the tunnel targets (not direct) anew, runs fn for each, and closes them. */
async function withFreshTargets(ctx: Context, fn: (t: Target) => Promise<void>): Promise<void> {
  const settings = { ...ctx.settings, targets: ctx.settings.targets.filter((t) => t !== 'direct') };
  const { targets, info } = await openTargets(settings, ctx.repoRoot);
  Object.assign(ctx.info, info);
  try {
    for (const t of targets) await fn(t);
  } finally {
    await Promise.all(targets.map((t) => t.close()));
  }
}

function openOne(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: LOOPBACK, port });
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`connect to :${port} took over ${CONNECT_TIMEOUT_MS} ms`));
    }, CONNECT_TIMEOUT_MS);
    s.once('connect', () => {
      clearTimeout(timer);
      s.on('error', () => undefined);
      resolve(s);
    });
    s.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

async function openSockets(port: number, n: number, into: Socket[]): Promise<void> {
  for (let done = 0; done < n; done += CONNECT_BATCH) {
    const batch = await Promise.all(Array.from({ length: Math.min(CONNECT_BATCH, n - done) }, () => openOne(port)));
    into.push(...batch);
  }
}

function waitForHeld(sink: Proc, n: number): Promise<true> {
  return waitForOutput(
    sink,
    'stdout',
    (t) => {
      const all = [...t.matchAll(/^held (\d+)$/gm)];
      const last = all.length ? Number(all[all.length - 1]![1]) : 0;
      // ≥: a readiness probe's connection may still be on its way out.
      return (n === 0 ? last === 0 : last >= n) ? true : null;
    },
    // ssh opens forwarded channels ever slower as their number grows (≈ 10k in 90 s here).
    30_000 + n * 15,
    `the origin to hold ${n} connections`,
  );
}
