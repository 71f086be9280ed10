// Top self-time functions of the V8 CPU profiles written by `npm run bench -- <scenario> --cpu-prof`:
//   node dist/bench/profile-summary.js bench/profiles/<dir> [topN]
// One block per .cpuprofile (burrowd's main thread, each shard worker, each client), so the
// hot path shows without opening DevTools. Idle time and GC appear as their own rows.
// With --perf the directory holds perf record files (*.perf.data) instead: each is summed by
// category (kernel, GC, V8 runtime, JIT code, builtins, compiler) and its top functions.
// The V8 profiler samples wall time (a thread descheduled inside a write is charged to the
// write); perf samples CPU time.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, basename } from 'node:path';
import { formatPerfSummary, summarizePerf } from './lib/perf-summary.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const [dir, topText] = process.argv.slice(2);
if (!dir) {
  console.error('usage: node dist/bench/profile-summary.js <profile dir> [topN]');
  process.exit(2);
}
const top = Number(topText ?? 15);

for (const name of readdirSync(dir).filter((f) => f.endsWith('.perf.data')).sort()) {
  console.log(`\n${formatPerfSummary(name.replace(/\.perf\.data$/, ''), summarizePerf(join(dir, name), top))}`);
}

for (const name of readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')).sort()) {
  const path = join(dir, name);
  const p = JSON.parse(readFileSync(path, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<string, number>();
  let totalUs = 0;
  p.samples.forEach((id, i) => {
    const dt = p.timeDeltas[i] ?? 0;
    totalUs += dt;
    const f = byId.get(id)!.callFrame;
    const where = f.url ? `${basename(f.url)}:${f.lineNumber + 1}` : '';
    const key = `${f.functionName || '(anonymous)'} ${where}`.trim();
    selfUs.set(key, (selfUs.get(key) ?? 0) + dt);
  });
  const idle = selfUs.get('(idle)') ?? 0;
  console.log(`\n${name} (${(statSync(path).size / 1024).toFixed(0)} KiB): ${(totalUs / 1e6).toFixed(1)} s sampled, ${(((totalUs - idle) / totalUs) * 100).toFixed(0)}% busy`);
  for (const [fn, us] of [...selfUs].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`  ${((us / totalUs) * 100).toFixed(1).padStart(5)}%  ${fn}`);
  }
}
