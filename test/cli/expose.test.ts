// burrow http / burrow tcp against a real burrowd and a real local service: the URL first on
// stdout, one line per request, the summary on Ctrl-C, JSON lines, --quiet, and the live status
// block under a pseudo-terminal. Refusals: expose-refusals.test.ts.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { withDeadline } from '../helpers/fixtures.js';
import type { TestServer } from '../helpers/server.js';
import { burrow, CLI, cliEnv, CliSuite, exitOf, RunningBurrows, tcpEcho, waitFor, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let webPort: number;
let echoPort: number;
let alice: CliEnv;
let bob: CliEnv;
let burrows: RunningBurrows;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, admin: alice, burrows } = suite);
  webPort = await suite.http((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'text/plain' });
      res.end(`hello ${req.url} ${body}`);
    });
  });
  echoPort = await suite.echo();
  ({ cli: bob } = await suite.member({ email: 'bob@example.test' }, ['tunnels']));
});

test.after(async () => {
  await suite?.stop();
});

const start = (c: CliEnv, args: string[]) => burrows.start(c, args);
const firstLine = (child: ReturnType<typeof start>) => burrows.firstLine(child);

async function visit(host: string, path: string): Promise<{ status: number; text: string }> {
  // Raw HTTP/1.1 on a socket: public tunnel traffic is routed by the Host header.
  return withDeadline(
    new Promise<{ status: number; text: string }>((resolve, reject) => {
      const s = connect(srv.port, '127.0.0.1', () => s.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`));
      let data = '';
      s.on('data', (d) => (data += d));
      s.on('end', () => resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(data)?.[1]), text: data.split('\r\n\r\n').slice(1).join('\r\n\r\n') }));
      s.on('error', reject);
    }),
    10_000,
    `GET ${host}${path}`,
  );
}

test('burrow http: URL first, a line per request, summary and exit 0 on Ctrl-C', async () => {
  const child = start(alice, ['http', String(webPort), '--id', 'cli-web']);
  const url = await firstLine(child);
  assert.is(url, `http://cli-web.localhost:${srv.port}`);
  const r1 = await visit(`cli-web.localhost:${srv.port}`, '/hello');
  assert.is(r1.status, 200);
  assert.match(r1.text, /hello \/hello/);
  const r2 = await visit(`cli-web.localhost:${srv.port}`, '/missing');
  assert.is(r2.status, 404);
  await waitFor(() => (/^\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/missing\s+404 Not Found\s+\d+ms$/m.test(child.output.stdout) ? true : undefined), 10_000, 'request lines');
  assert.match(child.output.stdout, /^\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/hello\s+200 OK\s+\d+ms$/m);
  // Visible to the management commands while it runs.
  const list = JSON.parse((await burrow(alice, ['tunnels', 'list', '--json'])).stdout);
  assert.ok(list.some((t: { id: string; tunnel_type: string }) => t.id === 'cli-web' && t.tunnel_type === 'http'));
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'burrow http exit'), 0);
  assert.match(child.output.stderr, /burrow: http:\/\/cli-web\.localhost:\d+ closed after \d+s · 2 requests \(p50 \d+ms, p90 \d+ms\)/);
  assert.not.match(child.output.stdout, /\x1b\[/); // not a TTY: no control codes
});

test('burrow http --json prints JSON lines; --quiet prints only the URL', async () => {
  const j = start(alice, ['http', `127.0.0.1:${webPort}`, '--id', 'cli-json', '--json']);
  const first = JSON.parse(await firstLine(j));
  assert.equal(first, { event: 'registered', id: 'cli-json', url: `http://cli-json.localhost:${srv.port}` });
  await visit(`cli-json.localhost:${srv.port}`, '/j');
  const line = await waitFor(() => j.output.stdout.split('\n')[1] || undefined, 10_000, 'request event');
  const ev = JSON.parse(line);
  assert.is(ev.event, 'request');
  assert.is(ev.method, 'GET');
  assert.is(ev.path, '/j');
  assert.is(ev.status, 200);
  assert.type(ev.duration_ms, 'number');
  j.kill('SIGINT');
  assert.is(await exitOf(j, 10_000, 'json exit'), 0);
  // The last event says the tunnel closed, why, and its totals.
  const closed = JSON.parse(j.output.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
  assert.equal(Object.keys(closed), ['event', 'code', 'reason', 'url', 'requests', 'bytes_in', 'bytes_out', 'uptime_s']);
  assert.is(closed.event, 'closed');
  assert.is(closed.code, 'stopped');
  assert.is(closed.url, `http://cli-json.localhost:${srv.port}`);
  assert.is(closed.requests, 1);

  const q = start(alice, ['http', String(webPort), '--id', 'cli-quiet', '--quiet']);
  await firstLine(q);
  await visit(`cli-quiet.localhost:${srv.port}`, '/q');
  q.kill('SIGINT');
  assert.is(await exitOf(q, 10_000, 'quiet exit'), 0);
  assert.is(q.output.stdout, `http://cli-quiet.localhost:${srv.port}\n`);
  assert.match(q.output.stderr, /1 request /);
});

test('a tunnel bound to a team (by name): tunnels list names the team, tunnels get shows the details', async () => {
  assert.is((await burrow(alice, ['teams', 'create', 'qa'])).code, 0);
  const child = start(alice, ['http', String(webPort), '--team', 'qa', '--id', 'cli-team']);
  await firstLine(child);
  await visit(`cli-team.localhost:${srv.port}`, '/t');
  await waitFor(() => (/^\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/t\s+200 OK/m.test(child.output.stdout) ? true : undefined), 10_000, 'request line');
  const l = await burrow(alice, ['tunnels', 'list']);
  assert.is(l.code, 0, l.stderr);
  assert.match(l.stdout, /^ID\s+URL\s+LOCAL\s+OWNER\s+TEAM\s+SESSION UP\s+SESSION REQS\s+SESSION IN\s+SESSION OUT\n/);
  assert.match(l.stdout, new RegExp(`^cli-team\\s+http://cli-team\\.localhost:${srv.port}\\s+http://localhost:${webPort}\\s+Seed admin <seed@burrow\\.local>\\s+qa\\s+\\d+s\\s+\\d+\\s+\\S+ B\\s+\\S+ B$`, 'm'));
  const g = await burrow(alice, ['tunnels', 'get', 'cli-team']);
  assert.is(g.code, 0, g.stderr);
  assert.match(
    g.stdout,
    new RegExp(`^id\\s+cli-team\\nurl\\s+http://cli-team\\.localhost:${srv.port}\\nlocal\\s+http://localhost:${webPort}\\ntype\\s+http\\nremote port\\s+-\\nowner\\s+\\S+.* \\([0-9a-f-]{36}\\)\\nteam\\s+qa \\([0-9a-f-]{36}\\)\\nsession uptime\\s+\\d+s \\(since its client last connected\\)\\naccess\\s+-\\nsession requests\\s+\\d+\\nsession bytes in\\s+\\S+ B\\nsession bytes out\\s+\\S+ K?i?B\\n$`),
  );
  const j = JSON.parse((await burrow(alice, ['tunnels', 'get', 'cli-team', '--json'])).stdout);
  assert.is(j.id, 'cli-team');
  assert.type(j.stats.requests, 'number');
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'team tunnel exit'), 0);
});

test('burrow tcp: tcp:// URL first, bytes echo through, a line per connection', async () => {
  const child = start(bob, ['tcp', String(echoPort)]);
  const url = await firstLine(child);
  const m = /^tcp:\/\/[^:]+:(\d+)$/.exec(url);
  assert.ok(m, url);
  assert.is(await tcpEcho(Number(m![1]), 'ping through burrow'), 'ping through burrow');
  await waitFor(() => (/^\d\d:\d\d:\d\d\.\d{3}\s+TCP\s+\S+\s+\d+ms\s+in 19 B\s+out 19 B$/m.test(child.output.stdout) ? true : undefined), 10_000, 'connection line').catch((e) => {
    throw new Error(`${(e as Error).message}\nstdout: ${child.output.stdout}\nstderr: ${child.output.stderr}`);
  });
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'tcp exit'), 0);
  assert.match(child.output.stderr, /1 connection \(/);
});

