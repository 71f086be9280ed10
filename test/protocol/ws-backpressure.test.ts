import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { WsConnection, type WsOptions } from '../../src/protocol/ws-connection.js';
import { WS_OP, WsDecoder, encodeWsFrame } from '../../src/protocol/ws-frames.js';
import { TokenBucket } from '../../src/protocol/token-bucket.js';
import { eventually, withDeadline } from '../helpers/fixtures.js';

// What a WebSocket's server end does for a peer that sends much and reads nothing: Pings cost
// one Pong per loop turn (not one each) and spend the connection's answer budget; output that
// waits past pauseReadsOverBytes stops the reading until the peer has read half of it.

/** A server end on a loopback socket, and the raw client socket facing it. */
async function serverAnd(opts: WsOptions): Promise<{ server: WsConnection; raw: net.Socket; close(): void }> {
  let resolveServer!: (ws: WsConnection) => void;
  const accepted = new Promise<WsConnection>((r) => (resolveServer = r));
  const srv = net.createServer((s) => resolveServer(new WsConnection(s, Buffer.alloc(0), 1 << 20, 'server', opts)));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const raw = net.connect((srv.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise<void>((r) => raw.once('connect', () => r()));
  raw.on('error', () => undefined);
  const server = await accepted;
  return { server, raw, close: () => (raw.destroy(), server.destroy(), srv.close()) };
}

/** Both ends of a WebSocket on a loopback socket: the client end masks (a 6-byte head for a Pong), the server end does not. */
async function wsPair(): Promise<{ client: WsConnection; server: WsConnection; close(): void }> {
  let resolveServer!: (ws: WsConnection) => void;
  const accepted = new Promise<WsConnection>((r) => (resolveServer = r));
  const srv = net.createServer((s) => resolveServer(new WsConnection(s, Buffer.alloc(0), 1 << 20, 'server')));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const sock = net.connect((srv.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise<void>((r) => sock.once('connect', () => r()));
  const client = new WsConnection(sock, Buffer.alloc(0), 1 << 20, 'client');
  const server = await accepted;
  return { client, server, close: () => (client.destroy(), server.destroy(), srv.close()) };
}

/** Every frame the server sent to `raw`, decoded. */
function framesOf(raw: net.Socket): { op: number; payload: Buffer }[] {
  const decoder = new WsDecoder({ maxPayloadBytes: 1 << 20, expectMasked: false });
  const frames: { op: number; payload: Buffer }[] = [];
  raw.on('data', (d: Buffer) => {
    decoder.push(d);
    for (let f = decoder.next(); f; f = decoder.next()) frames.push({ op: f.op, payload: Buffer.from(f.payload) });
  });
  return frames;
}

const ping = (payload: string): Buffer => encodeWsFrame(WS_OP.Ping, Buffer.from(payload), true);

test('1,000 Pings in one read get one Pong, for the latest Ping', async () => {
  const { raw, close } = await serverAnd({});
  const frames = framesOf(raw);
  try {
    raw.write(Buffer.concat(Array.from({ length: 1000 }, (_, i) => ping(`p${i}`))));
    await eventually(() => frames.length > 0, 2_000, 'a Pong');
    await new Promise((r) => setTimeout(r, 100));
    const pongs = frames.filter((f) => f.op === WS_OP.Pong);
    // The kernel may split the write into a few reads: one Pong per read at most.
    assert.ok(pongs.length >= 1 && pongs.length <= 10, `${pongs.length} Pongs`);
    assert.is(pongs.at(-1)!.payload.toString(), 'p999');
  } finally {
    close();
  }
});

test('Pongs either way leave the stream whole: messages around them arrive intact', async () => {
  const { client, server, close } = await wsPair();
  const got: { client: string[]; server: string[] } = { client: [], server: [] };
  client.on('message', (m) => got.client.push(m.toString()));
  server.on('message', (m) => got.server.push(m.toString()));
  try {
    for (let i = 0; i < 20; i++) {
      client.ping();
      server.ping();
      client.send(Buffer.from(`c${i}`));
      server.send(Buffer.from(`s${i}`));
      await new Promise((r) => setTimeout(r, 5));
    }
    const want = (p: string): string[] => Array.from({ length: 20 }, (_, i) => `${p}${i}`);
    await eventually(() => got.client.length === 20 && got.server.length === 20, 3_000, 'every message');
    assert.equal(got.client, want('s'));
    assert.equal(got.server, want('c'));
    assert.not.ok(client.isClosed || server.isClosed, 'both ends open');
  } finally {
    close();
  }
});

test('a Pong owed while a large message goes out waits for the message\'s end, not in the middle of it', async () => {
  // A Ping and a message in one read: the Pong is owed at the end of the turn, and the
  // message's listener sends a payload large enough to be written on its own (not joined). The
  // Pong used to be written between that message's header and its payload: a link between
  // nodes broke (or, when the misread bytes looked like a header, waited for bytes that never came).
  const { client, server, close } = await wsPair();
  const ends = { client, server };
  try {
    for (const [name, pinger, answerer] of [
      ['the client end answers', 'server', 'client'],
      ['the server end answers', 'client', 'server'],
    ] as const) {
      const large = Buffer.alloc(64 * 1024, 7);
      const got: Buffer[] = [];
      ends[answerer].once('message', () => ends[answerer].send(large));
      ends[pinger].on('message', (m) => got.push(Buffer.from(m)));
      ends[pinger].ping();
      ends[pinger].send(Buffer.from('go'));
      await eventually(() => got.length === 1 || ends[pinger].isClosed, 3_000, `${name}: the large message`);
      assert.not.ok(ends[pinger].isClosed, `${name}: the stream stays whole`);
      assert.ok(got[0]!.equals(large), `${name}: the large message intact`);
      ends.client.removeAllListeners('message');
      ends.server.removeAllListeners('message');
    }
  } finally {
    close();
  }
});

test('a peer that spends its answer budget on Pings is closed with 1008', async () => {
  const { server, raw, close } = await serverAnd({ answerBudget: new TokenBucket(50, 1) });
  const frames = framesOf(raw);
  const closed = new Promise<[number, string]>((r) => server.once('close', (code, why) => r([code, why])));
  try {
    raw.write(Buffer.concat(Array.from({ length: 60 }, () => ping(''))));
    const [code, why] = await withDeadline(closed, 2_000, 'the server end closes');
    assert.is(code, 1008);
    assert.match(why, /more than 50 frames that need an answer/);
    await eventually(() => frames.some((f) => f.op === WS_OP.Close), 2_000, 'the close frame reaches the peer');
  } finally {
    close();
  }
});

test('output the peer does not read stops the reading; reading half of it starts it again', async () => {
  const { server, raw, close } = await serverAnd({ pauseReadsOverBytes: 256 * 1024 });
  let messages = 0;
  server.on('message', () => messages++);
  const paused = new Promise<void>((r) => server.once('readsPaused', () => r()));
  try {
    raw.pause();
    // Each message the peer sends is answered with 64 KiB it never reads, until reading stops.
    const answer = Buffer.alloc(64 * 1024);
    server.on('message', () => server.send(answer));
    const request = encodeWsFrame(WS_OP.Binary, Buffer.from('more'), true);
    const writer = setInterval(() => raw.write(request), 1);
    await withDeadline(paused, 10_000, 'reads pause');
    await new Promise((r) => setTimeout(r, 200));
    const seen = messages;
    await new Promise((r) => setTimeout(r, 300));
    clearInterval(writer);
    assert.is(messages, seen, 'no message is read while the output waits');
    assert.ok(server.unreadCost > 256 * 1024, `${server.unreadCost} bytes wait`);
    const resumed = new Promise<void>((r) => server.once('readsResumed', () => r()));
    raw.resume();
    await withDeadline(resumed, 5_000, 'reads resume once the peer reads');
    await eventually(() => messages > seen, 5_000, 'the messages that waited are read');
  } finally {
    close();
  }
});

test('the unread cost counts each queued chunk, not only its bytes', async () => {
  const { server, raw, close } = await serverAnd({});
  try {
    raw.pause();
    const big = Buffer.alloc(1 << 20);
    // Fill the kernel's buffers first, so what follows stays in the socket's queue.
    for (let i = 0; i < 16; i++) server.send(big);
    await new Promise((r) => setTimeout(r, 100));
    const bytesBefore = server.bufferedBytes;
    const costBefore = server.unreadCost;
    // 1,000 one-byte messages over 1,000 loop turns: 1,000 chunks of 3 bytes.
    for (let i = 0; i < 1000; i++) {
      server.send(Buffer.from('x'));
      await new Promise((r) => setImmediate(r));
    }
    const bytes = server.bufferedBytes - bytesBefore;
    const cost = server.unreadCost - costBefore;
    assert.is(bytes, 3000);
    assert.ok(cost >= 3000 + 1000 * 200, `cost ${cost} for 1,000 chunks of 3 bytes`);
  } finally {
    close();
  }
});

test.run();
