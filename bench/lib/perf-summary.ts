// `perf record` of a Node process (started with --perf-basic-prof, lib/probes.ts) summed by
// what the CPU was doing: each sample is charged to the function it was in (self time), and
// each function to a category by its name and the object it lives in.
import { execFileSync } from 'node:child_process';

export const CATEGORIES = ['kernel', 'GC', 'V8 runtime / IC', 'JIT code (JS)', 'builtins', 'compiler', 'node / libuv (C++)', 'libc and other'] as const;
export type Category = (typeof CATEGORIES)[number];

const GC = /Heap|Scaveng|MarkCompact|Marking|Sweep|Evacuat|GCTracer|cppgc|RememberedSet|SlotSet|Semi[Ss]pace|Promot|RootScavenge|ObjectCache|Compactor|Minor/;
const COMPILER = /compiler::|maglev::|baseline::|Turbofan|Compil|Parser|Parse[A-Z]|::Ast|BytecodeGenerator|interpreter::Bytecode(?!Handler)|Deoptimiz|Scanner/;

export function categorize(dso: string, sym: string, kernel: boolean): Category {
  if (kernel || dso.includes('kernel')) return 'kernel';
  // --perf-basic-prof's map: "JS:*name file:line" (optimized), "JS:~…" (interpreted / baseline),
  // "Builtin:…", "BytecodeHandler:…", "Stub:…", "RegExp:…"
  if (dso.startsWith('[JIT]') || dso.includes('perf-')) {
    if (/^(JS|LazyCompile|Function|Script|Eval):/.test(sym)) return 'JIT code (JS)';
    if (/^(Builtin|BytecodeHandler|RegExp):/.test(sym)) return 'builtins';
    return 'V8 runtime / IC';
  }
  if (sym.startsWith('Builtins_')) return 'builtins';
  if (/v8::|Runtime_|V8_Fatal|\bv8_/.test(sym)) {
    if (GC.test(sym)) return 'GC';
    if (COMPILER.test(sym)) return 'compiler';
    return 'V8 runtime / IC';
  }
  if (/node::|uv_|uv__|llhttp|napi_/.test(sym) || dso === 'node') return 'node / libuv (C++)';
  return 'libc and other';
}

export interface PerfSummary {
  samples: number;
  /** share of the samples, % */
  byCategory: Record<Category, number>;
  /** the functions with the most self time: [share %, category, name] */
  top: [number, Category, string][];
}

/** Reads a perf.data file (perf report) into categories and top functions. */
export function summarizePerf(file: string, topN = 25): PerfSummary {
  const text = execFileSync('perf', ['report', '-i', file, '--stdio', '--no-children', '--sort', 'dso,sym', '-g', 'none', '--percent-limit', '0'], {
    encoding: 'utf8',
    maxBuffer: 256 << 20,
    stdio: ['ignore', 'pipe', 'ignore'],
    timeout: 300_000,
  });
  const byCategory = Object.fromEntries(CATEGORIES.map((c) => [c, 0])) as Record<Category, number>;
  const top: [number, Category, string][] = [];
  const samples = Number(/^# Samples: (\d+)([KM]?)/m.exec(text)?.[1] ?? NaN) * ({ K: 1e3, M: 1e6 }[/^# Samples: \d+([KM]?)/m.exec(text)?.[1] ?? ''] ?? 1);
  // "    54.03%  [JIT] tid 8574       [.] JS:* [eval]:1:22"
  for (const m of text.matchAll(/^\s+([\d.]+)%\s+(.+?)\s+\[([.k])\]\s+(.*?)\s*$/gm)) {
    const pct = Number(m[1]);
    const c = categorize(m[2]!, m[4]!, m[3] === 'k');
    byCategory[c] += pct;
    top.push([pct, c, `${m[4]} (${m[2]})`]);
  }
  top.sort((a, b) => b[0] - a[0]);
  return { samples, byCategory, top: top.slice(0, topN) };
}

export function formatPerfSummary(name: string, s: PerfSummary): string {
  return [
    `${name}: ${Number.isFinite(s.samples) ? `~${s.samples} samples` : 'samples unknown'} (cpu-clock, 4 kHz), share of the process's CPU`,
    ...CATEGORIES.map((c) => `  ${s.byCategory[c].toFixed(1).padStart(5)}%  ${c}`),
    '  top functions (self):',
    ...s.top.map(([pct, c, fn]) => `  ${pct.toFixed(2).padStart(6)}%  [${c}] ${fn}`),
  ].join('\n');
}
