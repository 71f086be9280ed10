// Runs every compiled test file (dist/test/**/*.test.js) as its own process (each starts
// real servers) and ends with the one line CI reads: "N passed, N failed".
//
// Databases: every file runs on the embedded database (one PostgreSQL cluster the runner
// starts for the whole run; each test server gets a database of its own on it, dropped
// afterwards). When TEST_DATABASE_URL or DATABASE_URL names a reachable PostgreSQL, every file runs again
// against it (each test server gets its own schema there, dropped afterwards). The cluster
// files (test/cluster/: several burrowd on one database) run once: on that PostgreSQL when
// there is one, else on the embedded one.
//
// Order: the files that took longest last time start first (durations are kept in
// $TMPDIR/burrow-test-durations.json; a file with none yet counts as long), so the run does not
// end waiting on one long file started last. Both databases' jobs share one queue.
// TEST_PARALLEL=N runs N files at a time (default: the CPU count + 1, at least 3, at most 6).
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { availableParallelism, tmpdir } from 'node:os';
import { startSharedEmbedded } from './helpers/database.js';
import { MAX_LANES } from './helpers/ports.js';
import { ensureSystemPackages } from './helpers/system-packages.js';

const root = fileURLToPath(new URL('.', import.meta.url));
const FILE_TIMEOUT_MS = 120_000;
const filter = process.argv[2];

function findTests(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return findTests(p);
    return name.endsWith('.test.js') ? [p] : [];
  });
}

interface Result {
  file: string;
  db: string;
  passed: number;
  failed: number;
  output: string;
  ms: number;
}

/** Process groups of the test files now running (each file's pid leads its own). */
const running = new Set<number>();

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // the group is already gone
  }
}

// Detached groups do not get the terminal's Ctrl-C: pass it on, then stop.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    for (const pid of running) killGroup(pid);
    process.exit(130);
  });
}

function runFile(file: string, db: string, env: NodeJS.ProcessEnv): Promise<Result> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    // A process group of its own: a file killed at its time limit takes the servers, databases
    // and CLI children it started with it, instead of leaving them running.
    const child = spawn(process.execPath, ['--enable-source-maps', file], {
      env: { ...env, NO_COLOR: '1', FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    running.add(child.pid!);
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => {
      output += `\n[runner] killed after ${FILE_TIMEOUT_MS} ms\n`;
      killGroup(child.pid!);
    }, FILE_TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      running.delete(child.pid!);
      killGroup(child.pid!); // whatever the file left behind
      // uvu prints "Total: N / Passed: N" per file; a crash before that counts as one failure.
      const total = Number(/Total:\s+(\d+)/.exec(output)?.[1] ?? NaN);
      const passed = Number(/Passed:\s+(\d+)/.exec(output)?.[1] ?? 0);
      let failed = Number.isNaN(total) ? 1 : total - passed;
      if (code !== 0 && failed === 0) failed = 1;
      resolve({ file: relative(root, file), db, passed, failed, output, ms: Date.now() - t0 });
    });
  });
}

const DURATIONS = join(tmpdir(), 'burrow-test-durations.json');
type Durations = Record<string, number>; // "<db> <file>" → ms

function readDurations(): Durations {
  try {
    return JSON.parse(readFileSync(DURATIONS, 'utf8')) as Durations;
  } catch {
    return {};
  }
}

/** Keeps the last duration of every file that ran to completion (a subset run updates only its files). */
function writeDurations(results: Result[]): void {
  const d = readDurations();
  for (const r of results) if (!r.failed) d[`${r.db} ${r.file}`] = r.ms;
  try {
    writeFileSync(DURATIONS, JSON.stringify(d, null, 1));
  } catch {
    /* an unwritable temp dir only costs the ordering */
  }
}

async function pgReachable(url: string): Promise<boolean> {
  const { default: postgres } = await import('postgres');
  const sql = postgres(url, { max: 1, connect_timeout: 3, onnotice: () => undefined });
  try {
    await sql`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

async function main(): Promise<void> {
  const t0 = Date.now();
  let files = findTests(root).sort();
  if (filter) files = files.filter((f) => f.includes(filter));
  if (files.some((f) => f.includes('/acme/'))) ensureSystemPackages();
  const pgUrl = process.env.TEST_DATABASE_URL || process.env.DATABASE_URL || '';
  const baseEnv = { ...process.env };
  delete baseEnv.DATABASE_URL;
  delete baseEnv.TEST_DATABASE_URL;
  delete baseEnv.TEST_EMBEDDED_URL;
  // One cluster for all files instead of one per test server: saves a PostgreSQL start (~0.45 s
  // of CPU) for every server the suite starts.
  const embedded = await startSharedEmbedded();
  const pgUp = pgUrl !== '' && (await pgReachable(pgUrl));
  if (pgUrl && !pgUp) console.log(`PostgreSQL at ${pgUrl} does not answer: running on the embedded database only`);
  // A cluster's nodes reach their database by URL, as every node of a real one does: the
  // runner's embedded cluster is such a PostgreSQL server too, so the cluster files run once,
  // on the external PostgreSQL when there is one, else on the embedded one.
  const once = (file: string): boolean => relative(root, file).startsWith('cluster/');
  const jobs: { file: string; db: string; env: NodeJS.ProcessEnv }[] = files
    .filter((file) => !(pgUp && once(file)))
    .map((file) => ({ file, db: 'embedded', env: { ...baseEnv, TEST_EMBEDDED_URL: embedded.url } }));
  if (pgUp) for (const file of files) jobs.push({ file, db: 'postgres', env: { ...baseEnv, TEST_DATABASE_URL: pgUrl } });
  const known = readDurations();
  const expected = (j: { file: string; db: string }) => known[`${j.db} ${relative(root, j.file)}`] ?? Infinity;
  // Stable: files with no duration yet keep their order, first.
  jobs.sort((a, b) => (expected(a) === expected(b) ? 0 : expected(b) > expected(a) ? 1 : -1));
  const results: Result[] = [];
  // One more file than cores: the files spend much of their time waiting on sockets and child
  // processes (a two-core run at 2 files used 1.2 cores), and past that, deadlines start to bite.
  const parallel = Math.min(MAX_LANES, Number(process.env.TEST_PARALLEL) || Math.max(3, Math.min(MAX_LANES, availableParallelism() + 1)));
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async (_, lane) => {
      while (next < jobs.length) {
        const job = jobs[next++]!;
        // The lane owns a block of fixed ports (test/helpers/ports.ts) while its file runs.
        const r = await runFile(job.file, job.db, { ...job.env, TEST_LANE: String(lane) });
        results.push(r);
        const mark = r.failed ? 'FAIL' : 'ok  ';
        console.log(`${mark} [${r.db}] ${r.file}  ${r.passed} passed, ${r.failed} failed  (${(r.ms / 1000).toFixed(1)} s)`);
        if (r.failed) console.log(r.output.replace(/^/gm, '    | '));
      }
    }),
  );
  await embedded.stop();
  for (const db of ['embedded', 'postgres']) {
    const rs = results.filter((r) => r.db === db);
    if (rs.length) console.log(`${db}: ${rs.reduce((a, r) => a + r.passed, 0)} passed, ${rs.reduce((a, r) => a + r.failed, 0)} failed`);
  }
  writeDurations(results);
  const passed = results.reduce((a, r) => a + r.passed, 0);
  const failed = results.reduce((a, r) => a + r.failed, 0);
  console.log(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed > 0 ? 1 : 0;
}

await main();
