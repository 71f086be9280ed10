// Every process the harness starts goes through here, so one cleanup can end them all:
// on normal exit, on an error, and on SIGINT/SIGTERM.
//
//   harness ──spawn(detached)──▶ child = leader of its own process group
//   cleanup: SIGTERM to each group (-pgid), then SIGKILL to whatever is left after a grace
//
// Children write stdout/stderr to files in the run's temp dir instead of pipes: a pipe the
// harness must drain would put the harness's own event loop (and CPU) in the measured path,
// and a pipe nobody drains blocks the child (burrow's CLI prints a line per request).
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, closeSync, readFileSync, existsSync, readdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const TERM_GRACE_MS = 2_000;

export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  stdoutPath: string;
  stderrPath: string;
  /** Resolves with the exit code (or signal name) once the process has ended. */
  exited: Promise<number | string>;
  isRunning(): boolean;
  stdout(): string;
  stderr(): string;
}

const live = new Set<Proc>();
const tempDirs: string[] = [];
let cleaning: Promise<void> | null = null;

/** A fresh directory under the system temp dir, removed by cleanup(). */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `burrow-bench-${prefix}-`));
  tempDirs.push(dir);
  return dir;
}

let outDir: string | null = null;
function logDir(): string {
  outDir ??= tempDir('logs');
  return outDir;
}

let seq = 0;
export function start(
  name: string,
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Proc {
  const base = join(logDir(), `${++seq}-${name.replace(/[^a-z0-9-]/gi, '_')}`);
  const stdoutPath = `${base}.out`;
  const stderrPath = `${base}.err`;
  const outFd = openSync(stdoutPath, 'w');
  const errFd = openSync(stderrPath, 'w');
  const child = spawn(cmd, args, {
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    stdio: ['ignore', outFd, errFd],
    // Own process group: one kill(-pid) reaches the child's children too (nginx workers,
    // a shell's exec'd program).
    detached: true,
  });
  closeSync(outFd);
  closeSync(errFd);
  let running = true;
  const exited = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => {
      running = false;
      live.delete(proc);
      resolve(code ?? signal ?? -1);
    });
    child.on('error', (err) => {
      running = false;
      live.delete(proc);
      resolve(`spawn error: ${err.message}`);
    });
  });
  const read = (p: string) => (existsSync(p) ? readFileSync(p, 'utf8') : '');
  const proc: Proc = {
    name,
    child,
    pid: child.pid ?? -1,
    stdoutPath,
    stderrPath,
    exited,
    isRunning: () => running,
    stdout: () => read(stdoutPath),
    stderr: () => read(stderrPath),
  };
  live.add(proc);
  return proc;
}

/** Ends one process group: SIGTERM, then SIGKILL after a grace period. */
export async function stop(proc: Proc, graceMs = TERM_GRACE_MS): Promise<void> {
  if (!proc.isRunning()) return;
  signalGroup(proc.pid, 'SIGTERM');
  const timer = new Promise<'timeout'>((r) => setTimeout(r, graceMs, 'timeout').unref());
  if ((await Promise.race([proc.exited, timer])) === 'timeout') {
    signalGroup(proc.pid, 'SIGKILL');
    await Promise.race([proc.exited, new Promise((r) => setTimeout(r, 1_000).unref())]);
  }
}

function signalGroup(pid: number, sig: NodeJS.Signals): void {
  if (pid <= 0) return;
  try {
    process.kill(-pid, sig);
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      /* already gone */
    }
  }
}

/** Runs a command to completion (bounded by timeoutMs) and returns its output. */
export async function run(
  name: string,
  cmd: string,
  args: string[],
  timeoutMs: number,
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number | string; stdout: string; stderr: string }> {
  const p = start(name, cmd, args, opts);
  const timer = new Promise<'timeout'>((r) => setTimeout(r, timeoutMs, 'timeout').unref());
  const res = await Promise.race([p.exited, timer]);
  if (res === 'timeout') {
    await stop(p);
    throw new Error(`${name} did not finish within ${timeoutMs} ms\n${tail(p.stderr())}`);
  }
  return { code: res, stdout: p.stdout(), stderr: p.stderr() };
}

/** Polls a process's output until `match` finds something, with a deadline. */
export async function waitForOutput<T>(
  proc: Proc,
  stream: 'stdout' | 'stderr',
  match: (text: string) => T | null | undefined,
  timeoutMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = stream === 'stdout' ? proc.stdout() : proc.stderr();
    const found = match(text);
    if (found !== null && found !== undefined) return found;
    if (!proc.isRunning()) {
      throw new Error(`${proc.name} exited before ${what}\nstdout: ${tail(proc.stdout())}\nstderr: ${tail(proc.stderr())}`);
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} from ${proc.name}\nstdout: ${tail(proc.stdout())}\nstderr: ${tail(proc.stderr())}`);
    }
    await sleep(50);
  }
}

export function tail(text: string, lines = 15): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** All descendants of pid (from /proc), for RSS sums and for stragglers at cleanup. */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Field 4 (ppid) comes after the ")" that ends the command name, which may hold spaces.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      /* exited while we looked */
    }
  }
  const out: number[] = [];
  const stack = [pid];
  while (stack.length > 0) {
    for (const c of children.get(stack.pop()!) ?? []) {
      out.push(c);
      stack.push(c);
    }
  }
  return out;
}

/** Ends every process still running, removes temp dirs. Safe to call more than once. */
export function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    const procs = [...live].reverse(); // newest first: clients before the servers they use
    // sshd's per-connection children leave its process group (setsid); collect them first.
    const stragglers = procs.flatMap((p) => descendants(p.pid));
    await Promise.all(procs.map((p) => stop(p)));
    for (const pid of stragglers) signalGroup(pid, 'SIGKILL');
    if (!process.env.BENCH_KEEP_TMP) {
      for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
    }
  })();
  return cleaning;
}

/** Last resort on a synchronous exit path: SIGKILL every group we started. */
export function killAllNow(): void {
  for (const p of live) signalGroup(p.pid, 'SIGKILL');
}
