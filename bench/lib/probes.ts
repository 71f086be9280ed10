// What the http scenario reads from a target's processes besides /proc CPU time: system calls
// (perf stat) and garbage collection (node --trace-gc), and, with --perf, a perf record of them.
//
// On this machine (a Firecracker VM) perf cannot attach to a running process (`-p` reads
// "<not counted>"), but counts and samples what it starts, with its children and threads. So a
// probed process is started *under* perf:
//
//   perf stat -I 100 -x, -e raw_syscalls:sys_enter -o <file> -- node --trace-gc … script
//   perf record -g -e cpu-clock -D -1 --control fifo:<ctl>,<ack> -o <file> -- node --trace-gc --perf-basic-prof … script
//
// perf stat appends one line per 100 ms; a window's count is the sum of the lines written
// during it (±100 ms at each end). --trace-gc prints one line per collection on the process's
// stdout (every thread's isolate); a window's GC time is the sum of the pauses printed during
// it. perf record starts disabled and is enabled for the profiled window only.
import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { start, tempDir, type Proc } from './procs.js';

export interface ProbeSettings {
  /** run node with --trace-gc (the http scenarios) */
  traceGc: boolean;
  /** count system calls with perf stat when perf works here */
  syscalls: boolean;
  /** --perf: record with perf record (instead of perf stat) into this directory */
  perfDir?: string;
}

/** A node process started under the probes: its Proc, and where each probe writes. */
export interface Probed {
  proc: Proc;
  gcLog?: string;
  syscallLog?: string;
  perfData?: string;
  perfCtl?: { ctl: string; ack: string };
}

let perfWorks: boolean | undefined;
/** perf stat counts raw_syscalls:sys_enter of a process it starts (false: no perf, or the tracepoint is not supported). */
export function perfStatWorks(): boolean {
  if (perfWorks === undefined) {
    try {
      const out = execFileSync('perf', ['stat', '-x,', '-e', 'raw_syscalls:sys_enter', '--', 'true'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 10_000 });
      perfWorks = !/not supported|not counted/.test(out);
    } catch (err) {
      const text = String((err as { stderr?: string }).stderr ?? '');
      perfWorks = text !== '' && /^\d+,/m.test(text) && !/not supported|not counted/.test(text);
    }
  }
  return perfWorks;
}

/**
 * Starts a program that is not Node (sshd, ssh) under perf stat when system calls are counted;
 * plainly otherwise (and in a --perf run, which records the Node targets only).
 */
export function startProbed(name: string, cmd: string, args: string[], probes: ProbeSettings | undefined): Probed {
  if (probes?.syscalls && !probes.perfDir && perfStatWorks()) {
    const syscallLog = join(tempDir('perf-stat'), 'stat.csv');
    return { proc: start(name, 'perf', ['stat', '-I', '100', '-x,', '-e', 'raw_syscalls:sys_enter', '-o', syscallLog, '--', cmd, ...args]), syscallLog };
  }
  return { proc: start(name, cmd, args) };
}

let seq = 0;
/** Starts `node [nodeArgs] script…` under whichever probes are on. */
export function startNode(name: string, args: string[], probes: ProbeSettings | undefined, opts: { env?: NodeJS.ProcessEnv } = {}): Probed {
  const nodeArgs = [...(probes?.traceGc ? ['--trace-gc'] : []), ...(probes?.perfDir ? ['--perf-basic-prof'] : [])];
  const node = [process.execPath, ...nodeArgs, ...args];
  if (probes?.perfDir) {
    const dir = tempDir('perf-ctl');
    const ctl = join(dir, 'ctl');
    const ack = join(dir, 'ack');
    execFileSync('mkfifo', [ctl, ack]);
    const perfData = join(probes.perfDir, `${++seq}-${name}.perf.data`);
    const proc = start(name, 'perf', ['record', '-q', '-g', '-e', 'cpu-clock', '-D', '-1', '--control', `fifo:${ctl},${ack}`, '-o', perfData, '--', ...node], opts);
    return { proc, perfData, perfCtl: { ctl, ack }, ...(probes.traceGc ? { gcLog: proc.stdoutPath } : {}) };
  }
  if (probes?.syscalls && perfStatWorks()) {
    const syscallLog = join(tempDir('perf-stat'), 'stat.csv');
    const proc = start(name, 'perf', ['stat', '-I', '100', '-x,', '-e', 'raw_syscalls:sys_enter', '-o', syscallLog, '--', ...node], opts);
    return { proc, syscallLog, ...(probes.traceGc ? { gcLog: proc.stdoutPath } : {}) };
  }
  const proc = start(name, process.execPath, [...nodeArgs, ...args], opts);
  return { proc, ...(probes?.traceGc ? { gcLog: proc.stdoutPath } : {}) };
}

