// burrow start: the tunnels of a burrow.yml over ONE control connection (counted by the
// server's readiness detail), both carrying traffic; `burrow start web` starts only that one;
// --json events name their tunnel and end with `closed`; a tunnel refused for good is reported while the other runs
// on, and the exit code at the end says so; --detach prints "NAME URL" per tunnel.
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { api } from '../helpers/fixtures.js';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, exitOf, RunningBurrows, tcpEcho, visit, waitFor, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let home: { dir: string; remove: () => void };
let webPort: number;
let echoPort: number;
let admin: CliEnv;
let burrows: RunningBurrows;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, home, admin, burrows } = suite);
  webPort = await suite.http((req, res) => res.end(`web says ${req.url}`));
  echoPort = await suite.echo();
});

test.after(async () => {
  await suite?.stop();
});

function configFile(name: string, tunnels: string): string {
  const p = join(home.dir, name);
  writeFileSync(p, `version: 1\ntunnels:\n${tunnels}`);
  return p;
}

/** Control connections open on the server, summed over its shards (admin-only readiness detail). */
async function controlConnections(): Promise<number> {
  const r = await api(srv, 'GET', '/readyz?detail=1', { key: srv.adminKey });
  assert.is(r.status, 200, r.text);
  let sum = 0;
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) {
        if (k === 'control_connections' && typeof x === 'number') sum += x;
        else walk(x);
      }
    }
  };
  walk(r.body);
  return sum;
}

const lines = (child: { output: { stdout: string } }, n: number, what: string) =>
  waitFor(() => {
    const l = child.output.stdout.split('\n').filter(Boolean);
    return l.length >= n ? l : undefined;
  }, 20_000, what);

test('two tunnels (http + tcp) over one control connection, both carrying traffic', async () => {
  const file = configFile('two.yml', `  web: { proto: http, addr: "127.0.0.1:${webPort}", id: two-web }\n  db: { proto: tcp, addr: ${echoPort} }\n`);
  assert.is(await controlConnections(), 0);
  const child = burrows.start(admin, ['start', '--config', file]);
  const [webLine, dbLine] = await lines(child, 2, 'two URL lines');
  assert.is(webLine, `web http://two-web.localhost:${srv.port}`);
  const m = /^db tcp:\/\/[^:]+:(\d+)$/.exec(dbLine!);
  assert.ok(m, dbLine);
  assert.is(await controlConnections(), 1);

  const res = await visit(srv.port, `two-web.localhost:${srv.port}`, '/hello');
  assert.is(res.status, 200);
  assert.is(res.body, 'web says /hello');
  assert.is(await tcpEcho(Number(m![1]), 'through the db tunnel'), 'through the db tunnel');
  // Each line says which tunnel it came from.
  await waitFor(() => (/^web\s+\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/hello\s+200 OK/m.test(child.output.stdout) && /^db\s+\d\d:\d\d:\d\d\.\d{3}\s+TCP\s+\S+/m.test(child.output.stdout) ? true : undefined), 10_000, 'named lines');

  const tunnels = await api(srv, 'GET', '/tunnels', { key: srv.adminKey });
  assert.is((tunnels.body as unknown[]).length, 2);
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'exit'), 0);
  assert.match(child.output.stderr, /burrow: 2 tunnels closed after .* 1 request, 1 connection/);
});

test('a burrow.yml entry with host_header gets the Host rewritten, as --host-header does', async () => {
  const hostEcho = createServer((req, res) => res.end(`host ${req.headers.host}`));
  await new Promise<void>((r) => hostEcho.listen(0, '127.0.0.1', r));
  const port = (hostEcho.address() as { port: number }).port;
  try {
    const file = configFile('host.yml', `  rw: { proto: http, addr: "127.0.0.1:${port}", id: host-rw, host_header: rewrite }\n  fixed: { proto: http, addr: "127.0.0.1:${port}", id: host-fixed, host_header: app.test }\n  plain: { proto: http, addr: "127.0.0.1:${port}", id: host-plain }\n`);
    const child = burrows.start(admin, ['start', '--config', file]);
    await lines(child, 3, 'three URL lines');
    assert.is((await visit(srv.port, `host-rw.localhost:${srv.port}`, '/')).body, `host 127.0.0.1:${port}`);
    assert.is((await visit(srv.port, `host-fixed.localhost:${srv.port}`, '/')).body, 'host app.test');
    assert.is((await visit(srv.port, `host-plain.localhost:${srv.port}`, '/')).body, `host host-plain.localhost:${srv.port}`);
    child.kill('SIGINT');
    assert.is(await exitOf(child, 10_000, 'exit'), 0);
  } finally {
    hostEcho.close();
  }
});

