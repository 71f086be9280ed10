// Memory at rest (issue 23 §4): burrowd with nothing to do at each shard count
// (--worker-counts, default 1,2,4; a fresh process each, on the embedded database, whose
// PostgreSQL processes are its children, and on --database-url when the run has one, which
// has none), the client idle with one tunnel (inspector on, the default, and --no-inspect),
// and the floor under both: a bare node process of the same binary.
//
//   VmRSS     every resident page: what the issue's targets are stated in
//   RssAnon   private allocations (V8 heaps, malloc, stacks): what the process itself costs
//   RssFile   node's binary and native modules mapped from disk, shared with every node process
//   PSS       each page divided by the number of processes mapping it: sums without double counting
//
// With --repeat N, N rounds and the median process of each case.
//
// burrowd "with children" = burrowd's RSS + its children's PSS. PostgreSQL's processes all map
// the cluster's shared buffers and binary: their RSS summed counts those pages once per process.
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { start, stop, tempDir, waitForOutput, descendants, sleep, type Proc } from '../lib/procs.js';
import { LOOPBACK } from '../lib/net.js';
import { memoryOf, settledServerKiB, type Memory } from '../lib/rss.js';
import { shebangEnv } from '../targets/burrow.js';
import type { Context, Scenario, ScenarioOutput } from '../lib/context.js';
import type { Measurement } from '../lib/report.js';

/**
 * Each process is left alone this long after it is ready before it is read. burrowd's argon2
 * pool keeps no idle thread (src/workers/jobs.ts: minThreads 0) but its start-up hashes run on
 * one, which leaves after the pool's idleTimeout of 30 s (~8 MiB RSS and a thread). That is not
 * the end of it: three burrowd --workers 4 started together read 135, 157 and 145 MiB at 40 s,
 * and 138, 138 and 139 MiB at 120 s, falling in steps tens of seconds apart (a settle of two
 * samples 1 s apart passes between steps). The same wait for every process.
 */
const IDLE_AFTER_READY_MS = 120_000;
/**
 * An idle burrowd still allocates: one --workers 4 left alone for 5 min rose ~2 MiB a minute
 * between collections (140.6 → 147.2 MiB, then down). The reading lands anywhere on that
 * sawtooth, so the highest VmRSS of the last stretch of the wait is shown beside it.
 */
const PEAK_WINDOW_MS = 30_000;
const PEAK_SAMPLE_MS = 1_000;
const START_TIMEOUT_MS = 60_000;
/** SIGTERM → exit: burrowd stops its PostgreSQL on the way out. */
const STOP_GRACE_MS = 10_000;
const KEY_RE = /\bbk_[A-Za-z0-9]{12}_[A-Za-z0-9]{43}\b/;
/** The issue's targets, in RSS (MiB). */
const TARGET_TWO_SHARDS_MIB = 120;
const TARGET_PER_SHARD_MIB = 12;
const TARGET_CLIENT_MIB = 40;

interface Running {
  label: string;
  kind: 'floor' | 'burrowd' | 'client';
  /** Row order in the table. */
  order: number;
  proc: Proc;
  readyAt: number;
}

interface Reading {
  label: string;
  kind: Running['kind'];
  order: number;
  self: Memory;
  /** The highest VmRSS in the PEAK_WINDOW_MS before the reading. */
  peakKiB: number;
  children: { count: number; rssKiB: number; pssKiB: number };
  /** The headline figure (KiB) of every round, ascending. */
  spread?: number[];
}

interface Burrowd extends Running {
  serverUrl: string;
  key: string;
}

const MiB = (kib: number): number => kib / 1024;
const withChildrenKiB = (r: Reading): number => r.self.rssKiB + r.children.pssKiB;

