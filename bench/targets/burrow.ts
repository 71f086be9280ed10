// burrow itself: the real burrowd (dist/src/main.js) on loopback with a fresh embedded
// database, and one `burrow http|tcp` CLI process (dist/src/cli/main.js) per exposed service.
//
//   load tool ──HTTP, Host: <id>.localhost──▶ burrowd :port ══ control WebSocket ══▶ burrow CLI ──▶ origin
//   load tool ──HTTPS──▶ burrowd :port (--tls-cert: TLS ends here) ══ wss ══▶ burrow CLI ──HTTP──▶ origin
//   load tool ──TCP──▶ burrowd tcp tunnel port ══ control WebSocket ══▶ burrow CLI ──▶ origin
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { start, stop, tempDir, waitForOutput, descendants, type Proc } from '../lib/procs.js';
import { LOOPBACK } from '../lib/net.js';
import { Unavailable, type Endpoint, type Target } from './target.js';
import type { Certificate } from '../lib/tls.js';
import { startNode, withoutProbeLines, type ProbeSettings, type Probed } from '../lib/probes.js';

const START_TIMEOUT_MS = 30_000;
/** SIGTERM → exit: burrowd drains, and --cpu-prof writes its profiles on the way out. */
const STOP_GRACE_MS = 10_000;
const KEY_RE = /\bbk_[A-Za-z0-9]{12}_[A-Za-z0-9]{43}\b/;

export interface BurrowOptions {
  /** 'burrow1' is the one-shard comparison target (workers 1); 'burrow-mesh' the one without lanes. */
  name: 'burrow' | 'burrow1' | 'burrow-mesh';
  repoRoot: string;
  /** false: the CLI runs with --no-lanes (http tunnels), so cross-shard visitors take the mesh. */
  lanes?: boolean;
  /** --workers for burrowd; undefined keeps burrowd's default (CPU count). */
  workers?: number;
  /** --database-url for burrowd; undefined: the embedded database in a temp --data-dir. */
  databaseUrl?: string;
  /** Directory for V8 CPU profiles of burrowd (every thread) and the clients, or none. */
  cpuProfDir?: string;
  /** burrowd serves HTTPS with this certificate (--tls-cert/--tls-key); the CLI trusts it (--ca). */
  tls?: Certificate;
  /** --trace-gc, perf stat or perf record around burrowd and the CLI (lib/probes.ts) */
  probes?: ProbeSettings;
  /** burrowd --domain (tunnels are <id>.<domain>); undefined: burrowd's default, localhost. */
  domain?: string;
}

/** burrow, which can also expose a local service by a URL of the CLI's (h2c://…: a gRPC service). */
export interface BurrowTarget extends Target {
  /** `burrow http <local>`: an HTTP tunnel to `local` as the CLI takes it (h2c://127.0.0.1:port). */
  exposeLocal(local: string): Promise<Endpoint>;
}