test('on a TTY: the live status block on stderr, redrawn in place, request lines above it', async () => {
  // script(1) gives the child a pseudo-terminal; `exec` makes node the direct child of script.
  const cmd = `exec '${process.execPath}' '${CLI}' http ${webPort} --id cli-tty`;
  const child = spawn('script', ['-qfc', cmd, '/dev/null'], { env: { ...cliEnv(alice), COLUMNS: '100', LINES: '30' }, stdio: ['pipe', 'pipe', 'pipe'] });
  burrows.track(child);
  let screen = '';
  child.stdout.on('data', (d) => (screen += d));
  await waitFor(() => (/Session Status\s+online/.test(screen) ? true : undefined), 15_000, 'status online');
  // The account comes from GET /me, asked beside the tunnel: on a busy machine it may come later.
  await waitFor(() => (/Account\s+seed@burrow\.local \(admin\)/.test(screen) ? true : undefined), 15_000, 'account shown');
  await visit(`cli-tty.localhost:${srv.port}`, '/tty');
  // ngrok's figures: ttl opn rt1 rt5 p50 p90, the values on the line under their names.
  await waitFor(() => (/Requests\s+ttl\s+opn\s+rt1\s+rt5\s+p50\s+p90\s*\r?\n\s+1\s+\d+\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+ms\s+\d+ms/.test(screen) ? true : undefined), 10_000, 'request counted');
  // Ctrl-C goes to node, the child of script.
  const { execFileSync } = await import('node:child_process');
  const pid = Number(execFileSync('ps', ['-o', 'pid=', '--ppid', String(child.pid)]).toString().trim().split('\n')[0]);
  process.kill(pid, 'SIGINT');
  await exitOf(child, 10_000, 'script exit');
  assert.match(screen, `http://cli-tty.localhost:${srv.port}`);
  assert.match(screen, /Forwarding\s+http:\/\/cli-tty\.localhost:\d+ → http:\/\/localhost:\d+/);
  // The versions of both ends and the heartbeat's round trip, as ngrok shows its own.
  const version = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version.replace(/\./g, '\\.');
  assert.match(screen, new RegExp(`Version\\s+${version}\\r?\\n`));
  assert.match(screen, new RegExp(`Server\\s+${srv.url.replace(/[.:/]/g, '\\$&')} \\(burrowd ${version}\\)`));
  assert.match(screen, /Latency\s+\d+ms/);
  assert.match(screen, /Uptime\s+\d+s since started\s+this connection \d+s/);
  assert.match(screen, /\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/tty\s+200 OK\s+\d+ms/);
  assert.match(screen, /\x1b\[\d+F\x1b\[J/); // block erased and redrawn in place
  assert.not.match(screen, /\x1b\[3\dm/); // NO_COLOR: no colours even on a TTY
  assert.match(screen, /closed after \d+s · 1 request /);
});

test.run();