test('burrow start web starts only that one; --json events carry the tunnel name', async () => {
  const file = configFile('pick.yml', `  web: { proto: http, addr: ${webPort}, id: pick-web }\n  db: { proto: tcp, addr: ${echoPort} }\n`);
  const child = burrows.start(admin, ['start', 'web', '--config', file, '--json']);
  const [first] = await lines(child, 1, 'registered event');
  assert.equal(JSON.parse(first!), { event: 'registered', tunnel: 'web', id: 'pick-web', url: `http://pick-web.localhost:${srv.port}` });
  await visit(srv.port, `pick-web.localhost:${srv.port}`, '/j');
  const [, req] = await lines(child, 2, 'request event');
  const e = JSON.parse(req!) as Record<string, unknown>;
  assert.is(e.event, 'request');
  assert.is(e.tunnel, 'web');
  assert.is(e.path, '/j');
  const tunnels = (await api(srv, 'GET', '/tunnels', { key: srv.adminKey })).body as { id: string }[];
  assert.equal(tunnels.map((t) => t.id), ['pick-web']);
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'exit'), 0);
  // The stream ends with a `closed` event per tunnel, named like the others.
  const closed = JSON.parse(child.output.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
  assert.equal({ ...closed, uptime_s: 0, bytes_in: 0, bytes_out: 0 }, { event: 'closed', tunnel: 'web', code: 'stopped', reason: 'stopped by the user', url: `http://pick-web.localhost:${srv.port}`, requests: 1, bytes_in: 0, bytes_out: 0, uptime_s: 0 });
});

test('a tunnel refused for good is reported; the other runs on; the exit code at the end says it', async () => {
  const other = await suite.member({ email: 'holder@example.test' });
  const holder = burrows.start(other.cli, ['http', String(webPort), '--id', 'held']);
  await burrows.firstLine(holder);
  const file = configFile('clash.yml', `  mine: { proto: http, addr: ${webPort}, id: free-one }\n  theirs: { proto: http, addr: ${webPort}, id: held }\n`);
  const child = burrows.start(admin, ['start', '--config', file]);
  const [only] = await lines(child, 1, 'URL line');
  assert.is(only, `mine http://free-one.localhost:${srv.port}`);
  await waitFor(() => (/^theirs: /m.test(child.output.stderr) ? true : undefined), 10_000, 'refusal note');
  assert.is((await visit(srv.port, `free-one.localhost:${srv.port}`, '/still')).status, 200);
  assert.is((await visit(srv.port, `held.localhost:${srv.port}`, '/h')).body, 'web says /h'); // still the holder's
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'exit'), 5);
  holder.kill('SIGINT');
  await exitOf(holder, 10_000, 'holder exit');
});

test('burrow start --detach: "NAME URL" per tunnel, then burrow stop', async () => {
  const file = configFile('bg.yml', `  web: { proto: http, addr: ${webPort}, id: bg-web }\n  db: { proto: tcp, addr: ${echoPort} }\n`);
  const pidFile = join(home.dir, 'bg.pid');
  const r = await burrow(admin, ['start', '--config', file, '--detach', '--pid-file', pidFile], 30_000);
  assert.is(r.code, 0, r.stderr);
  const [w, d] = r.stdout.trim().split('\n');
  assert.is(w, `web http://bg-web.localhost:${srv.port}`);
  assert.match(d!, /^db tcp:\/\//);
  assert.is((await visit(srv.port, `bg-web.localhost:${srv.port}`, '/bg')).body, 'web says /bg');
  const stop = await burrow(admin, ['stop', '--pid-file', pidFile]);
  assert.is(stop.code, 0, stop.stderr);
  assert.is((await visit(srv.port, `bg-web.localhost:${srv.port}`, '/bg')).status, 404);
});

test('burrow start: an invalid file starts nothing (exit 2); unknown NAMEs are named', async () => {
  const bad = configFile('bad-start.yml', '  web: { proto: http, addr: 99999 }\n');
  const r = await burrow(admin, ['start', '--config', bad]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /bad-start\.yml:3: tunnels\.web\.addr: expected a port or host:port, got 99999/);
  const good = configFile('good.yml', '  web: { proto: http, addr: 3000 }\n  db: { proto: tcp, addr: 5432 }\n');
  const u = await burrow(admin, ['start', 'web', 'cache', '--config', good]);
  assert.is(u.code, 2);
  assert.match(u.stderr, /error: unknown tunnel: .*good\.yml has no tunnel "cache"/);
  assert.match(u.stderr, /hint: its tunnels: web, db/);
});

test.run();
