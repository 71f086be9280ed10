// Runs every compiled test file (dist/test/**/*.test.js) as its own process (each starts
// real servers) and ends with the one line CI reads: "N passed, N failed".
//
// Databases: every file runs on the embedded database (a PostgreSQL child per test server).
// When TEST_DATABASE_URL or DATABASE_URL names a reachable PostgreSQL, every file runs again
// against it (each test server gets its own schema there, dropped afterwards).
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { availableParallelism } from 'node:os';

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

function runFile(file: string, db: string, env: NodeJS.ProcessEnv): Promise<Result> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--enable-source-maps', file], {
      env: { ...env, NO_COLOR: '1', FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => {
      output += `\n[runner] killed after ${FILE_TIMEOUT_MS} ms\n`;
      child.kill('SIGKILL');
    }, FILE_TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      // uvu prints "Total: N / Passed: N" per file; a crash before that counts as one failure.
      const total = Number(/Total:\s+(\d+)/.exec(output)?.[1] ?? NaN);
      const passed = Number(/Passed:\s+(\d+)/.exec(output)?.[1] ?? 0);
      let failed = Number.isNaN(total) ? 1 : total - passed;
      if (code !== 0 && failed === 0) failed = 1;
      resolve({ file: relative(root, file), db, passed, failed, output, ms: Date.now() - t0 });
    });
  });
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
  const pgUrl = process.env.TEST_DATABASE_URL || process.env.DATABASE_URL || '';
  const baseEnv = { ...process.env };
  delete baseEnv.DATABASE_URL;
  delete baseEnv.TEST_DATABASE_URL;
  const jobs: { file: string; db: string; env: NodeJS.ProcessEnv }[] = files.map((file) => ({ file, db: 'embedded', env: baseEnv }));
  if (pgUrl && (await pgReachable(pgUrl))) {
    for (const file of files) jobs.push({ file, db: 'postgres', env: { ...baseEnv, TEST_DATABASE_URL: pgUrl } });
  } else if (pgUrl) {
    console.log(`PostgreSQL at ${pgUrl} does not answer: running on the embedded database only`);
  }
  const results: Result[] = [];
  const parallel = Math.max(2, Math.min(4, availableParallelism()));
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < jobs.length) {
        const job = jobs[next++]!;
        const r = await runFile(job.file, job.db, job.env);
        results.push(r);
        const mark = r.failed ? 'FAIL' : 'ok  ';
        console.log(`${mark} [${r.db}] ${r.file}  ${r.passed} passed, ${r.failed} failed  (${(r.ms / 1000).toFixed(1)} s)`);
        if (r.failed) console.log(r.output.replace(/^/gm, '    | '));
      }
    }),
  );
  for (const db of ['embedded', 'postgres']) {
    const rs = results.filter((r) => r.db === db);
    if (rs.length) console.log(`${db}: ${rs.reduce((a, r) => a + r.passed, 0)} passed, ${rs.reduce((a, r) => a + r.failed, 0)} failed`);
  }
  const passed = results.reduce((a, r) => a + r.passed, 0);
  const failed = results.reduce((a, r) => a + r.failed, 0);
  console.log(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed > 0 ? 1 : 0;
}

await main();
