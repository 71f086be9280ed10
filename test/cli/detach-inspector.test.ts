// burrow http --detach tells where the background run's request inspector listens: on stderr,
// after the URL, so `URL=$(burrow http 3000 --detach)` still captures the URL alone; the address
// printed is the live inspector of the background process.
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { CaptureJson } from '../../src/client/inspector/store.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { visit } from '../tunnel/helpers.js';
import { call } from '../inspector/http.js';
import { burrow, closedPort, tempDir, type CliEnv } from './harness.js';

let srv: TestServer;
let home: { dir: string; remove: () => void };
let web: Server;
let cli: CliEnv;
const pids: number[] = [];

test.before(async () => {
  srv = await startServer();
  home = tempDir();
  web = createServer((req, res) => res.end(`detached ${req.url}`));
  await new Promise<void>((r) => web.listen(0, '127.0.0.1', r));
  cli = { configDir: home.dir, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: srv.adminKey, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } };
});

test.after(async () => {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  web?.close();
  await srv?.stop();
  home?.remove();
});

test('--detach prints the inspector address on stderr (stdout stays the URL); it is the background run\'s', async () => {
  const pidFile = join(home.dir, 'insp.pid');
  const port = (web.address() as { port: number }).port;
  const r = await burrow(cli, ['http', String(port), '--id', 'detach-insp', '--detach', '--pid-file', pidFile], 30_000);
  assert.is(r.code, 0, r.stderr);
  pids.push(Number(readFileSync(pidFile, 'utf8').trim()));
  assert.is(r.stdout, `http://detach-insp.localhost:${srv.port}\n`);
  const insp = /^burrow: inspector at (http:\/\/127\.0\.0\.1:\d+)$/m.exec(r.stderr)?.[1];
  assert.ok(insp, r.stderr);

  assert.is((await visit(srv.port, `detach-insp.localhost:${srv.port}`, { path: '/seen' })).status, 200);
  let seen: CaptureJson | undefined;
  for (let i = 0; i < 200 && !seen; i++) {
    seen = (await call(`${insp}/api/requests`)).json<CaptureJson[]>().find((c) => c.path === '/seen' && c.state === 'complete');
    if (!seen) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(seen, 'the request in the detached inspector');
  assert.is(seen!.status, 200);

  const stop = await burrow(cli, ['stop', '--pid-file', pidFile]);
  assert.is(stop.code, 0, stop.stderr);
  // Gone with its process.
  assert.not.ok(await call(`${insp}/api/requests`, {}, 3_000).then(() => true, () => false), 'inspector still answering');

  // --no-inspect: nothing to announce.
  const none = await burrow(cli, ['http', String(port), '--id', 'detach-none', '--detach', '--pid-file', pidFile, '--no-inspect'], 30_000);
  assert.is(none.code, 0, none.stderr);
  pids.push(Number(readFileSync(pidFile, 'utf8').trim()));
  assert.not.match(none.stderr, /inspector/);
  assert.is((await burrow(cli, ['stop', '--pid-file', pidFile])).code, 0);
});

test.run();
