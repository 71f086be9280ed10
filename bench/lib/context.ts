// What every scenario gets: the settings from the command line, the targets that started
// (and why the others did not), and a helper that runs one measurement per target while
// turning a target's failure into a note instead of ending the run.
import type { Tool } from './tools.js';
import { cpuWindow, waitForCalm, type CpuShare } from './cpu.js';
import type { Measurement, ScenarioResult, TargetInfo } from './report.js';
import { TARGET_NAMES, Unavailable, type Target, type TargetName } from '../targets/target.js';
import { directTarget } from '../targets/direct.js';
import { sshTarget } from '../targets/ssh.js';
import { burrowTarget } from '../targets/burrow.js';
import { nodeProxyTarget } from '../targets/node-proxy.js';
import { relayTarget } from '../targets/relay.js';
import type { ProbeSettings } from './probes.js';
import type { Certificate } from './tls.js';

export interface Settings {
  durationSecs: number;
  warmupSecs: number;
  /** wrk threads (capped at the connection count). */
  threads: number;
  connections: number[];
  /** h2: h2load connections, and concurrent streams on each. */
  h2Connections: number[];
  h2Streams: number;
  /** h2: concurrent gRPC unary calls on one channel. */
  grpcCalls: number[];
  idleCounts: number[];
  /** weight: burrowd --workers values, one fresh burrowd each. */
  weightWorkers: number[];
  /** churn: seconds of cycles, and how long after them RSS is taken. */
  churnSecs: number;
  afterSecs: number;
  origin: 'nginx' | 'node';
  targets: TargetName[];
  burrowWorkers?: number;
  burrowDatabaseUrl?: string;
  /** --cpu-prof: V8 profiles of burrowd and its clients go here. */
  cpuProfDir?: string;
  /** --perf: perf record of the Node targets' processes goes here (see probes). */
  perfDir?: string;
  /** --no-probes: the http scenarios run without --trace-gc and perf stat. */
  noProbes?: boolean;
  /** How Node targets are started (--trace-gc, perf): set by run.ts for the http scenarios. */
  probes?: ProbeSettings;
  /** Rounds per measurement; the median (by the first metric) is reported. */
  repeat: number;
  /** Longest wait for a calm machine (background CPU low) before each measurement. */
  calmWaitSecs: number;
}

export interface Context {
  settings: Settings;
  repoRoot: string;
  targets: Target[];
  info: Partial<Record<TargetName, TargetInfo>>;
}

export type ScenarioOutput = Pick<ScenarioResult, 'measurements' | 'notMeasured' | 'table' | 'tableNote'> & {
  settings?: Record<string, unknown>;
  /** A scenario that measures rows of its own (h2): what each ran, beside run.ts's targets. */
  targets?: ScenarioResult['targets'];
};

export interface Scenario {
  name: string;
  summary: string;
  required: Tool[];
  optional: Tool[];
  /** Starts (and restarts) its own targets instead of getting them opened by run.ts. */
  opensOwnTargets?: boolean;
  /** Visitors use HTTPS: burrowd and node-proxy are opened with the run's certificate (lib/tls.ts). */
  tls?: boolean;
  /**
   * Measures HTTP_ONLY_TARGETS (node-proxy) too: the scenario only exposes HTTP services and
   * needs no idle tunnels. Without it run.ts leaves those targets out.
   */
  httpOnlyTargets?: boolean;
  run(ctx: Context): Promise<ScenarioOutput>;
}

/** Starts the chosen targets; with `tls`, burrowd and node-proxy serve HTTPS with that certificate. */
export async function openTargets(settings: Settings, repoRoot: string, tls?: Certificate): Promise<Pick<Context, 'targets' | 'info'>> {
  const targets: Target[] = [];
  const info: Partial<Record<TargetName, TargetInfo>> = {};
  for (const name of TARGET_NAMES.filter((t) => settings.targets.includes(t))) {
    try {
      const t =
        name === 'direct'
          ? directTarget()
          : name === 'ssh'
            ? await sshTarget(settings.probes)
            : name === 'node-proxy'
              ? nodeProxyTarget({ tls, probes: settings.probes })
              : name === 'relay'
                ? relayTarget({ probes: settings.probes })
                : await burrowTarget({ name, repoRoot, workers: name === 'burrow1' ? 1 : settings.burrowWorkers, lanes: name !== 'burrow-mesh', databaseUrl: settings.burrowDatabaseUrl, cpuProfDir: settings.cpuProfDir, tls, probes: settings.probes });
      targets.push(t);
      info[name] = { describe: t.describe };
    } catch (err) {
      const reason = err instanceof Unavailable ? err.message : `failed to start: ${(err as Error).message}`;
      info[name] = { unavailable: reason };
      console.error(`bench: ${name} not available: ${reason}`);
    }
  }
  return { targets, info };
}

