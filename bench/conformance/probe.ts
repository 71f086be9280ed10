// The HTTP/1.1 conformance probe: ~100 black-box cases (compliance, request smuggling,
// malformed input, connection handling, odd origin responses) against burrowd's public front
// and against nginx as a reverse proxy, in front of one recording origin.
//
//   npm run bench:conformance -- [--only SUBSTR] [--subjects burrow,nginx,nginx-1.0] [--deadline MS] [--no-write]
//
// Cases run one at a time, each on a fresh visitor connection; the origin's record is reset
// before each and read a moment after the visitor is done. Progress on stderr; the Markdown
// report on stdout and in bench/results/<date>-conformance.{md,json}.
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { cleanup, killAllNow, sleep } from '../lib/procs.js';
import { ensureTools } from '../lib/tools.js';
import { environment } from '../lib/env.js';
import { CASES, type Case } from './cases.js';
import { describe, type Run } from './judge.js';
import { startOrigin, type OriginRequest, type RawOrigin } from './origin.js';
import { startBurrow, startNginx, type Subject } from './subjects.js';
import { parseResponses, visit } from './visitor.js';
import { markdown, totals, writeProbeResult, type CaseResult, type ProbeResult } from './report.js';

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
/** Bytes a subject sends on after the visitor is done still count for the case. */
const SETTLE_MS = 150;

const byId = new Map(CASES.map((c) => [c.id, c]));

/** The case a request belongs to, from its `/c/<id>/` prefix. */
function script(q: OriginRequest) {
  const m = /^\/c\/([^/?#]+)/.exec(q.target);
  const c = m ? byId.get(m[1]!) : undefined;
  return c?.origin?.(q) ?? null;
}

async function runCase(c: Case, s: Subject, origin: RawOrigin, deadlineMs: number): Promise<Run> {
  const ctx = { host: s.host, p: `/c/${c.id}` };
  origin.reset();
  const visitor = await visit(s.port, c.send(ctx), { deadlineMs, expect: c.expect ?? 1, headIdx: c.head ?? [] });
  await sleep(SETTLE_MS);
  return { visitor, parsed: parseResponses(visitor.raw, visitor.closed, c.head ?? []), origin: origin.snapshot(), ...ctx };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      only: { type: 'string' },
      subjects: { type: 'string', default: 'burrow,nginx,nginx-1.0' },
      deadline: { type: 'string', default: '2000' },
      'no-write': { type: 'boolean', default: false },
      'no-install': { type: 'boolean', default: false },
    },
  });
  const wanted = values.subjects.split(',');
  const deadlineMs = Number(values.deadline);
  const cases = CASES.filter((c) => !values.only || c.id.includes(values.only));
  const ids = new Set<string>();
  for (const c of CASES) {
    if (ids.has(c.id) || !/^[a-z0-9.-]+$/.test(c.id)) throw new Error(`case id "${c.id}" repeated or not [a-z0-9.-]`);
    ids.add(c.id);
  }
  if (wanted.some((w) => w.startsWith('nginx'))) ensureTools(['nginx'], [], !values['no-install']);

  const origin = await startOrigin(script);
  const subjects: Subject[] = [];
  try {
    if (wanted.includes('burrow')) subjects.push(await startBurrow(repoRoot, origin.port));
    if (wanted.some((w) => w.startsWith('nginx'))) subjects.push(...(await startNginx(origin.port)).filter((s) => wanted.includes(s.name)));
    console.error(`conformance: ${cases.length} cases × ${subjects.map((s) => s.name).join(', ')}`);
    const results: CaseResult[] = [];
    for (const c of cases) {
      const row: CaseResult = { id: c.id, group: c.group, title: c.title, source: c.source, outcomes: {} };
      for (const s of subjects) {
        const run = await runCase(c, s, origin, deadlineMs);
        const v = c.judge(run);
        row.outcomes[s.name] = { ok: v.ok, why: v.why, did: describe(run), visitorBytes: run.visitor.raw.subarray(0, 2048).toString('latin1'), originBytes: run.origin.raw.subarray(0, 2048).toString('latin1') };
      }
      results.push(row);
      console.error(`${c.id.padEnd(22)} ${subjects.map((s) => `${s.name} ${row.outcomes[s.name]!.ok ? 'pass' : `FAIL (${row.outcomes[s.name]!.why})`}`).join('  ')}`);
    }
    const result: ProbeResult = { environment: environment(repoRoot), subjects: subjects.map((s) => ({ name: s.name, describe: s.describe })), deadlineMs, cases: results };
    console.log(markdown(result));
    for (const t of totals(result)) console.error(`${t.group.padEnd(11)} ${subjects.map((s) => `${s.name} ${t.pass[s.name]}/${t.n}`).join('  ')}`);
    if (!values['no-write'] && !values.only) console.error(`conformance: wrote ${writeProbeResult(repoRoot, result).join(', ')}`);
  } finally {
    await Promise.all(subjects.map((s) => s.close()));
    await origin.close();
  }
}

process.on('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => void cleanup().finally(() => process.exit(130)));
try {
  await main();
  await cleanup();
} catch (err) {
  console.error(`conformance: ${(err as Error).stack ?? err}`);
  await cleanup();
  process.exitCode = 1;
}
