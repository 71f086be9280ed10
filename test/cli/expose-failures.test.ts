// What `burrow http|tcp` says when the local service gives no answer: the status the visitor got
// (502 / 504) and why, in the request line and the --json event; a TCP connection that could not
// reach the local service says so. Real burrowd, real (closed or silent) local ports.
import { createServer as createHttpServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { withDeadline } from '../helpers/fixtures.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { adminOf, closedPort, exitOf, RunningBurrows, tempDir, waitFor, type CliEnv } from './harness.js';

let srv: TestServer;
let home: { dir: string; remove: () => void };
let alice: CliEnv;
let silent: Server;
const burrows = new RunningBurrows();

test.before(async () => {
  srv = await startServer();
  home = tempDir();
  alice = adminOf(srv, home.dir);
  silent = createHttpServer(() => undefined);
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
});

test.after(async () => {
  burrows.killAll();
  silent?.closeAllConnections();
  silent?.close();
  await srv?.stop();
  home?.remove();
});

/** The whole response, as the visitor's browser (Accept: text/html) or a script gets it. */
function fetchRaw(host: string, path = '/', accept = '*/*'): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve, reject) => {
      const s = connect(srv.port, '127.0.0.1', () => s.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nAccept: ${accept}\r\nConnection: close\r\n\r\n`));
      let data = '';
      s.on('data', (d) => (data += d));
      s.on('end', () => resolve(data));
      s.on('error', reject);
    }),
    15_000,
    `GET ${host}${path}`,
  );
}

async function get(host: string, path = '/'): Promise<number> {
  return Number(/^HTTP\/1\.1 (\d+)/.exec(await fetchRaw(host, path))?.[1] ?? 0);
}

test('local service down: the visitor gets 502 without the local address; burrow says "connection refused by host:port" (line and --json)', async () => {
  const port = await closedPort();
  const json = burrows.start(alice, ['http', `127.0.0.1:${port}`, '--id', 'down-json', '--json']);
  await burrows.firstLine(json);
  assert.is(await get(`down-json.localhost:${srv.port}`, '/x'), 502);
  const event = await waitFor(() => json.output.stdout.split('\n').find((l) => l.includes('"request"')), 10_000, 'request event');
  const e = JSON.parse(event) as { status: number; error: string; path: string };
  assert.is(e.status, 502);
  assert.is(e.path, '/x');
  assert.is(e.error, `connection refused by 127.0.0.1:${port}`);
  json.kill('SIGINT');
  await exitOf(json, 10_000, 'json exit');

  const plain = burrows.start(alice, ['http', `127.0.0.1:${port}`, '--id', 'down-plain']);
  await burrows.firstLine(plain);
  assert.is(await get(`down-plain.localhost:${srv.port}`, '/y'), 502);
  const line = await waitFor(() => plain.output.stdout.split('\n').find((l) => / GET /.test(l)), 10_000, 'request line');
  assert.match(line, new RegExp(`^\\d\\d:\\d\\d:\\d\\d\\.\\d{3}  GET\\s+/y\\s+502 Bad Gateway\\s+\\S+\\s+connection refused by 127\\.0\\.0\\.1:${port}$`));
  // The public never learns the local address (nor that it is 127.0.0.1): only the client says it.
  for (const accept of ['text/html', 'application/json']) {
    const page = await fetchRaw(`down-plain.localhost:${srv.port}`, '/z', accept);
    assert.match(page, /^HTTP\/1\.1 502 /);
    assert.match(page, /the tunnel client could not reach its local service/);
    assert.not.match(page, new RegExp(`127\\.0\\.0\\.1|${port}|refused`), page);
  }
  plain.kill('SIGINT');
  await exitOf(plain, 10_000, 'plain exit');
});

test('local service silent: the request event says 504 and how long it waited', async () => {
  const client = new TunnelClient({ server: srv.url, token: srv.adminKey, type: 'http', local: { host: '127.0.0.1', port: (silent.address() as { port: number }).port }, responseTimeoutMs: 300 });
  try {
    const events: { status: number; error?: string }[] = [];
    client.on('request', (e) => events.push(e));
    const { id } = await withDeadline(client.start(), 10_000, 'tunnel start');
    assert.is(await get(`${id}.localhost:${srv.port}`), 504);
    const e = await waitFor(() => events[0], 10_000, 'request event');
    assert.is(e.status, 504);
    assert.is(e.error, `no response from 127.0.0.1:${(silent.address() as { port: number }).port} within 0.3 s`);
  } finally {
    await client.stop();
  }
});

test('a TCP connection the local service refused says so', async () => {
  const port = await closedPort();
  const child = burrows.start(alice, ['tcp', `127.0.0.1:${port}`, '--json']);
  const first = JSON.parse(await burrows.firstLine(child)) as { url: string };
  const publicPort = Number(/:(\d+)$/.exec(first.url)![1]);
  await withDeadline(
    new Promise<void>((resolve) => {
      const s = connect(publicPort, '127.0.0.1');
      s.on('error', () => resolve());
      s.on('close', () => resolve());
    }),
    10_000,
    'public TCP connection closed',
  );
  const event = await waitFor(() => child.output.stdout.split('\n').find((l) => l.includes('"connection"')), 10_000, 'connection event');
  assert.is((JSON.parse(event) as { error: string }).error, `connection refused by 127.0.0.1:${port}`);
  child.kill('SIGINT');
  await exitOf(child, 10_000, 'tcp exit');
});

test.run();
