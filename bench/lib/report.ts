// Results: one record per scenario (environment + settings + measurements), printed as a table
// with ratios against direct and against ssh -R, and written to bench/results/<date>-<scenario>.{json,md}.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Environment } from './env.js';
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
}

const TARGET_LABEL: Record<TargetName, string> = { direct: 'direct', burrow: 'burrow', ssh: 'ssh -R' };

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

export function table(r: ScenarioResult): string {
  const head = ['case', 'metric', ...TARGET_NAMES.map((t) => TARGET_LABEL[t]), 'burrow/direct', 'burrow/ssh', 'ssh/direct'];
  const rows = r.measurements.map((m) => [
    m.case,
    `${m.metric} ${m.higherIsBetter ? '↑' : '↓'}`,
    ...TARGET_NAMES.map((t) => fmt(m.values[t], m.metric)),
    ratio(m.values.burrow, m.values.direct),
    ratio(m.values.burrow, m.values.ssh),
    ratio(m.values.ssh, m.values.direct),
  ]);
  const lines = [head, head.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`);
  return lines.join('\n');
}

function notes(r: ScenarioResult): string[] {
  const out: string[] = [];
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
    `↑ higher is better, ↓ lower is better. Ratios divide the left target's figure by the right one's.`,
    '',
    table(r),
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
