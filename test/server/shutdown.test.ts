import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { F, FrameError, decodeFrame, encodeFrame } from '../../src/protocol/frames.js';
import { listen, once, visit, sleep, type Local } from '../tunnel/helpers.js';
import { lanePorts } from '../helpers/ports.js';

// Graceful shutdown of the data plane: after SIGTERM tunnelled requests in flight complete
// (200) and an open TCP stream keeps relaying, while new visitors are refused (503 on a
// keep-alive connection, nothing accepted on a new one); the clients learn it (GoAway) and the
// process exits 0 once they are done, within --shutdown-timeout.

const SLOW_MS = 2_500;
const RANGE = { min: lanePorts(51).min, span: 50 };
let web: Local;
let echo: Local;
let slowArrived: () => void = () => undefined;

test.before(async () => {
  web = await listen(
    http.createServer((req, res) => {
      if (req.url === '/slow') {
        slowArrived();
        setTimeout(() => res.end('slow done'), SLOW_MS);
      } else res.end('fast');
    }),
  );
  echo = await listen(net.createServer({ allowHalfOpen: true }, (s) => s.pipe(s)));
});

test.after(async () => {
  await web?.close();
  await echo?.close();
});

/** Writes `text` and resolves with the echo of exactly that many bytes. */
function echoOf(sock: net.Socket, text: string): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve) => {
      let got = '';
      const onData = (b: Buffer): void => {
        got += b.toString();
        if (got.length >= text.length) {
          sock.off('data', onData);
          resolve(got);
        }
      };
      sock.on('data', onData);
      sock.write(text);
    }),
    10_000,
    `echo of ${text}`,
  );
}

/** What a new visitor connection to `port` gets: an error code, or HTTP status / 'data'. */
const outcome = (p: Promise<{ status: number }>): Promise<string> => p.then((r) => `HTTP ${r.status}`, (e: NodeJS.ErrnoException) => e.code ?? String(e));

async function withServer(workers: number, body: (server: TestServer, clients: TunnelClient[]) => Promise<void>): Promise<void> {
  const server = await startServer({ workers, args: ['--shutdown-timeout', '10000', '--tcp-port-range', `${RANGE.min}-${RANGE.min + RANGE.span}`] });
  const clients: TunnelClient[] = [];
  try {
    await body(server, clients);
  } finally {
    await Promise.all(clients.map((c) => c.stop()));
    await server.stop();
  }
}

function tunnel(server: TestServer, clients: TunnelClient[], type: 'http' | 'tcp', port: number): TunnelClient {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type, local: { host: '127.0.0.1', port } });
  clients.push(c);
  return c;
}

test('GoAway frame: round trip, malformed ones refused', () => {
  assert.equal(decodeFrame(encodeFrame([F.GoAway, { timeoutMs: 10_000 }])), [F.GoAway, { timeoutMs: 10_000 }]);
  for (const bad of [[F.GoAway], [F.GoAway, {}], [F.GoAway, { timeoutMs: -1 }], [F.GoAway, { timeoutMs: '5' }], [F.GoAway, { timeoutMs: 1 }, 2]]) {
    assert.throws(() => decodeFrame(encodeFrame(bad as never)), (e: unknown) => e instanceof FrameError, JSON.stringify(bad));
  }
});

test('SIGTERM: the in-flight request completes, the TCP stream goes on, new visitors are refused', async () => {
  // One shard: the keep-alive connection below is certainly on a shard that is still draining.
  await withServer(1, async (server, clients) => {
    const http1 = tunnel(server, clients, 'http', web.port);
    const { id } = await withDeadline(http1.start(), 10_000, 'http tunnel start');
    const host = `${id}.localhost`;
    const tcp1 = tunnel(server, clients, 'tcp', echo.port);
    const { url } = await withDeadline(tcp1.start(), 10_000, 'tcp tunnel start');
    const tcpPort = Number(url.split(':').pop());

    // A keep-alive connection opened before the signal, to ask again during the drain.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    assert.is((await visit(server.port, host, { agent })).status, 200);

    const sock = net.connect({ host: '127.0.0.1', port: tcpPort });
    sock.on('error', () => undefined);
    assert.is(await echoOf(sock, 'before'), 'before');

    const draining = once<[{ timeoutMs: number }]>(http1, 'draining', 10_000);
    const arrived = new Promise<void>((r) => (slowArrived = r));
    const slow = visit(server.port, host, { path: '/slow' }, 20_000);
    await withDeadline(arrived, 10_000, 'slow request reaches the local service');
    const exited = new Promise<number | null>((r) => server.proc.once('exit', (code) => r(code)));
    server.proc.kill('SIGTERM');
    const [notice] = await draining;
    assert.is(notice.timeoutMs, 10_000);

    // Meanwhile: a request on the old keep-alive connection is answered 503 (and the
    // connection closes); new connections, HTTP or TCP, are not accepted.
    const refused = await visit(server.port, host, { agent });
    assert.is(refused.status, 503, refused.body.toString());
    assert.is(refused.headers['content-type'], 'application/problem+json');
    assert.is(refused.headers.connection, 'close');
    assert.match(JSON.parse(refused.body.toString()).detail, /shutting down/);
    const fresh = await outcome(visit(server.port, host));
    assert.ok(fresh === 'ECONNREFUSED', fresh);
    const tcpFresh = await withDeadline(
      new Promise<string>((resolve) => {
        const s = net.connect({ host: '127.0.0.1', port: tcpPort });
        s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
        s.on('close', () => resolve('closed'));
        s.on('data', () => resolve('data'));
        s.write('x');
      }),
      10_000,
      'new tcp visitor',
    );
    assert.is(tcpFresh, 'ECONNREFUSED');

    // The open TCP stream still relays, repeatedly, while the slow request is pending.
    for (let i = 0; i < 3; i++) {
      assert.is(await echoOf(sock, `during-${i}`), `during-${i}`);
      await sleep(300);
    }

    const r = await slow;
    assert.is(r.status, 200);
    assert.is(r.body.toString(), 'slow done');
    assert.is(await echoOf(sock, 'after-slow'), 'after-slow');
    sock.end();

    // Everything finished: the server exits 0.
    const code = await withDeadline(exited, 20_000, 'burrowd exit');
    assert.is(code, 0, server.stderr().slice(-3000));
    agent.destroy();
  });
});

test('SIGTERM with two shards: slow requests crossing between shards complete', async () => {
  await withServer(2, async (server, clients) => {
    const c = tunnel(server, clients, 'http', web.port);
    const { id } = await withDeadline(c.start(), 10_000, 'http tunnel start');
    // Eight connections: the kernel spreads them, so some reach the shard without the tunnel.
    let seen = 0;
    const allArrived = new Promise<void>((r) => (slowArrived = () => void (++seen === 8 && r())));
    const slow = Array.from({ length: 8 }, () => visit(server.port, `${id}.localhost`, { path: '/slow' }, 20_000));
    await withDeadline(allArrived, 10_000, 'slow requests reach the local service');
    const exited = new Promise<number | null>((r) => server.proc.once('exit', (code) => r(code)));
    server.proc.kill('SIGTERM');
    const results = await Promise.all(slow);
    assert.equal(results.map((r) => r.status), Array(8).fill(200));
    assert.is(await withDeadline(exited, 20_000, 'burrowd exit'), 0, server.stderr().slice(-3000));
  });
});

test.run();
