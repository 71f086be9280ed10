// Shared by the CLI suites: run the compiled `burrow` binary as a child process with its own
// config directory, and small waits with deadlines (uvu has no per-test timeout).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withDeadline } from '../helpers/deadline.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import type { TestServer } from '../helpers/server.js';

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

/** The seed admin of `srv` as a CLI caller (server and key from the environment). */
export function adminOf(srv: TestServer, configDir: string): CliEnv {
  return { configDir, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: srv.adminKey } };
}

/** A new member of `srv` with a key (both scopes unless given), as a CLI caller. */
export async function memberOf(
  srv: TestServer,
  configDir: string,
  user: { email: string; name?: string },
  scopes?: string[],
): Promise<{ id: string; email: string; cli: CliEnv }> {
  const u = await createUser(srv, user);
  return { ...u, cli: { configDir, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: await createKeyFor(srv, u.id, { scopes }) } } };
}

/** `burrow http|tcp` children of one suite: started, read until their URL, killed together. */
export class RunningBurrows {
  private readonly children: ChildProcess[] = [];
  start(c: CliEnv, args: string[]): ReturnType<typeof spawnBurrow> {
    const child = spawnBurrow(c, args);
    this.children.push(child);
    return child;
  }
  /** Also kill `child` (started some other way) at the end. */
  track(child: ChildProcess): void {
    this.children.push(child);
  }
  /** The first stdout line (the public URL, or the first JSON event). */
  firstLine(child: ReturnType<typeof spawnBurrow>): Promise<string> {
    return waitFor(() => (child.output.stdout.includes('\n') ? child.output.stdout.split('\n')[0] : undefined), 15_000, 'first stdout line');
  }
  killAll(): void {
    for (const c of this.children) c.kill('SIGKILL');
  }
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