export const weightScenario: Scenario = {
  name: 'weight',
  summary: 'memory at rest: burrowd per shard count (+ its PostgreSQL), the client, a bare node (the floor)',
  required: [],
  optional: [],
  opensOwnTargets: true,
  async run(ctx: Context): Promise<ScenarioOutput> {
    const counts = [...ctx.settings.weightWorkers].sort((a, b) => a - b);
    const url = ctx.settings.burrowDatabaseUrl;
    const notes: string[] = [];
    // Rounds one after the other, the median process of each case reported: one process per
    // case is one draw (read at 35 s, the same idle burrowd was 96 MiB in one run, 106 in the next).
    const rounds: Reading[][] = [];
    for (let i = 1; i <= ctx.settings.repeat; i++) {
      if (ctx.settings.repeat > 1) process.stderr.write(`bench: round ${i}/${ctx.settings.repeat}\n`);
      const lost: string[] = [];
      rounds.push(await round(ctx.repoRoot, counts, url, lost));
      notes.push(...lost.map((l) => (ctx.settings.repeat > 1 ? `round ${i}: ${l}` : l)));
    }
    const readings = medians(rounds);

    for (const r of readings) {
      if (r.kind === 'burrowd' && r.label.includes('embedded') && r.children.count === 0) {
        notes.push(`${r.label}: no child processes — the embedded database ran as PGlite, inside burrowd (no PostgreSQL binaries for this platform)`);
      }
    }
    const perShard = [undefined, url].flatMap((u) => perShardCost(readings, counts, u));
    const floorReading = readings.find((r) => r.kind === 'floor');

    ctx.info.burrow = {
      describe: `MALLOC_ARENA_MAX=2 (its shebang) burrowd --host 127.0.0.1 --port 0 --seed-api-key --data-dir <tmp> --log-level warn --workers N${url ? ' [--database-url <url>]' : ''}, a fresh process for each N; ` +
        "`burrow http 127.0.0.1:<origin> --server http://127.0.0.1:<port> --token <seed key>` [--no-inspect] against a burrowd --workers 1 of their own (embedded database, not read), the origin a node:http server in the harness",
    };
    ctx.info.direct = { describe: "in weight, the floor: `node -e 'setInterval(()=>{},1e9)'`, the same node binary, no burrow at all" };
    return {
      table: [processTable(readings, perShard, floorReading), '', targetTable(readings, perShard, counts), ''].join('\n'),
      measurements: measurementsOf(readings, perShard),
      notMeasured: [
        // A process that did not start or died, per round: its case has fewer rounds.
        ...notes,
        'burrowd with tunnels: the idle scenario weighs each tunnel and connection',
        ...(url ? [] : ['burrowd on an external database: the run had no --database-url']),
        'kernel memory (socket buffers, page tables) — not in RSS',
      ],
      settings: {
        method: `each round, each process started fresh, left alone ${IDLE_AFTER_READY_MS / 1000} s after it was ready (burrowd: listening; client: tunnel up), then read once its RSS (with its children's) settled (two samples 1 s apart within 256 KiB), with the highest VmRSS of the ${PEAK_WINDOW_MS / 1000} s before (sampled every ${PEAK_SAMPLE_MS / 1000} s) beside it; of an even number of rounds the higher middle one is reported: VmRSS, RssAnon, RssFile, RssShmem and Threads from /proc/<pid>/status, PSS from /proc/<pid>/smaps_rollup`,
        'burrowd with children': "burrowd's VmRSS + the PSS of its descendants (the embedded PostgreSQL): their RSS summed would count the shared buffers and the postgres binary once per backend",
        'per shard': `(figure at --workers ${counts[counts.length - 1]} − figure at --workers ${counts[0]}) ÷ ${counts[counts.length - 1]! - counts[0]!}`,
        concurrency: 'in a round the floor, every burrowd and the two clients (with the burrowd they use) run at the same time: PSS divides shared pages among every process mapping them, these and any other node or postgres on the machine, so PSS (not RSS, RssAnon or RssFile) moves with what else runs',
        'burrowd --workers': counts.join(', '),
        'burrowd database': url ? 'the embedded PostgreSQL (children of burrowd, in --data-dir) and PostgreSQL at --database-url' : 'the embedded PostgreSQL (children of burrowd, in --data-dir)',
      },
    };
  },
};