/** A process's output without the probes' lines (GC traces, perf's "Events enabled"). */
export function withoutProbeLines(text: string): string {
  return text.replace(/^(\[\d+:0x[0-9a-f]+\]\s+\d+ ms: .*|\s*Events (en|dis)abled)\n/gm, '');
}

/** Where each log of these processes ends now: the start of a window. */
export function mark(list: Probed[]): Map<string, number> {
  const at = new Map<string, number>();
  for (const p of list) {
    for (const f of [p.gcLog, p.syscallLog]) if (f) at.set(f, existsSync(f) ? statSync(f).size : 0);
  }
  return at;
}

function since(file: string, from: number): string {
  if (!existsSync(file)) return '';
  const size = statSync(file).size;
  if (size <= from) return '';
  const buf = Buffer.allocUnsafe(size - from);
  const fd = openSync(file, 'r');
  try {
    readSync(fd, buf, 0, buf.length, from);
  } finally {
    closeSync(fd);
  }
  return buf.toString('utf8');
}

export interface WindowFigures {
  /** system calls in the window, or NaN when not counted */
  syscalls: number;
  /** GC pause time in the window, ms (scavenges, mark-compact pauses and incremental marking steps on the JS threads); NaN when not traced */
  gcMs: number;
  gcCount: number;
}

/** The system calls and GC of these processes since `from` (mark()). */
export function windowFigures(list: Probed[], from: Map<string, number>): WindowFigures {
  let syscalls = 0;
  let counted = false;
  let gcMs = 0;
  let gcCount = 0;
  let traced = false;
  for (const p of list) {
    if (p.syscallLog) {
      counted = true;
      // "   1.200345,1234,,raw_syscalls:sys_enter,…"
      for (const m of since(p.syscallLog, from.get(p.syscallLog) ?? 0).matchAll(/^\s*[\d.]+,(\d+),/gm)) syscalls += Number(m[1]);
    }
    if (p.gcLog) {
      traced = true;
      for (const line of since(p.gcLog, from.get(p.gcLog) ?? 0).split('\n')) {
        if (!/^\[\d+:0x[0-9a-f]+\]\s+\d+ ms: /.test(line)) continue;
        const pause = /MB, ([\d.]+) \/ [\d.]+ ms/.exec(line);
        if (!pause) continue;
        gcCount++;
        gcMs += Number(pause[1]);
        const steps = /\(\+ ([\d.]+) ms in \d+ steps/.exec(line);
        if (steps) gcMs += Number(steps[1]);
      }
    }
  }
  return { syscalls: counted ? syscalls : NaN, gcMs: traced ? gcMs : NaN, gcCount };
}

/** Turns perf record on or off in these processes (started with --perf). */
export function perfControl(list: Probed[], what: 'enable' | 'disable'): void {
  for (const p of list) {
    if (!p.perfCtl || !p.proc.isRunning()) continue;
    writeFileSync(p.perfCtl.ctl, `${what}\n`);
    // "ack\n": the change is in effect (perf keeps the fifo open: read the 4 bytes, not to EOF)
    const fd = openSync(p.perfCtl.ack, 'r');
    try {
      readSync(fd, Buffer.alloc(4), 0, 4, null);
    } finally {
      closeSync(fd);
    }
  }
}
