// `burrow start` on a terminal (script(1) gives it a pseudo-terminal): the status block shows
// ngrok's ttl/opn/rt1/rt5/p50/p90 table with a row per tunnel (before, only "total 1 open 0"),
// the versions of both ends, the server and the latency to it; request lines carry the time
// and the status text.
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestServer } from '../helpers/server.js';
import { CLI, cliEnv, CliSuite, exitOf, tcpEcho, visit, waitFor, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let admin: CliEnv;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, admin } = suite);
});

test.after(async () => {
  await suite?.stop();
});

/** What the terminal was sent, without its control codes (the block is redrawn in place). */
const text = (screen: string): string => screen.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '').replace(/\r/g, '');

/** The last frame of the block: from its last title line on. */
function lastFrame(screen: string): string {
  const plain = text(screen);
  return plain.slice(plain.lastIndexOf('burrow   '));
}

test('burrow start on a TTY: a figures row per tunnel, versions, server, latency; timed request lines', async () => {
  const webPort = await suite.http((req, res) => {
    res.statusCode = req.url === '/missing' ? 404 : 200;
    res.end('ok');
  });
  const echoPort = await suite.echo();
  const file = join(suite.home.dir, 'tty.yml');
  writeFileSync(file, `version: 1\ntunnels:\n  web: { proto: http, addr: ${webPort}, id: tty-web }\n  db: { proto: tcp, addr: ${echoPort} }\n`);
  // `exec` makes node the direct child of script, so Ctrl-C (SIGINT) can be sent to it.
  const child = spawn('script', ['-qfc', `exec '${process.execPath}' '${CLI}' start --config '${file}' --no-inspect`, '/dev/null'], {
    env: { ...cliEnv(admin), COLUMNS: '100', LINES: '40', TZ: 'UTC' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  suite.burrows.track(child);
  let screen = '';
  child.stdout.on('data', (d) => (screen += d));
  const dbUrl = await waitFor(() => /^db (tcp:\/\/\S+:(\d+))$/m.exec(text(screen)) ?? undefined, 15_000, 'db URL').catch((e) => {
    throw new Error(`${(e as Error).message}\n${text(screen)}`);
  });
  await visit(srv.port, `tty-web.localhost:${srv.port}`, '/hello');
  await visit(srv.port, `tty-web.localhost:${srv.port}`, '/missing');
  assert.is(await tcpEcho(Number(dbUrl[2]), 'through db'), 'through db');
  // Both rows counted: web 2 requests, db 1 connection, each under ngrok's headings.
  const table = /Requests\/Conns\s+ttl\s+opn\s+rt1\s+rt5\s+p50\s+p90\r?\n\s+web\s+2\s+0\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+ms\s+\d+ms\r?\n\s+db\s+1\s+0\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+ms\s+\d+ms/;
  await waitFor(() => (table.test(text(screen)) && /Latency\s+\d+ms/.test(text(screen)) ? true : undefined), 10_000, 'the table with both rows').catch((e) => {
    throw new Error(`${(e as Error).message}\n${lastFrame(screen)}`);
  });
  const pid = Number(execFileSync('ps', ['-o', 'pid=', '--ppid', String(child.pid)]).toString().trim().split('\n')[0]);
  process.kill(pid, 'SIGINT');
  await exitOf(child, 10_000, 'script exit');
  const frame = lastFrame(screen);
  assert.match(frame, /^Version\s+\d+\.\d+\.\d+\S*$/m);
  assert.match(frame, new RegExp(`^Server\\s+${srv.url.replace(/[.:/]/g, '\\$&')} \\(burrowd \\d+\\.\\d+\\.\\d+\\S*\\)$`, 'm'));
  assert.match(frame, /^Latency\s+\d+ms$/m);
  assert.not.match(screen, /total \d+\s+open \d+/); // the old counts-only rows
  // Request lines: the tunnel, the time (TZ=UTC here) and the status in words.
  const all = text(screen);
  assert.match(all, /^web\s+\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/hello\s+200 OK\s+\d+ms$/m);
  assert.match(all, /^web\s+\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/missing\s+404 Not Found\s+\d+ms$/m);
  assert.match(all, /^db\s+\d\d:\d\d:\d\d\.\d{3}\s+TCP\s+127\.0\.0\.1:\d+\s+\d+ms\s+in 10 B\s+out 10 B$/m);
  assert.match(screen, /2 tunnels closed after \d+s · 2 requests, 1 connection/);
});

test.run();