/**
 * One round, every process at once (memory does not depend on who else has the CPU): the
 * floor, each burrowd, and the two clients on a burrowd of their own, which is not read (its
 * tunnels would be in its figures).
 */
async function round(repoRoot: string, counts: number[], url: string | undefined, notes: string[]): Promise<Reading[]> {
  const started: Running[] = [];
  const origin = await listenOrigin();
  try {
    const floor: Running = { label: 'bare node (the floor)', kind: 'floor', order: -1, proc: start('node-floor', process.execPath, ['-e', 'setInterval(()=>{},1e9)']), readyAt: Date.now() };
    started.push(floor);
    const [embedded, external, clients] = await Promise.all([
      startAll(counts.map((n, i) => () => startBurrowd(repoRoot, n, undefined, i)), notes),
      // One start at a time on the shared database: three --seed-api-key starts at once on one
      // database have failed here (one exited before printing its key).
      startOneByOne(url ? counts.map((n, i) => () => startBurrowd(repoRoot, n, url, counts.length + i)) : [], notes),
      startBurrowd(repoRoot, 1, undefined, -1, 'burrowd for the clients').then(
        (host) => {
          started.push(host);
          return startAll([true, false].map((inspect) => () => startClient(repoRoot, host, origin.port, inspect)), notes);
        },
        (err: Error) => {
          notes.push(`client: not measured, ${err.message.split('\n')[0]}`);
          return [];
        },
      ),
    ]);
    started.push(...embedded, ...external, ...clients);
    return await readAll([floor, ...embedded, ...external, ...clients], notes);
  } finally {
    origin.server.close();
    // Clients before the burrowd they use.
    await Promise.all(started.filter((r) => r.kind === 'client').map((r) => stop(r.proc, STOP_GRACE_MS)));
    await Promise.all(started.filter((r) => r.kind !== 'client').map((r) => stop(r.proc, STOP_GRACE_MS)));
  }
}

/** The figure a case is judged by: burrowd with its children, the others alone. */
const headline = (r: Reading): number => (r.kind === 'burrowd' ? withChildrenKiB(r) : r.self.rssKiB);

/** Per case, the round whose headline figure is the median; every round's figure beside it. */
function medians(rounds: Reading[][]): Reading[] {
  const labels = [...new Set(rounds.flat().map((r) => r.label))];
  return labels.map((l) => {
    const all = rounds.flatMap((rs) => rs.filter((r) => r.label === l)).sort((a, b) => headline(a) - headline(b));
    // Of an even number, the higher middle one: for a memory target, the cautious one.
    const median = all[Math.ceil((all.length - 1) / 2)]!;
    return { ...median, spread: all.map(headline) };
  }).sort((a, b) => a.order - b.order);
}

function label(workers: number, url: string | undefined): string {
  return `burrowd --workers ${workers}, ${url ? '--database-url' : 'embedded database'}`;
}

/** Starts each, in parallel; one that fails becomes a note, the others go on. */
/** Starts each after the previous is ready; one that fails becomes a note. */
async function startOneByOne<T extends Running>(starts: (() => Promise<T>)[], notes: string[]): Promise<T[]> {
  const out: T[] = [];
  for (const s of starts) out.push(...(await startAll([s], notes)));
  return out;
}

async function startAll<T extends Running>(starts: (() => Promise<T>)[], notes: string[]): Promise<T[]> {
  const settled = await Promise.allSettled(starts.map((s) => s()));
  for (const s of settled) if (s.status === 'rejected') notes.push(`did not start: ${(s.reason as Error).message.split('\n')[0]}`);
  return settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
}