export async function burrowTarget(opts: BurrowOptions): Promise<BurrowTarget> {
  const serverJs = join(opts.repoRoot, 'dist', 'src', 'main.js');
  const cliJs = join(opts.repoRoot, 'dist', 'src', 'cli', 'main.js');
  for (const [what, file] of [
    ['burrowd (src/main.ts)', serverJs],
    ['the burrow CLI (src/cli/main.ts)', cliJs],
  ] as const) {
    if (!existsSync(file)) throw new Unavailable(opts.name, `${what} is not built: ${file} missing`);
  }

  const dataDir = tempDir('burrowd');
  // --cpu-prof writes one .cpuprofile per thread when the process exits (burrowd and the CLI
  // both exit cleanly on SIGTERM, which is how they are stopped).
  const prof = opts.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir] : [];
  // Every load tool connects from 127.0.0.1: the per-visitor-address bound (128 per shard by
  // default, a guard for a public edge) would answer 429 to part of the 256-connection rows.
  // Every tunnel uses the one seeded key: the per-user bounds on control connections (32 by
  // default), live tunnels (100) and registrations a minute (120) would refuse most of the
  // idle scenario's thousands.
  const perUser = String(BENCH_TUNNELS_PER_USER);
  const args = [...prof, serverJs, '--host', LOOPBACK, '--port', '0', '--seed-api-key', '--data-dir', dataDir, '--log-level', 'warn', '--visitor-concurrency', String(BENCH_VISITOR_CONCURRENCY), '--max-connections-per-user', perUser, '--max-tunnels-per-user', perUser, '--max-registrations-per-minute', perUser];
  if (opts.workers !== undefined) args.push('--workers', String(opts.workers));
  if (opts.databaseUrl) args.push('--database-url', opts.databaseUrl);
  if (opts.tls) args.push('--tls-cert', opts.tls.certFile, '--tls-key', opts.tls.keyFile);
  if (opts.domain) args.push('--domain', opts.domain);
  // The environment burrowd's shebang gives it (README "Memory"): the harness starts node
  // itself, so it reads the shebang and passes the same variables.
  const probedServer = startNode('burrowd', args, opts.probes, { env: { ...process.env, ...shebangEnv(serverJs) } });
  const server = probedServer.proc;
  const out = (t: string) => withoutProbeLines(t);

  let key: string;
  let port: number;
  try {
    // First stdout line: the seeded admin key. A later line says where it listens.
    key = await waitForOutput(server, 'stdout', (t) => KEY_RE.exec(out(t).split('\n')[0] ?? '')?.[0], START_TIMEOUT_MS, 'the seeded admin key');
    port = await waitForOutput(
      server,
      'stdout',
      (t) => {
        for (const line of out(t).split('\n').slice(1)) {
          const m = /(?:127\.0\.0\.1|localhost|0\.0\.0\.0|\[::\]|\]):(\d{2,5})\b/.exec(line) ?? /\bport (\d{2,5})\b/i.exec(line);
          if (m) return Number(m[1]);
        }
        return null;
      },
      START_TIMEOUT_MS,
      'the listening address',
    );
  } catch (err) {
    await stop(server);
    throw new Unavailable(opts.name, `burrowd did not start: ${(err as Error).message}`);
  }
  const serverUrl = `${opts.tls ? 'https' : 'http'}://${LOOPBACK}:${port}`;
  const ca = opts.tls ? ['--ca', opts.tls.certFile] : [];
  // The CLI keeps contexts in a config file; keep it away from the user's own.
  const home = tempDir('burrow-home');
  const cliEnv = { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, '.config'), BURROW_SERVER: '', BURROW_TOKEN: '' };
  const tunnels: Proc[] = [];
  const probedClients: Probed[] = [];

  // 127.0.0.1, not a bare port: the CLI reads a bare port as localhost, which may resolve to
  // ::1 first while the origins listen on IPv4 only.
  const expose = (kind: 'http' | 'tcp', originPort: number): Promise<Endpoint> => exposeAt(kind, `${LOOPBACK}:${originPort}`);

  async function exposeAt(kind: 'http' | 'tcp', local: string): Promise<Endpoint> {
    // --quiet: no line per request (ssh -N prints none either; the output goes to a file
    // anyway, never a pipe).
    const probed = startNode(
      `burrow-${kind}`,
      [...prof, cliJs, kind, local, '--quiet', '--server', serverUrl, '--token', key, ...ca, ...(kind === 'http' && opts.lanes === false ? ['--no-lanes'] : [])],
      opts.probes,
      { env: cliEnv },
    );
    const proc = probed.proc;
    tunnels.push(proc);
    probedClients.push(probed);
    const first = await waitForOutput(
      proc,
      'stdout',
      (t) => ((t = out(t)).includes('\n') ? t.slice(0, t.indexOf('\n')).trim() : null),
      START_TIMEOUT_MS,
      'the public URL (first stdout line)',
    );
    if (kind === 'http') {
      // http(s)://<id>.localhost:<port>: drive load at 127.0.0.1:<port> with Host <id>.localhost.
      const m = /^(https?):\/\/([^/:]+)(?::(\d+))?/.exec(first);
      if (!m) throw new Error(`burrow http printed "${first}", not a URL`);
      return { port: m[3] ? Number(m[3]) : port, hostHeader: m[2]!, tls: m[1] === 'https' };
    }
    const m = /^tcp:\/\/[^:]+:(\d+)/.exec(first);
    if (!m) throw new Error(`burrow tcp printed "${first}", not tcp://host:port`);
    return { port: Number(m[1]) };
  }

  async function openIdleTunnels(originPort: number, count: number): Promise<void> {
    const farmJs = fileURLToPath(new URL('./burrow-farm.js', import.meta.url));
    if (!existsSync(join(opts.repoRoot, 'dist', 'src', 'client', 'tunnel-client.js'))) {
      throw new Error('the tunnel client library (src/client/tunnel-client.ts) is not built');
    }
    const farm = start('burrow-farm', process.execPath, [farmJs, opts.repoRoot, serverUrl, key, String(originPort), String(count)], {
      env: cliEnv,
    });
    tunnels.push(farm);
    await waitForOutput(
      farm,
      'stdout',
      (t) => {
        const failed = /^failed (.*)$/m.exec(t) ?? /^(lost \d+)$/m.exec(t);
        if (failed) throw new Error(`opening ${count} tunnels: ${failed[1]}`);
        return t.includes(`registered ${count}\n`) ? true : null;
      },
      START_TIMEOUT_MS + count * 20,
      `${count} registered tunnels`,
    );
  }

  /** Throws if an idle-tunnel farm saw tunnels drop since it started. */
  function checkIdleTunnels(): void {
    for (const f of tunnels.filter((p) => p.name === 'burrow-farm')) {
      const lost = [...f.stdout().matchAll(/^lost (\d+)$/gm)].pop();
      if (lost) throw new Error(`${lost[1]} idle tunnels dropped (reconnecting or closed) while idle`);
      if (!f.isRunning()) throw new Error(`the tunnel farm exited: ${f.stderr().split('\n')[0]}`);
    }
  }

  return {
    name: opts.name,
    terminatesTls: opts.tls !== undefined,
    checkIdleTunnels,
    describe: `${Object.entries(shebangEnv(serverJs)).map(([k, v]) => `${k}=${v} `).join("")}burrowd ${args.slice(prof.length + 1).join(' ').replace(dataDir, '<tmp>').replace(opts.databaseUrl ?? '\0', '<url>').replace(opts.tls?.certFile ?? '\0', '<tmp>/cert.pem').replace(opts.tls?.keyFile ?? '\0', '<tmp>/key.pem')}${opts.databaseUrl ? '' : ' (embedded database)'}; one \`burrow http|tcp 127.0.0.1:<originPort> --quiet --server ${serverUrl.replace(String(port), '<port>')} --token <admin key>${opts.tls ? ' --ca <tmp>/cert.pem' : ''}\` per exposed service`,
    expose,
    exposeLocal: (local) => exposeAt('http', local),
    openIdleTunnels,
    serverPids: () => (server.isRunning() ? [server.pid, ...descendants(server.pid)] : []),
    // under perf, each CLI is perf's child
    clientPids: () => tunnels.filter((t) => t.isRunning()).flatMap((t) => [t.pid, ...descendants(t.pid)]),
    probes: () => ({ server: server.isRunning() ? [probedServer] : [], client: probedClients.filter((p) => p.proc.isRunning()) }),
    closeTunnels: async () => {
      probedClients.splice(0);
      await Promise.all(tunnels.splice(0).map((t) => stop(t, STOP_GRACE_MS)));
    },
    close: async () => {
      await Promise.all(tunnels.splice(0).map((t) => stop(t, STOP_GRACE_MS)));
      await stop(server, STOP_GRACE_MS);
    },
  };
}

/** Above every connection count the scenarios use (bench/README.md "Targets"). */
const BENCH_VISITOR_CONCURRENCY = 4096;
/** Above the idle scenario's largest count (10,000 tunnels, one control connection each). */
const BENCH_TUNNELS_PER_USER = 20_000;

/** `#!/usr/bin/env -S A=1 B=2 node` → { A: '1', B: '2' }: what a user running burrowd gets. */
export function shebangEnv(file: string): Record<string, string> {
  const first = readFileSync(file, 'utf8').split('\n', 1)[0]!;
  const env: Record<string, string> = {};
  if (!first.startsWith('#!')) return env;
  for (const word of first.slice(2).trim().split(/\s+/)) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(word);
    if (m) env[m[1]!] = m[2]!;
  }
  return env;
}
