// What every scenario gets: the settings from the command line, the targets that started
// (and why the others did not), and a helper that runs one measurement per target while
// turning a target's failure into a note instead of ending the run.
import type { Tool } from './tools.js';
import { cpuWindow, waitForCalm, CALM_BACKGROUND_PCT, type CpuShare } from './cpu.js';
import type { Measurement, ScenarioResult, TargetInfo } from './report.js';
import { TARGET_NAMES, Unavailable, type Target, type TargetName } from '../targets/target.js';
import { directTarget } from '../targets/direct.js';
import { sshTarget } from '../targets/ssh.js';
import { burrowTarget } from '../targets/burrow.js';

export interface Settings {
  durationSecs: number;
  warmupSecs: number;
  /** wrk threads (capped at the connection count). */
  threads: number;
  connections: number[];
  idleCounts: number[];
  origin: 'nginx' | 'node';
  targets: TargetName[];
  burrowWorkers?: number;
  burrowDatabaseUrl?: string;
  /** Longest wait for a calm machine (background CPU low) before each measurement. */
  calmWaitSecs: number;
}

export interface Context {
  settings: Settings;
  repoRoot: string;
  targets: Target[];
  info: Partial<Record<TargetName, TargetInfo>>;
}

export type ScenarioOutput = Pick<ScenarioResult, 'measurements' | 'notMeasured'> & { settings?: Record<string, unknown> };

export interface Scenario {
  name: string;
  summary: string;
  required: Tool[];
  optional: Tool[];
  /** Starts (and restarts) its own targets instead of getting them opened by run.ts. */
  opensOwnTargets?: boolean;
  run(ctx: Context): Promise<ScenarioOutput>;
}

export async function openTargets(settings: Settings, repoRoot: string): Promise<Pick<Context, 'targets' | 'info'>> {
  const targets: Target[] = [];
  const info: Partial<Record<TargetName, TargetInfo>> = {};
  for (const name of TARGET_NAMES.filter((t) => settings.targets.includes(t))) {
    try {
      const t =
        name === 'direct'
          ? directTarget()
          : name === 'ssh'
            ? await sshTarget()
            : await burrowTarget({ repoRoot, workers: settings.burrowWorkers, databaseUrl: settings.burrowDatabaseUrl });
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
 * Runs `measure` once per target, in the fixed order direct → burrow → ssh, and builds one
 * Measurement per metric. A target that throws gets a note and no figure.
 */
export async function measureEach<R>(
  ctx: Context,
  caseName: string,
  measure: (t: Target) => Promise<R>,
  metrics: { metric: string; higherIsBetter: boolean; value: (r: R) => number }[],
  noteOf?: (r: R) => string | undefined,
): Promise<Measurement[]> {
  const results: Partial<Record<TargetName, R>> = {};
  const notes: Partial<Record<TargetName, string>> = {};
  const cpu: Partial<Record<TargetName, CpuShare>> = {};
  for (const t of ctx.targets) {
    await waitForCalm(ctx.settings.calmWaitSecs * 1000);
    process.stderr.write(`bench: ${caseName} — ${t.name} … `);
    try {
      const window = cpuWindow();
      const r = await measure(t);
      const share = (cpu[t.name] = window.end());
      results[t.name] = r;
      const note = [
        noteOf?.(r),
        share.backgroundPct >= CALM_BACKGROUND_PCT ? `other processes used ${share.backgroundPct.toFixed(0)}% of the CPU meanwhile` : undefined,
      ]
        .filter(Boolean)
        .join('; ');
      if (note) notes[t.name] = note;
      process.stderr.write(
        `${metrics.map((m) => `${m.metric} ${round(m.value(r))}`).join(', ')} [cpu ${share.busyPct.toFixed(0)}%, background ${share.backgroundPct.toFixed(0)}%]${note ? ` (${note})` : ''}\n`,
      );
    } catch (err) {
      notes[t.name] = `failed: ${(err as Error).message.split('\n')[0]}`;
      process.stderr.write(`failed: ${(err as Error).message}\n`);
    }
  }
  return metrics.map((m, i) => ({
    case: caseName,
    metric: m.metric,
    higherIsBetter: m.higherIsBetter,
    values: Object.fromEntries(Object.entries(results).map(([k, r]) => [k, m.value(r as R)])),
    // Notes and raw output once per case, on its first metric.
    ...(i === 0 ? { notes, raw: results, cpu } : {}),
  }));
}

function round(v: number): string {
  return Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3);
}