/** `order`: the row's place in the table. */
async function startBurrowd(repoRoot: string, workers: number, url: string | undefined, order: number, name = label(workers, url)): Promise<Burrowd> {
  const serverJs = join(repoRoot, 'dist', 'src', 'main.js');
  const args = [serverJs, '--host', LOOPBACK, '--port', '0', '--seed-api-key', '--data-dir', tempDir('weight'), '--log-level', 'warn', '--workers', String(workers)];
  if (url) args.push('--database-url', url);
  const proc = start(`burrowd-${workers}${url ? '-url' : ''}`, process.execPath, args, { env: { ...process.env, ...shebangEnv(serverJs) } });
  try {
    // First stdout line: the seeded key; a later one: where it listens (ready).
    const key = await waitForOutput(proc, 'stdout', (t) => KEY_RE.exec(t.split('\n')[0] ?? '')?.[0], START_TIMEOUT_MS, 'the seeded key');
    const port = await waitForOutput(proc, 'stdout', (t) => {
      for (const line of t.split('\n').slice(1)) {
        const m = /127\.0\.0\.1:(\d{2,5})\b/.exec(line);
        if (m) return Number(m[1]);
      }
      return null;
    }, START_TIMEOUT_MS, 'the listening address');
    return { label: name, kind: 'burrowd', order, proc, readyAt: Date.now(), serverUrl: `http://${LOOPBACK}:${port}`, key };
  } catch (err) {
    await stop(proc);
    const why = proc.stderr().trim().split('\n').pop();
    throw new Error(`${name}: ${(err as Error).message.split('\n')[0]}${why ? ` (its last stderr line: ${why.slice(0, 300)})` : ''}`);
  }
}

async function startClient(repoRoot: string, server: Burrowd, originPort: number, inspect: boolean): Promise<Running> {
  const cliJs = join(repoRoot, 'dist', 'src', 'cli', 'main.js');
  const home = tempDir('weight-home');
  // Its own config home; the inspector's default port (4040, or the next free one).
  const env = { ...process.env, ...shebangEnv(cliJs), HOME: home, XDG_CONFIG_HOME: join(home, '.config'), BURROW_SERVER: '', BURROW_TOKEN: '' };
  const args = [cliJs, 'http', `${LOOPBACK}:${originPort}`, '--server', server.serverUrl, '--token', server.key, ...(inspect ? [] : ['--no-inspect'])];
  const label = `burrow http, ${inspect ? 'inspector on (default)' : '--no-inspect'}, 1 tunnel`;
  const proc = start(`burrow-http${inspect ? '' : '-no-inspect'}`, process.execPath, args, { env });
  try {
    await waitForOutput(proc, 'stdout', (t) => (t.includes('\n') ? true : null), START_TIMEOUT_MS, 'the public URL');
    // Without an inspector the figure would pass for one with it: check it said where it listens.
    if (inspect) await waitForOutput(proc, 'stderr', (t) => (/inspector at /.test(t) ? true : /no request inspector/.test(t) ? false : null), 10_000, 'the inspector address').then((ok) => {
      if (!ok) throw new Error('no inspector started (ports 4040-4049 taken)');
    });
    return { label, kind: 'client', order: 100 + (inspect ? 0 : 1), proc, readyAt: Date.now() };
  } catch (err) {
    await stop(proc);
    throw new Error(`${label}: ${(err as Error).message}`);
  }
}

