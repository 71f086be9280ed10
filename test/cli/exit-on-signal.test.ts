// Ctrl-C ends `burrow http` within about a second whatever the server does: a server that stops
// answering (SIGSTOP: it never finishes the WebSocket close) no longer holds the exit. A pool
// member lets its open requests finish first (it says so), and a second Ctrl-C leaves at once.
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { exitOf, RunningBurrows, tempDir, waitFor, type CliEnv } from './harness.js';

// The CLI's own bound is 1 s (src/cli/exit-deadline.ts); the margin is for a loaded machine.
const EXIT_BOUND_MS = 2_500;

let srv: TestServer;
let home: { dir: string; remove: () => void };
let fast: Server;
let silent: Server;
const held: Socket[] = [];
const burrows = new RunningBurrows();
let fastPort = 0;
let silentPort = 0;
let silentRequests = 0;

test.before(async () => {
  srv = await startServer({ workers: 1 });
  home = tempDir();
  fast = createServer((_req, res) => res.end('ok'));
  // Takes requests and never answers: a request through it stays open.
  silent = createServer(() => void silentRequests++);
  await new Promise<void>((r) => fast.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  fastPort = (fast.address() as { port: number }).port;
  silentPort = (silent.address() as { port: number }).port;
});

test.after(async () => {
  burrows.killAll();
  for (const s of held) s.destroy();
  fast?.closeAllConnections();
  fast?.close();
  silent?.closeAllConnections();
  silent?.close();
  await srv?.stop();
  home?.remove();
});

const cli = (): CliEnv => ({ configDir: home.dir, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: srv.adminKey } });

test('a server that stops answering: burrow http still exits 0 within about a second of Ctrl-C', async () => {
  const child = burrows.start(cli(), ['http', String(fastPort), '--id', 'frozen', '--no-inspect']);
  await burrows.firstLine(child);
  process.kill(srv.proc.pid!, 'SIGSTOP');
  try {
    const t0 = Date.now();
    child.kill('SIGINT');
    assert.is(await exitOf(child, 10_000, 'exit after Ctrl-C with the server stopped'), 0);
    const tookMs = Date.now() - t0;
    assert.ok(tookMs < EXIT_BOUND_MS, `exited ${tookMs} ms after Ctrl-C`);
  } finally {
    process.kill(srv.proc.pid!, 'SIGCONT');
  }
});

test('a pool member with a request open: the first Ctrl-C waits for it and says so, a second one leaves at once (130)', async () => {
  const child = burrows.start(cli(), ['http', String(silentPort), '--id', 'pooled', '--pool', '--no-inspect']);
  await burrows.firstLine(child);
  const visitor = connect(srv.port, '127.0.0.1', () => visitor.write(`GET /slow HTTP/1.1\r\nHost: pooled.localhost:${srv.port}\r\n\r\n`));
  held.push(visitor);
  visitor.on('error', () => undefined);
  await waitFor(() => (silentRequests > 0 ? true : undefined), 10_000, 'the request reached the local service');
  child.kill('SIGINT');
  await waitFor(() => (/Ctrl-C again to leave now/.test(child.output.stderr) ? true : undefined), 5_000, `the note: ${child.output.stderr}`);
  assert.is(child.exitCode, null, 'still finishing the open request');
  const t0 = Date.now();
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'exit after the second Ctrl-C'), 130);
  assert.ok(Date.now() - t0 < EXIT_BOUND_MS, `exited ${Date.now() - t0} ms after the second Ctrl-C`);
});

test.run();
