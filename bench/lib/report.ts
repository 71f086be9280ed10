// Results: one record per scenario (environment + settings + measurements), printed as a table
// with ratios against direct, against node-proxy (when measured) and against ssh -R, and
// written to bench/results/<date>-<scenario>.{json,md}.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Environment } from './env.js';
import { CALM_BACKGROUND_PCT } from './cpu.js';
import { TARGET_NAMES, type TargetName } from '../targets/target.js';

export interface Measurement {
  /** What was measured, e.g. "GET 14 B, 64 conns". */
  case: string;
  /** Unit and direction, e.g. "req/s". */
  metric: string;
  higherIsBetter: boolean;
  values: Partial<Record<TargetName, number>>;
  /** Per-target remarks (errors seen, limits hit) shown under the table. */
  notes?: Partial<Record<TargetName, string>>;
  /** The load tool's full parsed output, kept in the JSON only. */
  raw?: Partial<Record<TargetName, unknown>>;
  /** CPU use of the whole machine during each target's run, and the part not ours. */
  cpu?: Partial<Record<TargetName, { busyPct: number; backgroundPct: number }>>;
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
  targets: Partial<Record<TargetName, TargetInfo>>;
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

const TARGET_LABEL: Record<TargetName, string> = { direct: 'direct', burrow: 'burrow', burrow1: 'burrow, 1 shard', 'burrow-mesh': 'burrow, no lanes', relay: 'relay', 'node-proxy': 'node-proxy', ssh: 'ssh -R' };

function fmt(v: number | undefined, metric: string): string {
  if (v === undefined || !Number.isFinite(v)) return 'n/a';
  if (metric.startsWith('req/s')) return Math.round(v).toLocaleString('en-US');
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

export function table(r: ScenarioResult): string {
  // Columns for the targets this run chose; the floor (node-proxy) and the one-shard comparison
  // add their own ratios.
  const shown = TARGET_NAMES.filter((t) => r.targets[t] !== undefined);
  const floor = shown.includes('node-proxy');
  const relay = shown.includes('relay');
  const oneShard = shown.includes('burrow1');
  const mesh = shown.includes('burrow-mesh');
  const head = [
    'case',
    'metric',
    ...shown.map((t) => TARGET_LABEL[t]),
    'burrow/direct',
    ...(relay ? ['burrow/relay'] : []),
    ...(floor ? ['burrow/node-proxy'] : []),
    'burrow/ssh',
    'ssh/direct',
    ...(oneShard ? ['burrow/1 shard'] : []),
    ...(mesh ? ['burrow/no lanes'] : []),
  ];
  // CPU shares are recorded once per case (on its first metric).
  const cpuByCase = new Map(r.measurements.filter((m) => m.cpu).map((m) => [m.case, m.cpu!]));
  const busy = (c: string, t: TargetName) => (cpuByCase.get(c)?.[t]?.backgroundPct ?? 0) >= CALM_BACKGROUND_PCT;
  const rows: string[][] = [];
  r.measurements.forEach((m, i) => {
    rows.push([
      m.case,
      `${m.metric} ${m.higherIsBetter ? '↑' : '↓'}`,
      ...shown.map((t) => `${fmt(m.values[t], m.metric)}${m.values[t] !== undefined && busy(m.case, t) ? BUSY_MARK : ''}`),
      ratio(m.values.burrow, m.values.direct),
      ...(relay ? [ratio(m.values.burrow, m.values.relay)] : []),
      ...(floor ? [ratio(m.values.burrow, m.values['node-proxy'])] : []),
      ratio(m.values.burrow, m.values.ssh),
      ratio(m.values.ssh, m.values.direct),
      ...(oneShard ? [ratio(m.values.burrow, m.values.burrow1)] : []),
      ...(mesh ? [ratio(m.values.burrow, m.values['burrow-mesh'])] : []),
    ]);
    // After a case's last metric: how much CPU other processes took during each run.
    const cpu = cpuByCase.get(m.case);
    if (cpu && r.measurements[i + 1]?.case !== m.case) {
      rows.push([m.case, "others' CPU %", ...shown.map((t) => (cpu[t] ? cpu[t]!.backgroundPct.toFixed(0) : 'n/a')), '', ...(relay ? [''] : []), ...(floor ? [''] : []), '', '', ...(oneShard ? [''] : []), ...(mesh ? [''] : [])]);
    }
  });
  const lines = [head, head.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`);
  return lines.join('\n');
}

function notes(r: ScenarioResult): string[] {
  const out: string[] = [];
  const shares = r.measurements.flatMap((m) => Object.values(m.cpu ?? {}).map((c) => c.backgroundPct));
  const busyRuns = shares.filter((p) => p >= CALM_BACKGROUND_PCT);
  if (busyRuns.length > 0) {
    out.push(
      `- ${BUSY_MARK} ${busyRuns.length} of ${shares.length} runs shared the CPU with processes the harness did not start ` +
        `(≥ ${CALM_BACKGROUND_PCT}% of all cores during the run; up to ${Math.max(...busyRuns).toFixed(0)}%): ` +
        `those figures are pessimistic (lower throughput, higher latency than on a quiet machine), and a ratio between ` +
        `runs with very different shares ("others' CPU %" rows) says more about the neighbours than about the tunnels.`,
    );
  }
  for (const t of TARGET_NAMES) {
    const info = r.targets[t];
    if (info?.unavailable) out.push(`- **${TARGET_LABEL[t]}: not available** — ${info.unavailable}`);
  }
  for (const m of r.measurements) {
    for (const t of TARGET_NAMES) {
      const n = m.notes?.[t];
      if (n) out.push(`- ${m.case}, ${TARGET_LABEL[t]}: ${n}`);
    }
  }
  return out;
}

export function markdown(r: ScenarioResult): string {
  const e = r.environment;
  const targetLines = TARGET_NAMES.filter((t) => r.targets[t]?.describe).map(
    (t) => `- ${TARGET_LABEL[t]}: ${r.targets[t]!.describe}`,
  );
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