/** The tunnel's local service: nothing reaches it at rest, but the tunnel points somewhere real. */
async function listenOrigin(): Promise<{ server: Server; port: number }> {
  const server = createServer((_req, res) => res.end('ok\n'));
  await new Promise<void>((resolve) => server.listen(0, LOOPBACK, resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

/** Reads each once idle, in parallel; one that died becomes a note. */
async function readAll(running: Running[], notes: string[]): Promise<Reading[]> {
  const settled = await Promise.allSettled(running.map(readWhenIdle));
  for (const s of settled) if (s.status === 'rejected') notes.push((s.reason as Error).message.split('\n')[0]!);
  return settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
}

async function readWhenIdle(r: Running): Promise<Reading> {
  await sleep(Math.max(0, r.readyAt + IDLE_AFTER_READY_MS - PEAK_WINDOW_MS - Date.now()));
  let peakKiB = 0;
  while (Date.now() < r.readyAt + IDLE_AFTER_READY_MS) {
    peakKiB = Math.max(peakKiB, memoryOf(r.proc.pid)?.rssKiB ?? 0);
    await sleep(PEAK_SAMPLE_MS);
  }
  await settledServerKiB(() => [r.proc.pid, ...descendants(r.proc.pid)]);
  const self = memoryOf(r.proc.pid);
  if (!self || !r.proc.isRunning()) throw new Error(`${r.label} exited while idle: ${r.proc.stderr().split('\n')[0]}`);
  const children = descendants(r.proc.pid).flatMap((pid) => memoryOf(pid) ?? []);
  process.stderr.write(`bench: ${r.label} — RSS ${MiB(self.rssKiB).toFixed(1)} MiB, anon ${MiB(self.anonKiB).toFixed(1)} MiB, ${children.length} children\n`);
  return {
    label: r.label,
    kind: r.kind,
    order: r.order,
    self,
    peakKiB: Math.max(peakKiB, self.rssKiB),
    children: { count: children.length, rssKiB: sum(children.map((c) => c.rssKiB)), pssKiB: sum(children.map((c) => c.pssKiB)) },
  };
}

function sum(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

interface PerShard {
  /** 'embedded database' or '--database-url'. */
  db: string;
  /** '(4 − 1) ÷ 3' */
  formula: string;
  rssKiB: number;
  anonKiB: number;
  pssKiB: number;
  withChildrenKiB: number;
  peakKiB: number;
  threads: number;
}

/** (largest − smallest shard count) ÷ their difference, for one database. */
function perShardCost(readings: Reading[], counts: number[], url: string | undefined): PerShard[] {
  const lo = counts[0]!;
  const hi = counts[counts.length - 1]!;
  const a = readings.find((r) => r.label === label(lo, url));
  const b = readings.find((r) => r.label === label(hi, url));
  if (hi === lo || !a || !b) return [];
  const per = (f: (r: Reading) => number) => (f(b) - f(a)) / (hi - lo);
  return [{
    db: url ? '--database-url' : 'embedded database',
    formula: `(${hi} − ${lo}) ÷ ${hi - lo}`,
    rssKiB: per((r) => r.self.rssKiB),
    anonKiB: per((r) => r.self.anonKiB),
    pssKiB: per((r) => r.self.pssKiB),
    withChildrenKiB: per(withChildrenKiB),
    peakKiB: per((r) => r.peakKiB),
    threads: per((r) => r.self.threads),
  }];
}

const f1 = (kib: number): string => MiB(kib).toFixed(1);

function processTable(readings: Reading[], perShard: PerShard[], floor: Reading | undefined): string {
  const head = ['process', 'VmRSS MiB', 'RssAnon MiB', 'RssFile MiB', 'RssShmem MiB', 'PSS MiB', 'threads', 'children: n, PSS MiB (RSS summed)', 'with children: RSS + children PSS, MiB', 'VmRSS − floor MiB', `VmRSS peak, ${PEAK_WINDOW_MS / 1000} s before, MiB`, 'rounds: VmRSS (burrowd: with children), MiB'];
  const rows = readings.map((r) => [
    r.label,
    f1(r.self.rssKiB),
    f1(r.self.anonKiB),
    f1(r.self.fileKiB),
    f1(r.self.shmemKiB),
    f1(r.self.pssKiB),
    String(r.self.threads),
    r.children.count ? `${r.children.count}: ${f1(r.children.pssKiB)} (${f1(r.children.rssKiB)})` : '—',
    r.kind === 'burrowd' ? f1(withChildrenKiB(r)) : '—',
    floor && r !== floor ? f1(r.self.rssKiB - floor.self.rssKiB) : '—',
    f1(r.peakKiB),
    (r.spread ?? []).map(f1).join(', '),
  ]);
  const shardRows = perShard.map((p) => [`per shard, ${p.db} (${p.formula})`, f1(p.rssKiB), f1(p.anonKiB), '', '', f1(p.pssKiB), p.threads.toFixed(1), '', f1(p.withChildrenKiB), '', '', '']);
  return [head, head.map(() => '---'), ...rows, ...shardRows].map((c) => `| ${c.join(' | ')} |`).join('\n');
}

function targetTable(readings: Reading[], perShard: PerShard[], counts: number[]): string {
  const verdict = (kib: number, limitMiB: number) => (MiB(kib) <= limitMiB ? 'met' : `missed by ${(MiB(kib) - limitMiB).toFixed(1)} MiB`);
  const two = readings.find((r) => r.label === label(2, undefined));
  const rows: string[][] = [
    two
      ? ['burrowd with its children, 2 shards (embedded database)', `≤ ${TARGET_TWO_SHARDS_MIB}`, f1(withChildrenKiB(two)), f1(two.peakKiB + two.children.pssKiB), verdict(withChildrenKiB(two), TARGET_TWO_SHARDS_MIB)]
      : ['burrowd with its children, 2 shards', `≤ ${TARGET_TWO_SHARDS_MIB}`, counts.includes(2) ? 'did not start' : 'not measured (--worker-counts lacks 2)', '', ''],
    ...perShard.map((p) => [`each further shard, ${p.db} (${p.formula})`, `≤ ${TARGET_PER_SHARD_MIB}`, f1(p.rssKiB), f1(p.peakKiB), verdict(p.rssKiB, TARGET_PER_SHARD_MIB)]),
    ...readings.filter((r) => r.kind === 'client').map((r) => [`client: ${r.label}`, `≤ ${TARGET_CLIENT_MIB}`, f1(r.self.rssKiB), f1(r.peakKiB), verdict(r.self.rssKiB, TARGET_CLIENT_MIB)]),
    // For scale: any Node process starts here, most of it node's own binary mapped from disk.
    ...readings.filter((r) => r.kind === 'floor').map((r) => ['for scale: a bare node, no burrow', '—', f1(r.self.rssKiB), f1(r.peakKiB), `${f1(r.self.fileKiB)} of it file-backed (RssFile)`]),
  ];
  const head = ['issue 23 §4 target (VmRSS)', 'limit MiB', 'measured MiB', `peak, ${PEAK_WINDOW_MS / 1000} s before, MiB`, 'verdict (on the measured figure)'];
  return [head, head.map(() => '---'), ...rows].map((c) => `| ${c.join(' | ')} |`).join('\n');
}

/** The same figures as Measurements (the JSON): burrow's processes under burrow, the floor under direct. */
function measurementsOf(readings: Reading[], perShard: PerShard[]): Measurement[] {
  const out: Measurement[] = [];
  const add = (c: string, floor: boolean, metric: string, kib: number, raw?: unknown) =>
    out.push({ case: c, metric, higherIsBetter: false, values: floor ? { direct: MiB(kib) } : { burrow: MiB(kib) }, ...(raw ? { raw: floor ? { direct: raw } : { burrow: raw } } : {}) });
  for (const r of readings) {
    const floor = r.kind === 'floor';
    add(r.label, floor, 'VmRSS MiB', r.self.rssKiB, r);
    add(r.label, floor, 'RssAnon MiB', r.self.anonKiB);
    add(r.label, floor, 'RssFile MiB', r.self.fileKiB);
    add(r.label, floor, 'PSS MiB', r.self.pssKiB);
    if (r.kind === 'burrowd') add(r.label, false, 'with children (VmRSS + children PSS) MiB', withChildrenKiB(r));
  }
  for (const p of perShard) {
    const c = `per shard, ${p.db} (${p.formula})`;
    add(c, false, 'VmRSS MiB', p.rssKiB, p);
    add(c, false, 'RssAnon MiB', p.anonKiB);
    add(c, false, 'with children MiB', p.withChildrenKiB);
  }
  return out;
}