/** Marks a target unavailable for the rest of the scenario (e.g. its tunnel did not open). */
export function dropTarget(ctx: Context, target: Target, reason: string): void {
  ctx.targets = ctx.targets.filter((t) => t !== target);
  ctx.info[target.name] = { ...ctx.info[target.name], unavailable: reason };
  console.error(`bench: ${target.name} not available: ${reason}`);
}

/**
 * Runs `measure` for each target in the fixed order direct → burrow → burrow1 → burrow-mesh → node-proxy →
 * ssh, `--repeat` rounds (interleaved, so a noisy minute hits every target alike), keeps each
 * target's median run by the first metric, and builds one Measurement per metric. A target
 * that throws gets a note and no figure.
 */
export function measureEach<R>(
  ctx: Context,
  caseName: string,
  measure: (t: Target) => Promise<R>,
  metrics: { metric: string; higherIsBetter: boolean; value: (r: R) => number }[],
  noteOf?: (r: R) => string | undefined,
): Promise<Measurement[]> {
  return measureSubjects(ctx.settings, ctx.targets, caseName, measure, metrics, noteOf);
}

/** measureEach for any named subjects, in the order given (h2's rows are not Targets). */
export async function measureSubjects<S extends { name: string }, R>(
  settings: Settings,
  subjects: readonly S[],
  caseName: string,
  measure: (t: S) => Promise<R>,
  metrics: { metric: string; higherIsBetter: boolean; value: (r: R) => number }[],
  noteOf?: (r: R) => string | undefined,
): Promise<Measurement[]> {
  const runs = new Map<string, { r: R; cpu: CpuShare }[]>();
  const failures: Record<string, string> = {};
  const rounds = settings.repeat;
  for (let round = 1; round <= rounds; round++) {
    for (const t of subjects) {
      if (failures[t.name]) continue;
      await waitForCalm(settings.calmWaitSecs * 1000);
      process.stderr.write(`bench: ${caseName} — ${t.name}${rounds > 1 ? ` (${round}/${rounds})` : ''} … `);
      try {
        const window = cpuWindow();
        const r = await measure(t);
        const share = window.end();
        runs.set(t.name, [...(runs.get(t.name) ?? []), { r, cpu: share }]);
        process.stderr.write(
          `${metrics.map((m) => `${m.metric} ${round3(m.value(r))}`).join(', ')} [cpu ${share.busyPct.toFixed(0)}%, background ${share.backgroundPct.toFixed(0)}%]\n`,
        );
      } catch (err) {
        failures[t.name] = `failed: ${(err as Error).message.split('\n')[0]}`;
        process.stderr.write(`failed: ${(err as Error).message}\n`);
      }
    }
  }
  const chosen: Record<string, R> = {};
  const cpu: Record<string, CpuShare> = {};
  const notes: Record<string, string> = { ...failures };
  const all: Record<string, R[]> = {};
  for (const [name, list] of runs) {
    const sorted = [...list].sort((a, b) => metrics[0]!.value(a.r) - metrics[0]!.value(b.r));
    const median = sorted[Math.floor((sorted.length - 1) / 2)]!;
    chosen[name] = median.r;
    cpu[name] = median.cpu;
    all[name] = list.map((x) => x.r);
    // Background CPU is shown as a mark on the figures (report.ts), not as a note.
    const note = noteOf?.(median.r);
    if (note) notes[name] = note;
  }
  return metrics.map((m, i) => ({
    case: caseName,
    metric: m.metric,
    higherIsBetter: m.higherIsBetter,
    values: Object.fromEntries(Object.entries(chosen).map(([k, r]) => [k, m.value(r)])),
    // Notes and raw output once per case, on its first metric.
    ...(i === 0 ? { notes, raw: rounds > 1 ? all : chosen, cpu } : {}),
  }));
}

function round3(v: number): string {
  return Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3);
}
