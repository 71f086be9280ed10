// Shared by the CLI suites: run the compiled `burrow` binary as a child process with its own
// config directory, and small waits with deadlines (uvu has no per-test timeout).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withDeadline } from '../helpers/deadline.js';

export { CLI } from '../helpers/server.js';
import { CLI } from '../helpers/server.js';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliEnv {
  /** XDG_CONFIG_HOME for this run: the config lands in <dir>/burrow/config.json. */
  configDir: string;
  env?: Record<string, string | undefined>;
}

/** The environment a CLI child sees: nothing of the caller's BURROW_* or XDG settings leaks in. */
export function cliEnv(c: CliEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('BURROW_') || k === 'XDG_CONFIG_HOME') delete env[k];
  env.XDG_CONFIG_HOME = c.configDir;
  env.NO_COLOR = '1';
  for (const [k, v] of Object.entries(c.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

/** Run `burrow ...args` to completion (deadline: 20 s). */
export function burrow(c: CliEnv, args: string[], deadlineMs = 20_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: cliEnv(c), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`burrow ${args.join(' ')} did not finish within ${deadlineMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, deadlineMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Start `burrow ...args` and leave it running (for http/tcp). */
export function spawnBurrow(c: CliEnv, args: string[]): ChildProcess & { output: { stdout: string; stderr: string } } {
  const child = spawn(process.execPath, [CLI, ...args], { env: cliEnv(c), stdio: ['ignore', 'pipe', 'pipe'] }) as ChildProcess & {
    output: { stdout: string; stderr: string };
  };
  child.output = { stdout: '', stderr: '' };
  child.stdout!.on('data', (d) => (child.output.stdout += d));
  child.stderr!.on('data', (d) => (child.output.stderr += d));
  return child;
}

export function tempDir(prefix = 'burrow-cli-'): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A loopback port nothing listens on (bound, then closed): "server unreachable". */
export function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Poll until `check` returns a value (not undefined), or fail after `ms`. */
export async function waitFor<T>(check: () => T | undefined, ms: number, what: string): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Wait for a child to exit (deadline), returning its code. */
export function exitOf(child: ChildProcess, ms: number, what: string): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return withDeadline(new Promise((resolve) => child.once('exit', (code) => resolve(code))), ms, what);
}
