// burrow http --detach / burrow stop: the way a script starts a tunnel and gets its URL back.
// `URL=$(burrow http 3000 --detach)` returns once the tunnel is up (the run below completes,
// it is not left running), the background process serves, writes its pid file and log, and
// `burrow stop` ends it and removes the file. A failure before the tunnel is up is the
// parent's exit code with the child's message.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, closedPort, visit, waitFor, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let home: { dir: string; remove: () => void };
let webPort: number;
let cli: CliEnv;
const pids: number[] = [];

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, home, admin: cli } = suite);
  webPort = await suite.http((req, res) => res.end(`detached ${req.url}`));
});

test.after(async () => {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  await suite?.stop();
});

/** Running (a zombie counts as gone: with no init reaping here, the exited child may linger as one). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

test('--detach returns with the URL on stdout; the background tunnel serves; burrow stop ends it', async () => {
  const pidFile = join(home.dir, 'web.pid');
  const port = webPort;
  const r = await burrow(cli, ['http', String(port), '--id', 'detached', '--detach', '--pid-file', pidFile], 30_000);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, `http://detached.localhost:${srv.port}\n`);
  assert.match(r.stderr, /running in the background as pid \d+ .*burrow stop/);
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  pids.push(pid);
  assert.ok(alive(pid));

  const res = await visit(srv.port, `detached.localhost:${srv.port}`, '/bg');
  assert.is(res.status, 200);
  assert.is(res.body, 'detached /bg');
  // Its output goes to the log next to the pid file.
  await waitFor(() => (/GET\s+\/bg\s+200 OK/.test(readFileSync(join(home.dir, 'web.log'), 'utf8')) ? true : undefined), 10_000, 'request line in the log');

  // A second one on the same pid file is refused while the first runs.
  const again = await burrow(cli, ['http', String(port), '--detach', '--pid-file', pidFile]);
  assert.is(again.code, 5, again.stderr);
  assert.match(again.stderr, new RegExp(`error: already running: .* pid ${pid} `));

  const stop = await burrow(cli, ['stop', '--pid-file', pidFile]);
  assert.is(stop.code, 0, stop.stderr);
  assert.match(stop.stderr, new RegExp(`stopped burrow \\(pid ${pid}\\)`));
  assert.not.ok(alive(pid));
  assert.not.ok(existsSync(pidFile));
  const gone = await visit(srv.port, `detached.localhost:${srv.port}`, '/bg');
  assert.is(gone.status, 404);

  const nothing = await burrow(cli, ['stop', '--pid-file', pidFile]);
  assert.is(nothing.code, 4);
  assert.match(nothing.stderr, /error: nothing to stop/);
});

test('--detach with the default pid file, and kill $(cat pidfile) works as well', async () => {
  const port = webPort;
  const r = await burrow(cli, ['http', String(port), '--detach'], 30_000);
  assert.is(r.code, 0, r.stderr);
  const pidFile = join(home.dir, 'burrow', 'burrow.pid');
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  pids.push(pid);
  const url = new URL(r.stdout.trim());
  assert.is((await visit(srv.port, url.host, '/x')).status, 200);
  process.kill(pid, 'SIGTERM');
  await waitFor(() => (!alive(pid) && !existsSync(pidFile) ? true : undefined), 10_000, 'child gone, pid file removed');
});

test('--detach that cannot start: the parent exits with the child\'s code and message', async () => {
  const dead = await closedPort();
  const pidFile = join(home.dir, 'dead.pid');
  const r = await burrow({ configDir: home.dir, env: { BURROW_SERVER: `http://127.0.0.1:${dead}`, BURROW_TOKEN: srv.adminKey } }, ['http', '3000', '--detach', '--pid-file', pidFile], 30_000);
  assert.is(r.code, 6, r.stderr);
  assert.is(r.stdout, '');
  assert.match(r.stderr, /error: server unreachable: /);
  assert.not.ok(existsSync(pidFile));
  const misuse = await burrow(cli, ['http', '3000', '--pid-file', pidFile]);
  assert.is(misuse.code, 2);
  assert.match(misuse.stderr, /--pid-file only applies with --detach/);
});

test.run();
