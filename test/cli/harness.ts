// Shared by the CLI suites: run the compiled `burrow` binary as a child process with its own
// config directory, one burrowd per suite with its local services (CliSuite), a visitor's
// request through a tunnel, and small waits with deadlines (uvu has no per-test timeout).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, request, type RequestListener } from 'node:http';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withDeadline } from '../helpers/deadline.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { startServer, type StartOptions, type TestServer } from '../helpers/server.js';

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
  /** The working directory (default: an empty one, so a ./burrow.yml of the checkout is never read). */
  cwd?: string;
}

let emptyDir: string | null = null;
/** An empty working directory for CLI children, removed when this test process exits. */
function emptyCwd(): string {
  if (!emptyDir) {
    const dir = mkdtempSync(join(tmpdir(), 'burrow-cwd-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    emptyDir = dir;
  }
  return emptyDir;
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
    const child = spawn(process.execPath, [CLI, ...args], { env: cliEnv(c), cwd: c.cwd ?? emptyCwd(), stdio: ['ignore', 'pipe', 'pipe'] });
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
  const child = spawn(process.execPath, [CLI, ...args], { env: cliEnv(c), cwd: c.cwd ?? emptyCwd(), stdio: ['ignore', 'pipe', 'pipe'] }) as ChildProcess & {
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
  // Killed by a signal, a child has no exit code: it has exited all the same (null), and its
  // 'exit' event has passed; waiting for it would only time out.
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return withDeadline(new Promise((resolve) => child.once('exit', (code) => resolve(code))), ms, what);
}

/**
 * One burrowd and one config home shared by the tests of a CLI suite (its tests use names of
 * their own, so none needs a fresh server: a server per test would cost its start each time),
 * with the local services and `burrow http|tcp` children the suite started; stop() ends them all.
 */
export class CliSuite {
  readonly burrows = new RunningBurrows();
  private readonly services: Server[] = [];

  private constructor(
    readonly srv: TestServer,
    readonly home: { dir: string; remove: () => void },
  ) {}

  static async start(opts?: StartOptions): Promise<CliSuite> {
    return new CliSuite(await startServer(opts), tempDir());
  }

  /** The seed admin as a CLI caller. */
  get admin(): CliEnv {
    return adminOf(this.srv, this.home.dir);
  }

  /** A new member with a key (both scopes unless given), as a CLI caller. */
  member(user: { email: string; name?: string }, scopes?: string[]): ReturnType<typeof memberOf> {
    return memberOf(this.srv, this.home.dir, user, scopes);
  }

  /** `service` (a tunnel's local target) listening on a loopback port, closed by stop(). */
  listen(service: Server): Promise<number> {
    this.services.push(service);
    return new Promise((resolve) => service.listen(0, '127.0.0.1', () => resolve((service.address() as { port: number }).port)));
  }

  /** A local HTTP service answering with `handler` (default: "ok"); its port. */
  http(handler: RequestListener = (_req, res) => res.end('ok')): Promise<number> {
    return this.listen(createHttpServer(handler));
  }

  /** A local TCP echo service; its port. */
  echo(): Promise<number> {
    return this.listen(createServer((s) => s.pipe(s)));
  }

  async stop(): Promise<void> {
    this.burrows.killAll();
    for (const s of this.services) s.close();
    await this.srv.stop();
    this.home.remove();
  }
}

/** `admin` creates team `name` and adds `userId` to it. */
export async function teamWith(admin: CliEnv, name: string, userId: string): Promise<void> {
  for (const args of [['teams', 'create', name], ['teams', 'add-member', name, userId]]) {
    const r = await burrow(admin, args);
    if (r.code !== 0) throw new Error(`burrow ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  }
}

/** A visitor's GET to burrowd at `port` for the tunnel host `host` (node:http: fetch would not send our Host header). */
export function visit(port: number, host: string, path: string): Promise<{ status: number; body: string }> {
  return withDeadline(
    new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, headers: { host }, agent: false }, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end();
    }),
    10_000,
    `GET ${host}${path}`,
  );
}

/** Send `text` through a TCP tunnel's public port and read until the far side closes (an echo). */
export function tcpEcho(port: number, text: string): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => s.end(text));
      let data = '';
      s.on('data', (d) => (data += d));
      s.on('end', () => resolve(data));
      s.on('error', reject);
    }),
    10_000,
    'tcp echo',
  );
}
