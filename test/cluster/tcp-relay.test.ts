import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { startCluster, type TestCluster } from './cluster.js';
import { createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { lanePorts } from '../helpers/ports.js';
import { INITIAL_WINDOW_BYTES } from '../../src/protocol/frames.js';

// A TCP connection at node B for a tunnel whose client is on node A crosses a link between the
// nodes (and, with two shards a node, may cross A's shard mesh too). Every transfer here is
// larger than a stream's window, so credit must come back over the link for it to finish, and
// one keeps the link busy both ways across several of its heartbeats (a Ping each way every 2 s):
// a relay that loses a byte, a frame, a credit or an End fails, and a deadline names how far it got.

const TCP = lanePorts(10);
const BULK = 4 * INITIAL_WINDOW_BYTES + 5;

let cluster: TestCluster;
let client: TunnelClient;
let port = 0;
const servers: net.Server[] = [];
const sockets = new Set<net.Socket>();

/** A local service on loopback; `serve` gets each connection (allowHalfOpen). */
async function local(serve: (s: net.Socket) => void): Promise<number> {
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
    serve(s);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return (server.address() as net.AddressInfo).port;
}

/** What the local service does with the next connection (the tunnel has one local port). */
let behaviour: (s: net.Socket) => void = (s) => s.pipe(s);

test.before(async () => {
  cluster = await startCluster(2, ['--tcp-port-range', `${TCP.min}-${TCP.max}`], { workers: 2 });
  const localPort = await local((s) => behaviour(s));
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  // No second connection on B: every connection at B crosses the link.
  client = new TunnelClient({ server: cluster.nodes[0]!.nodeUrl, token: key, type: 'tcp', local: { host: '127.0.0.1', port: localPort }, siblings: false });
  port = Number(new URL((await withDeadline(client.start(), 10_000, 'client start')).url).port);
  // B follows the tunnel's port once the route reached it.
  await eventually(async () => (await visit(Buffer.from('ping'), { deadlineMs: 2_000 }).catch(() => null))?.equals(Buffer.from('ping')) === true, 10_000, 'the port answers at B');
});

test.after(async () => {
  await client?.stop().catch(() => undefined);
  for (const s of sockets) s.destroy();
  for (const s of servers) s.close();
  await cluster?.stop();
});

interface VisitOptions {
  deadlineMs?: number;
  /** called with the socket once connected (a slow reader pauses it); without `payload`, it writes and ends itself */
  connected?: (sock: net.Socket) => void;
}

/** One connection at node B: writes `payload`, half-closes, and resolves with all it read until the FIN. */
function visit(payload: Buffer | null, o: VisitOptions = {}): Promise<Buffer> {
  const b = cluster.nodes[1]!;
  const sock = net.connect({ host: b.address, port, allowHalfOpen: true });
  const parts: Buffer[] = [];
  let got = 0;
  const done = new Promise<Buffer>((resolve, reject) => {
    sock.on('error', reject);
    sock.on('data', (d: Buffer) => {
      parts.push(d);
      got += d.length;
    });
    sock.on('end', () => {
      sock.end();
      resolve(Buffer.concat(parts));
    });
    sock.on('connect', () => {
      o.connected?.(sock);
      if (payload) sock.end(payload);
    });
  });
  return withDeadline(done, o.deadlineMs ?? 20_000, 'the relayed connection').catch((err: Error) => {
    sock.destroy();
    throw new Error(`${err.message}: read ${got} bytes, wrote ${sock.bytesWritten}`);
  });
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

test('bulk both ways at once, past the window, byte-exact, then the FIN each way', async () => {
  behaviour = (s) => s.pipe(s);
  const payload = randomBytes(BULK);
  const echoed = await visit(payload);
  assert.is(echoed.length, payload.length);
  assert.ok(echoed.equals(payload), 'echo byte-exact');
});

test('a visitor that half-closes first still gets the answer its upload earns', async () => {
  // The local service answers only after the visitor's FIN: the visitor → client direction ends
  // while the other one has not begun.
  behaviour = (s) => {
    const h = createHash('sha256');
    let n = 0;
    s.on('data', (d: Buffer) => {
      h.update(d);
      n += d.length;
    });
    s.on('end', () => s.end(`${n} ${h.digest('hex')}`));
  };
  const payload = randomBytes(BULK);
  const answer = await visit(payload);
  assert.is(answer.toString(), `${payload.length} ${sha(payload)}`);
});

test('a slow reader gets every byte, and the link serves the next connection', async () => {
  const download = randomBytes(BULK);
  behaviour = (s) => {
    s.resume();
    s.on('end', () => s.end(download));
  };
  // Reads a window's worth, then nothing for 300 ms, over and over: what the sockets between
  // cannot hold waits for credit, so the client's local socket pauses and resumes.
  let window = 0;
  const got = await visit(Buffer.alloc(0), {
    deadlineMs: 30_000,
    connected: (sock) =>
      sock.on('data', (d: Buffer) => {
        window += d.length;
        if (window < INITIAL_WINDOW_BYTES) return;
        window = 0;
        sock.pause();
        setTimeout(() => sock.resume(), 300);
      }),
  });
  assert.is(got.length, download.length);
  assert.ok(got.equals(download), 'download byte-exact');
  // The same link (its heartbeats answered meanwhile) carries the next connection.
  behaviour = (s) => s.pipe(s);
  const payload = randomBytes(BULK);
  assert.ok((await visit(payload)).equals(payload), 'echo byte-exact after the slow read');
});

test('a connection busy both ways across several link heartbeats stays whole', async () => {
  // The link pings each way every 2 s; a steady stream for 5 s has frames of both directions
  // before and after the Pings and their Pongs. A Pong whose head was miscounted, or one written
  // between a large frame's header and its payload, broke the link under the stream (or, when
  // the misread bytes looked like a header, left it waiting: a stall).
  behaviour = (s) => s.pipe(s);
  const sent: Buffer[] = [];
  const got = await visit(null, {
    connected: (sock) => {
      const started = Date.now();
      const tick = setInterval(() => {
        if (Date.now() - started > 5_000 || sock.destroyed) {
          clearInterval(tick);
          sock.end();
          return;
        }
        const chunk = randomBytes(16 * 1024);
        sent.push(chunk);
        sock.write(chunk);
      }, 20);
    },
  });
  const all = Buffer.concat(sent);
  assert.ok(all.length > INITIAL_WINDOW_BYTES, `${all.length} bytes: past the window, so credit crossed the link too`);
  assert.is(got.length, all.length);
  assert.ok(got.equals(all), 'echo byte-exact');
});

test.run();
