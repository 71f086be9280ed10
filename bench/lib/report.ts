// Results: one record per scenario (environment + settings + measurements), printed as a table
// with ratios against direct, against node-proxy (when measured) and against ssh -R, and
// written to bench/results/<date>-<scenario>.{json,md}.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Environment } from './env.js';
import { CALM_BACKGROUND_PCT } from './cpu.js';
import { TARGET_NAMES, type TargetName } from '../targets/target.js';

/**
 * Figures by target: a TargetName, or a row of a scenario that measures subjects of its own
 * (h2: direct, nginx-proxy, burrow).
 */
type ByTarget<T> = Partial<Record<string, T>>;

export interface Measurement {
  /** What was measured, e.g. "GET 14 B, 64 conns". */
  case: string;
  /** Unit and direction, e.g. "req/s". */
  metric: string;
  higherIsBetter: boolean;
  values: ByTarget<number>;
  /** Per-target remarks (errors seen, limits hit) shown under the table. */
  notes?: ByTarget<string>;
  /** The load tool's full parsed output, kept in the JSON only. */
  raw?: ByTarget<unknown>;
  /** CPU use of the whole machine during each target's run, and the part not ours. */
  cpu?: ByTarget<{ busyPct: number; backgroundPct: number }>;
}

export interface TargetInfo {
  describe?: string;
  /** Why the target has no figures (not built yet, failed to start …). */
  unavailable?: string;
}

export interface ScenarioResult {
  scenario: string;
  environment: Environment;
  settings: Record<string, unknown>;
  targets: ByTarget<TargetInfo>;
  measurements: Measurement[];
  /** What this scenario could not measure here, and why. */
  notMeasured: string[];
  /**
   * Markdown shown instead of the per-target table, for a scenario whose rows are processes
   * rather than targets (weight); its figures are still in `measurements`.
   */
  table?: string;
  /** The line above such a table (default: memory, lower is better). */
  tableNote?: string;
}

const TARGET_LABEL: Record<string, string> = { direct: 'direct', burrow: 'burrow', burrow1: 'burrow, 1 shard', 'burrow-mesh': 'burrow, no lanes', relay: 'relay', 'node-proxy': 'node-proxy', ssh: 'ssh -R', 'nginx-proxy': 'nginx proxy' };
const label = (t: string): string => TARGET_LABEL[t] ?? t;
/** Entries by target in TARGET_NAMES order, then any other rows in the order they came. */
function ordered<T>(byTarget: ByTarget<T>): [string, T][] {
  const rank = (t: string) => (TARGET_NAMES.includes(t as TargetName) ? TARGET_NAMES.indexOf(t as TargetName) : TARGET_NAMES.length);
  return (Object.entries(byTarget) as [string, T][]).sort(([a], [b]) => rank(a) - rank(b));
}

function fmt(v: number | undefined, metric: string): string {
  if (v === undefined || !Number.isFinite(v)) return 'n/a';
  // Counts per second (req/s; h2's calls/s, round trips/s, messages/s): whole, with separators.
  if (/^(req|calls|round trips|messages)\/s/.test(metric)) return Math.round(v).toLocaleString('en-US');
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return '—';
  return `${(a / b).toFixed(2)}×`;
}

/** Mark on a figure measured while other processes used ≥ CALM_BACKGROUND_PCT of the CPU. */
export const BUSY_MARK = '†';

/** A ratio column: the `over` target's figure divided by the `under` one's. */
export interface Ratio {
  over: string;
  under: string;
}

export function table(r: ScenarioResult): string {
  // Columns for the targets this run chose; the floor (node-proxy) and the one-shard comparison
  // add their own ratios.
  const shown = TARGET_NAMES.filter((t) => r.targets[t] !== undefined);
  const has = (t: TargetName) => shown.includes(t);
  const ratios: Ratio[] = [
    { over: 'burrow', under: 'direct' },
    ...(has('relay') ? [{ over: 'burrow', under: 'relay' }] : []),
    ...(has('node-proxy') ? [{ over: 'burrow', under: 'node-proxy' }] : []),
    { over: 'burrow', under: 'ssh' },
    { over: 'ssh', under: 'direct' },
    ...(has('burrow1') ? [{ over: 'burrow', under: 'burrow1' }] : []),
    ...(has('burrow-mesh') ? [{ over: 'burrow', under: 'burrow-mesh' }] : []),
  ];
  return ratioTable(r.measurements, shown, ratios);
}

/** A ratio's column head: burrow/direct, burrow/1 shard, burrow/no lanes … */
const RATIO_HEAD: Record<string, string> = { burrow1: '1 shard', 'burrow-mesh': 'no lanes', ssh: 'ssh' };

/**
 * The results table: a row per case and metric, a column per target (`shown`, in that order),
 * then the ratios; figures measured while other processes used the CPU are marked, and each
 * case ends with a row of those processes' share.
 */
