// What a user with a key can do to burrowd by flooding control connections it never reads
// (hostile users round three, item 1), measured as a victim sees it:
//
//   victim: another user's `burrow http` tunnel; this process sends it one GET after another
//           on a keep-alive connection (p50/p99/max, failures) before and during each flood
//   attacker: dist/bench/hostile/flood-peer.js, 32 control connections of the seeded admin (the
//             default --max-connections-per-user), each flooding one kind of answered frame
//   burrowd: its own process's RSS (shards are threads) before, at peak, and after
//
//   npm run build && node dist/bench/hostile/control-flood.js [--flood-ms 10000] [--connections 32] [--reconnect]
//
// --reconnect: the attacker opens a connection again as soon as burrowd closes one.
//
// It prints a markdown table; a run with an older build (a checkout's dist) gives the "before" rows.
import http from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { start, stop, tempDir, waitForOutput, cleanup, sleep } from '../lib/procs.js';
import { rssKiB } from '../lib/rss.js';
import { LOOPBACK } from '../lib/net.js';

const { values } = parseArgs({ options: { 'flood-ms': { type: 'string', default: '10000' }, connections: { type: 'string', default: '32' }, root: { type: 'string' }, reconnect: { type: 'boolean', default: false } } });
const FLOOD_MS = Number(values['flood-ms']);
const CONNECTIONS = Number(values.connections);
const CALM_MS = 3_000;
const root = values.root ?? fileURLToPath(new URL('../../..', import.meta.url));
const KEY_RE = /\bbk_[A-Za-z0-9]{12}_[A-Za-z0-9]{43}\b/;

const origin = http.createServer((_req, res) => res.end('hello, burrow\n'));
await new Promise<void>((r) => origin.listen(0, LOOPBACK, () => r()));
const originPort = (origin.address() as { port: number }).port;

const server = start('burrowd', process.execPath, [join(root, 'dist/src/main.js'), '--host', LOOPBACK, '--port', '0', '--seed-api-key', '--data-dir', tempDir('flood'), '--log-level', 'warn'], { env: { ...process.env, MALLOC_ARENA_MAX: '2' } });
const adminKey = await waitForOutput(server, 'stdout', (t) => KEY_RE.exec(t)?.[0], 30_000, 'the admin key');
const port = await waitForOutput(server, 'stdout', (t) => /127\.0\.0\.1:(\d+)/.exec(t)?.[1], 30_000, 'the port').then(Number);
const api = `http://${LOOPBACK}:${port}/api/v1`;
const call = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
  const r = await fetch(`${api}${path}`, { method: 'POST', headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return (await r.json()) as Record<string, unknown>;
};
const victim = await call('/users', { email: 'victim@example.com' });
const victimKey = (await call(`/users/${String(victim.id)}/keys`, { name: 'victim', scopes: ['tunnels'] })).key as string;
const home = tempDir('flood-home');
const cli = start('burrow-http', process.execPath, [join(root, 'dist/src/cli/main.js'), 'http', `${LOOPBACK}:${originPort}`, '--quiet', '--server', `http://${LOOPBACK}:${port}`, '--token', victimKey], { env: { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, '.config') } });
const url = await waitForOutput(cli, 'stdout', (t) => (t.includes('\n') ? t.slice(0, t.indexOf('\n')).trim() : null), 30_000, 'the public URL');
const host = new URL(url).hostname;

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function get(): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request({ host: LOOPBACK, port, path: '/', headers: { host }, agent, timeout: 20_000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 20 s')));
    req.on('error', () => resolve(0));
    req.end();
  });
}

interface Row { phase: string; visits: number; failed: number; p50: number; p99: number; max: number; rssBefore: number; rssPeak: number; rssAfter: number; closed: string }
async function phase(name: string, ms: number, during: Promise<unknown> = Promise.resolve()): Promise<Omit<Row, 'closed'>> {
  const rssBefore = rssKiB([server.pid]);
  let rssPeak = rssBefore;
  const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, rssKiB([server.pid]))), 50);
  const lat: number[] = [];
  let failed = 0;
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const t0 = process.hrtime.bigint();
    const status = await get();
    lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (status !== 200) failed++;
  }
  await during;
  await sleep(1_000);
  clearInterval(sampler);
  lat.sort((a, b) => a - b);
  const at = (q: number): number => lat[Math.min(lat.length - 1, Math.floor(q * lat.length))] ?? NaN;
  return { phase: name, visits: lat.length, failed, p50: at(0.5), p99: at(0.99), max: lat.at(-1) ?? NaN, rssBefore, rssPeak: Math.max(rssPeak, rssKiB([server.pid])), rssAfter: rssKiB([server.pid]) };
}

const rows: Row[] = [];
rows.push({ ...(await phase('calm', CALM_MS)), closed: '' });
for (const kind of ['ping', 'open', 'wsping']) {
  const flood = start(`flood-${kind}`, process.execPath, [fileURLToPath(new URL('./flood-peer.js', import.meta.url)), root, `http://${LOOPBACK}:${port}`, adminKey, kind, String(CONNECTIONS), String(FLOOD_MS), ...(values.reconnect ? ['reconnect'] : [])]);
  const ready = await waitForOutput(flood, 'stdout', (t) => (t.includes('ready') ? true : null), 60_000, 'the flood connections').catch((err: Error) => err);
  if (ready instanceof Error) {
    console.error(`${kind} flood not measured: ${ready.message}`);
    await stop(flood);
    continue;
  }
  const row = await phase(`${kind} flood`, FLOOD_MS, flood.exited);
  const closed = /closed (\d+)/.exec(flood.stdout())?.[1] ?? '?';
  const again = /reconnects (\d+)/.exec(flood.stdout())?.[1] ?? '0';
  rows.push({ ...row, closed: `${closed}/${CONNECTIONS}${values.reconnect ? ` (${again} reconnects)` : ''}` });
  if (!server.isRunning()) break;
  await sleep(2_000);
}
const t0 = Date.now();
const alive = server.isRunning();
await stop(server, 30_000);
const exit = await server.exited;

const mib = (kib: number): string => (kib / 1024).toFixed(0);
console.log(`burrowd ${root}: ${CONNECTIONS} flooding connections${values.reconnect ? ', each opened again once closed' : ''}, ${FLOOD_MS} ms each flood\n`);
console.log('| phase | victim visits | failed | p50 ms | p99 ms | max ms | RSS before → peak → after (MiB) | peak growth | flood connections closed by burrowd |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.phase} | ${r.visits} | ${r.failed} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.max.toFixed(1)} | ${mib(r.rssBefore)} → ${mib(r.rssPeak)} → ${mib(r.rssAfter)} | +${mib(r.rssPeak - r.rssBefore)} | ${r.closed} |`);
console.log(`\nburrowd ${alive ? 'ran to the end' : 'had died'}; SIGTERM → exit ${String(exit)} in ${Date.now() - t0} ms`);
cli.child.kill();
origin.close();
agent.destroy();
await cleanup();
