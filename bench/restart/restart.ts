// The reconnect storm: N tunnel clients on one burrowd, the server stopped (SIGTERM, as a
// deploy does), left down for --outage-secs, started again on the same port and data; how long
// until every client is back, counted from the new server's "listening" line, what the server
// spent meanwhile, and what it refused.
//
//   node dist/bench/restart/restart.js [--clients 1000] [--keys 1] [--outage-secs 5] [--workers N]
//
// The clients are TunnelClients in this process (src/client/tunnel-client.ts, what `burrow http`
// runs), each its own control connection; `--keys K` spreads them over K users with a key each:
// after a restart no key is cached, so every distinct key costs one argon2 verification.
import { fileURLToPath } from 'node:url';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { cpuMicros } from '../lib/cpu.js';
import { start, stop, tempDir, waitForOutput, descendants, cleanup, type Proc } from '../lib/procs.js';

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ''), process.argv[i + 1] ?? '');
const CLIENTS = Number(args.get('clients') ?? 1000);
const KEYS = Number(args.get('keys') ?? 1);
const OUTAGE_MS = Number(args.get('outage-secs') ?? 5) * 1000;
const WORKERS = args.get('workers');
/** Registrations at once while setting up (not measured): the storm is the restart. */
const SETUP_CONCURRENCY = 64;

const mainJs = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const dataDir = tempDir('restart');
const LISTENING_RE = /listening on http:\/\/127\.0\.0\.1:(\d+)/;

function burrowd(port: number): Proc {
  const many = String(Math.max(CLIENTS, 100));
  return start('burrowd', process.execPath, [
    mainJs, '--host', '127.0.0.1', '--port', String(port), '--seed-api-key', '--data-dir', dataDir, '--log-level', 'warn',
    // One machine plays every user: the per-user bounds would refuse the test itself.
    '--max-connections-per-user', many, '--max-tunnels-per-user', many, '--max-registrations-per-minute', '1000000',
    // One address plays every client: attempts being verified count toward the per-address
    // failure limit (so concurrent guesses cannot overrun it), which K keys at once would reach.
    '--auth-failure-limit', '1000000',
    ...(WORKERS ? ['--workers', WORKERS] : []),
  ], { env: { ...process.env, MALLOC_ARENA_MAX: '2' } });
}

async function ready(p: Proc): Promise<{ port: number; atMs: number }> {
  const port = await waitForOutput(p, 'stdout', (t) => LISTENING_RE.exec(t)?.[1], 60_000, 'the listening line');
  return { port: Number(port), atMs: Date.now() };
}

const serverCpuUs = (p: Proc): number => cpuMicros([p.pid, ...descendants(p.pid)]);
const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.max(0, Math.ceil((p / 100) * xs.length) - 1)]!;

async function api(url: string, key: string, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}/api/v1${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as Record<string, unknown>;
}

let server = burrowd(0);
const first = await ready(server);
const url = `http://127.0.0.1:${first.port}`;
const seed = server.stdout().split('\n')[0]!.trim();
// Not the seed key: a restart with --seed-api-key revokes it.
const keys: string[] = [];
for (let i = 0; i < KEYS; i++) {
  const user = await api(url, seed, '/users', { email: `storm${i}@bench.test` });
  keys.push((await api(url, seed, `/users/${String(user.id)}/keys`, { name: 'storm', scopes: ['tunnels'] })).key as string);
}

const clients: TunnelClient[] = [];
/** When each client registered since the restart (null: not yet). */
const backAt: (number | null)[] = [];
/** Failed attempts by kind: while the server was down, and once it was ready again. */
const refusals = { down: new Map<string, number>(), afterReady: new Map<string, number>() };
let restarted = false;
let readyAtMs: number | null = null;
for (let i = 0; i < CLIENTS; i++) {
  const c = new TunnelClient({ server: url, token: keys[i % KEYS]!, type: 'http', local: { host: '127.0.0.1', port: 9 }, lanes: false });
  backAt.push(null);
  c.on('registered', () => {
    if (restarted && backAt[i] === null) backAt[i] = Date.now();
  });
  c.on('reconnecting', (r) => {
    if (!restarted) return;
    // The kinds of refusal, without the per-attempt detail (ports, addresses).
    const kind = /ECONNREFUSED/.test(r.reason) ? 'connection refused (server down)' : r.reason.replace(/\d+/g, 'N').slice(0, 90);
    const m = readyAtMs === null ? refusals.down : refusals.afterReady;
    m.set(kind, (m.get(kind) ?? 0) + 1);
  });
  c.on('closed', (e) => e.code !== 'stopped' && console.error(`client ${i} closed: ${e.reason}`));
  clients.push(c);
}
let next = 0;
await Promise.all(Array.from({ length: SETUP_CONCURRENCY }, async () => {
  while (next < CLIENTS) await clients[next++]!.start();
}));
console.error(`${CLIENTS} clients up (${KEYS} key${KEYS === 1 ? '' : 's'}); stopping burrowd`);

restarted = true;
const stopAt = Date.now();
await stop(server, 30_000);
const downMs = Date.now() - stopAt;
await new Promise((r) => setTimeout(r, OUTAGE_MS));
const clientCpu0 = process.cpuUsage();
server = burrowd(first.port);
const again = await ready(server);
readyAtMs = again.atMs;
const cpu0 = serverCpuUs(server);
const startToReadyMs = again.atMs - (stopAt + downMs + OUTAGE_MS);
const deadline = Date.now() + 300_000;
while (backAt.some((t) => t === null) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
const allBackAt = Date.now();
const cpuUs = serverCpuUs(server) - cpu0;
const clientCpu = process.cpuUsage(clientCpu0);
const after = backAt.filter((t): t is number => t !== null).map((t) => t - again.atMs);
const missing = backAt.filter((t) => t === null).length;

const result = {
  clients: CLIENTS,
  keys: KEYS,
  workers: WORKERS ?? 'default (CPU count)',
  outage_ms: OUTAGE_MS,
  shutdown_ms: downMs,
  start_to_ready_ms: startToReadyMs,
  back_after_ready_ms: after.length ? { p50: pct(after, 50), p90: pct(after, 90), p99: pct(after, 99), max: Math.max(...after) } : null,
  back_within_1s_of_ready: after.filter((t) => t <= 1000).length,
  /** how many came back in each half second after the ready line */
  back_per_500ms: Array.from({ length: Math.floor(Math.max(0, ...after) / 500) + 1 }, (_, i) => after.filter((t) => Math.max(0, Math.floor(t / 500)) === i).length),
  not_back: missing,
  storm_wall_ms: allBackAt - again.atMs,
  server_cpu_ms: Math.round(cpuUs / 1000),
  server_cpu_pct_of_one_core: Math.round((100 * cpuUs) / 1000 / Math.max(1, allBackAt - again.atMs)),
  clients_cpu_ms: Math.round((clientCpu.user + clientCpu.system) / 1000),
  failed_attempts_while_down: Object.fromEntries([...refusals.down].sort((a, b) => b[1] - a[1])),
  failed_attempts_after_ready: Object.fromEntries([...refusals.afterReady].sort((a, b) => b[1] - a[1])),
};
process.stdout.write(JSON.stringify(result, null, 2) + '\n');
await Promise.all(clients.map((c) => c.stop()));
await stop(server);
await cleanup();