export function ratioTable(measurements: Measurement[], shown: readonly string[], ratios: Ratio[]): string {
  const head = ['case', 'metric', ...shown.map(label), ...ratios.map((q) => `${q.over}/${RATIO_HEAD[q.under] ?? label(q.under)}`)];
  // CPU shares are recorded once per case (on its first metric).
  const cpuByCase = new Map(measurements.filter((m) => m.cpu).map((m) => [m.case, m.cpu!]));
  const busy = (c: string, t: string) => (cpuByCase.get(c)?.[t]?.backgroundPct ?? 0) >= CALM_BACKGROUND_PCT;
  const rows: string[][] = [];
  measurements.forEach((m, i) => {
    rows.push([
      m.case,
      `${m.metric} ${m.higherIsBetter ? '↑' : '↓'}`,
      ...shown.map((t) => `${fmt(m.values[t], m.metric)}${Number.isFinite(m.values[t]) && busy(m.case, t) ? BUSY_MARK : ''}`),
      ...ratios.map((q) => ratio(m.values[q.over], m.values[q.under])),
    ]);
    // After a case's last metric: how much CPU other processes took during each run.
    const cpu = cpuByCase.get(m.case);
    if (cpu && measurements[i + 1]?.case !== m.case) {
      rows.push([m.case, "others' CPU %", ...shown.map((t) => (cpu[t] ? cpu[t]!.backgroundPct.toFixed(0) : 'n/a')), ...ratios.map(() => '')]);
    }
  });
  const lines = [head, head.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`);
  return lines.join('\n');
}

function notes(r: ScenarioResult): string[] {
  const out: string[] = [];
  const shares = r.measurements.flatMap((m) => Object.values(m.cpu ?? {}).flatMap((c) => (c ? [c.backgroundPct] : [])));
  const busyRuns = shares.filter((p) => p >= CALM_BACKGROUND_PCT);
  if (busyRuns.length > 0) {
    out.push(
      `- ${BUSY_MARK} ${busyRuns.length} of ${shares.length} runs shared the CPU with processes the harness did not start ` +
        `(≥ ${CALM_BACKGROUND_PCT}% of all cores during the run; up to ${Math.max(...busyRuns).toFixed(0)}%): ` +
        `those figures are pessimistic (lower throughput, higher latency than on a quiet machine), and a ratio between ` +
        `runs with very different shares ("others' CPU %" rows) says more about the neighbours than about the tunnels.`,
    );
  }
  for (const [t, info] of ordered(r.targets)) {
    if (info?.unavailable) out.push(`- **${label(t)}: not available** — ${info.unavailable}`);
  }
  for (const m of r.measurements) {
    for (const [t, n] of ordered(m.notes ?? {})) {
      if (n) out.push(`- ${m.case}, ${label(t)}: ${n}`);
    }
  }
  return out;
}

export function markdown(r: ScenarioResult): string {
  const e = r.environment;
  const targetLines = ordered(r.targets)
    .filter(([, info]) => info?.describe)
    .map(([t, info]) => `- ${label(t)}: ${info!.describe}`);
  const n = notes(r);
  return [
    `# bench: ${r.scenario} (${e.date})`,
    '',
    r.table ? (r.tableNote ?? '↓ lower is better: every figure is memory.') : `↑ higher is better, ↓ lower is better. Ratios divide the left target's figure by the right one's.`,
    '',
    r.table ?? table(r),
    '',
    ...(n.length ? ['## Notes', '', ...n, ''] : []),
    ...(r.notMeasured.length ? ['## Not measured', '', ...r.notMeasured.map((s) => `- ${s}`), ''] : []),
    '## Targets',
    '',
    ...targetLines,
    '',
    '## Settings',
    '',
    ...Object.entries(r.settings).map(([k, v]) => `- ${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`),
    '',
    '## Environment',
    '',
    `- ${e.cores} cores, ${e.cpuModel}, ${e.memoryGiB} GiB RAM, Linux ${e.kernel}`,
    `- Node ${e.node}; ${Object.entries(e.tools).map(([k, v]) => `${k}: ${v}`).join('; ')}`,
    `- burrow commit ${e.burrowCommit}`,
    `- everything (load tool, origin, tunnel server and client) shares these cores on loopback`,
    '',
  ].join('\n');
}

/** Writes bench/results/<YYYY-MM-DD>-<scenario>.{json,md}; returns the two paths. */
export function writeResult(repoRoot: string, r: ScenarioResult): string[] {
  const dir = join(repoRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const base = join(dir, `${r.environment.date.slice(0, 10)}-${r.scenario}`);
  writeFileSync(`${base}.json`, JSON.stringify(r, null, 2) + '\n');
  writeFileSync(`${base}.md`, markdown(r));
  return [`${base}.json`, `${base}.md`];
}
