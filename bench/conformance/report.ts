// The probe's results: one row per case with each subject's verdict (and, when it failed, what
// it did), totals per group and overall; as Markdown and as JSON.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Environment } from '../lib/env.js';
import { GROUPS, type Group } from './cases.js';

export interface Outcome {
  ok: boolean;
  /** Why it failed (empty when it passed). */
  why: string;
  /** What the subject did: statuses, close, what reached the origin. */
  did: string;
  /** The first 2 KiB the visitor read, and that reached the origin (latin1). */
  visitorBytes: string;
  originBytes: string;
}

export interface CaseResult {
  id: string;
  group: Group;
  title: string;
  source: string;
  outcomes: Record<string, Outcome>;
}

export interface ProbeResult {
  environment: Environment;
  subjects: { name: string; describe: string }[];
  deadlineMs: number;
  cases: CaseResult[];
}

const esc = (s: string): string => s.replaceAll('|', '\\|').replaceAll('\n', ' ').replace(/[\x00-\x1f\x7f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

export function totals(r: ProbeResult): { group: Group | 'all'; n: number; pass: Record<string, number> }[] {
  const rows = [...GROUPS, 'all' as const].map((g) => {
    const cs = r.cases.filter((c) => g === 'all' || c.group === g);
    return { group: g, n: cs.length, pass: Object.fromEntries(r.subjects.map((s) => [s.name, cs.filter((c) => c.outcomes[s.name]?.ok).length])) };
  });
  return rows.filter((t) => t.n > 0);
}

export function markdown(r: ProbeResult): string {
  const names = r.subjects.map((s) => s.name);
  const out: string[] = [];
  out.push(`# HTTP/1.1 conformance probe — ${r.environment.date.slice(0, 10)}`, '');
  out.push(
    'Each case writes exact bytes to a fresh loopback connection of each subject (deadline',
    `${r.deadlineMs} ms) and is judged on what the visitor read back, whether the connection closed, and the exact`,
    'bytes that reached the origin (a raw `node:net` server behind every subject). The rules are RFC 9112/9110\'s for an',
    'intermediary; where the RFC allows several behaviours (refuse, or repair and forward) each passes. Cases: `bench/conformance/cases.ts`.',
    '',
  );
  out.push('## Totals', '', `| group | cases | ${names.join(' | ')} |`, `| --- | ---: | ${names.map(() => '---:').join(' | ')} |`);
  for (const t of totals(r)) out.push(`| ${t.group === 'all' ? '**all**' : t.group} | ${t.n} | ${names.map((n) => `${t.pass[n]}/${t.n}`).join(' | ')} |`);
  out.push('', '## Cases', '', `| id | group | case | checks | ${names.join(' | ')} |`, `| --- | --- | --- | --- | ${names.map(() => '---').join(' | ')} |`);
  for (const c of r.cases) {
    out.push(`| \`${c.id}\` | ${c.group} | ${esc(c.title)} | ${esc(c.source)} | ${names.map((n) => (c.outcomes[n]?.ok ? 'pass' : c.outcomes[n] ? '**FAIL**' : '–')).join(' | ')} |`);
  }
  out.push('', '## Failures', '');
  for (const n of names) {
    const failed = r.cases.filter((c) => c.outcomes[n] && !c.outcomes[n]!.ok);
    out.push(`### ${n} (${failed.length})`, '');
    if (failed.length === 0) out.push('none', '');
    for (const c of failed) out.push(`- \`${c.id}\` ${esc(c.title)} — ${esc(c.outcomes[n]!.why)}. Did: ${esc(c.outcomes[n]!.did)}`);
    out.push('');
  }
  out.push('## Subjects', '');
  for (const s of r.subjects) out.push(`- **${s.name}**: ${esc(s.describe)}`);
  const e = r.environment;
  out.push('', '## Environment', '', `${e.cores} cores, ${e.cpuModel}, ${e.memoryGiB} GiB, Linux ${e.kernel}, Node ${e.node}, ${e.tools.nginx ?? 'nginx: none'}, burrow ${e.burrowCommit}`, '');
  return out.join('\n');
}

/** Writes bench/results/<date>-conformance.{md,json}; returns the paths. */
export function writeProbeResult(repoRoot: string, r: ProbeResult): string[] {
  const dir = join(repoRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const base = join(dir, `${r.environment.date.slice(0, 10)}-conformance`);
  writeFileSync(`${base}.md`, markdown(r));
  writeFileSync(`${base}.json`, `${JSON.stringify(r, null, 2)}\n`);
  return [`${base}.md`, `${base}.json`];
}
