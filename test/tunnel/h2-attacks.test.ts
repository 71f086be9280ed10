import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http2 from 'node:http2';
import { CliSuite } from '../cli/harness.js';
import { withDeadline } from '../helpers/deadline.js';
import { h2Get } from './helpers.js';
import { ERR, FLAG, RawH2, T, field, frame, getBlock, indexedField, integer, settings, u32 } from './h2-raw.js';

// HTTP/2 attacks on the public port, each from a raw peer writing frames by hand (h2-raw.ts),
// against a real burrowd (h2c, --h2-max-streams 50) and a real `burrow http` toward an HTTP/1.1
// service. After each: the abuser's connection got GOAWAY or was closed, and another visitor's
// requests are still answered (fairness), on a connection of its own, while the abuse goes on.

const MAX_STREAMS = 50;
let suite: CliSuite;
let host = '';

/**
 * Another visitor: a fresh HTTP/2 connection from another address (127.0.0.2: the per-address
 * limits and buffer budget count the abuser's 127.0.0.1 apart), one GET, its status and body.
 */
function visitor(path = '/'): Promise<{ status: number; body: string }> {
  const session = http2.connect(`http://127.0.0.1:${suite.srv.port}`, { localAddress: '127.0.0.2' } as http2.SecureClientSessionOptions);
  session.on('error', () => undefined);
  const answer = h2Get(session, host, path);
  return withDeadline(answer, 5_000, 'a fair visitor').finally(() => session.close());
}

async function stillFair(): Promise<void> {
  const r = await visitor();
  assert.is(r.status, 200);
  assert.is(r.body, 'ok');
}

test.before(async () => {
  suite = await CliSuite.start({ workers: 1, args: ['--h2-max-streams', String(MAX_STREAMS)] });
  const port = await suite.http((req, res) => {
    if (req.url === '/big') {
      res.setHeader('content-length', String(8 * 1024 * 1024));
      return void res.end(Buffer.alloc(8 * 1024 * 1024, 1));
    }
    res.end('ok');
  });
  const child = suite.burrows.start(suite.admin, ['http', String(port), '--id', 'target', '--no-inspect']);
  host = new URL(await suite.burrows.firstLine(child)).host;
});

test.after(async () => {
  await suite?.stop();
});

test('the stream cap is --h2-max-streams and extended CONNECT is not offered', async () => {
  const session = http2.connect(`http://127.0.0.1:${suite.srv.port}`);
  try {
    await withDeadline(new Promise((resolve) => session.once('remoteSettings', resolve)), 5_000, 'settings');
    assert.is(session.remoteSettings.maxConcurrentStreams, MAX_STREAMS);
    assert.not.ok(session.remoteSettings.enableConnectProtocol);
  } finally {
    session.close();
  }
  await stillFair();
});

test('Rapid Reset (CVE-2023-44487): streams opened and cancelled at once get GOAWAY', async () => {
  const raw = await RawH2.connect(suite.srv.port);
  const during = visitor();
  for (let id = 1; id < 2 * 2000 && !raw.closed; id += 2) {
    raw.write(frame(T.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, id, getBlock(host)), frame(T.RST_STREAM, 0, id, u32(ERR.CANCEL)));
    if (id % 100 === 99) await new Promise((r) => setImmediate(r));
  }
  assert.ok(await raw.until(() => raw.goaway !== null, 5_000), 'GOAWAY');
  assert.is(raw.goaway, ERR.ENHANCE_YOUR_CALM);
  assert.ok(await raw.until(() => raw.closed, 5_000), 'closed');
  assert.is((await during).status, 200);
  await stillFair();
});

test('MadeYouReset (CVE-2025-8671): frames that make the server reset each stream get GOAWAY', async () => {
  const raw = await RawH2.connect(suite.srv.port);
  for (let id = 1; id < 2 * 2000 && !raw.closed; id += 2) {
    // A WINDOW_UPDATE of 0 is a stream error: the server resets the stream itself (RFC 9113 §6.9).
    raw.write(frame(T.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, id, getBlock(host)), frame(T.WINDOW_UPDATE, 0, id, u32(0)));
    if (id % 100 === 99) await new Promise((r) => setImmediate(r));
  }
  assert.ok(await raw.until(() => raw.goaway !== null || raw.closed, 5_000), 'GOAWAY or closed');
  assert.ok(await raw.until(() => raw.closed, 5_000), 'closed');
  await stillFair();
});

test('a CONTINUATION flood ends the connection', async () => {
  const raw = await RawH2.connect(suite.srv.port);
  raw.write(frame(T.HEADERS, 0, 1, getBlock(host)));
  const piece = field('x-flood', 'a'.repeat(1000));
  for (let i = 0; i < 5_000 && !raw.closed; i++) {
    raw.write(frame(T.CONTINUATION, 0, 1, piece));
    if (i % 200 === 199) await new Promise((r) => setImmediate(r));
  }
  assert.ok(await raw.until(() => raw.closed || raw.goaway !== null, 5_000), 'closed or GOAWAY');
  await stillFair();
});

test('a SETTINGS flood and a PING flood get GOAWAY', async () => {
  for (const flood of [() => frame(T.SETTINGS, 0, 0, settings([[4, 65535]])), () => frame(T.PING, 0, 0, Buffer.alloc(8, 1))]) {
    const raw = await RawH2.connect(suite.srv.port);
    for (let i = 0; i < 5_000 && !raw.closed; i++) {
      raw.write(flood());
      if (i % 200 === 199) await new Promise((r) => setImmediate(r));
    }
    assert.ok(await raw.until(() => raw.goaway !== null || raw.closed, 5_000), 'GOAWAY or closed');
    assert.ok(await raw.until(() => raw.closed, 5_000), 'closed');
    await stillFair();
  }
});

test('an oversized header list and an HPACK bomb are refused, and nothing reaches the service', async () => {
  // 48 KiB of one field, over the 32 KiB head limit, in CONTINUATION frames of 16 KiB.
  const raw = await RawH2.connect(suite.srv.port);
  const block = Buffer.concat([getBlock(host), field('x-big', 'b'.repeat(48 * 1024))]);
  const parts = [block.subarray(0, 16_000), block.subarray(16_000, 32_000), block.subarray(32_000)];
  raw.write(frame(T.HEADERS, FLAG.END_STREAM, 1, parts[0]!), frame(T.CONTINUATION, 0, 1, parts[1]!), frame(T.CONTINUATION, FLAG.END_HEADERS, 1, parts[2]!));
  assert.ok(await raw.until(() => raw.closed || raw.frames.some((f) => (f.type === T.RST_STREAM && f.stream === 1) || f.type === T.GOAWAY || (f.type === T.HEADERS && f.stream === 1)), 5_000), 'refused');
  assert.not.ok(answered200(raw, 1), 'no 200 for an oversized head');
  raw.close();

  // A 4000-byte field put in the dynamic table once, then named by its index (one byte) 1,000 times.
  const bomb = await RawH2.connect(suite.srv.port);
  const refs = Buffer.alloc(1000, integer(62, 7, 0x80)[0]!);
  bomb.write(frame(T.HEADERS, FLAG.END_STREAM | FLAG.END_HEADERS, 1, Buffer.concat([getBlock(host), indexedField('x-bomb', 'c'.repeat(4000)), refs])));
  assert.ok(await bomb.until(() => bomb.closed || bomb.frames.some((f) => (f.type === T.RST_STREAM && f.stream === 1) || f.type === T.GOAWAY || (f.type === T.HEADERS && f.stream === 1)), 5_000), 'refused');
  assert.not.ok(answered200(bomb, 1), 'no 200 for an HPACK bomb');
  bomb.close();
  await stillFair();
});

test('a visitor that never reads holds only its own streams', async () => {
  // No window for the server's DATA at all, and streams that each ask for 8 MiB.
  // 16 streams: each holds its 2 MiB window at the edge (32 MiB, the shard's whole buffer budget).
  const raw = await RawH2.connect(suite.srv.port, settings([[4, 0]]));
  for (let id = 1; id <= 31; id += 2) raw.write(frame(T.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, id, getBlock(host, '/big')));
  await raw.until(() => raw.frames.filter((f) => f.type === T.HEADERS).length >= 16, 5_000);
  for (let i = 0; i < 5; i++) await stillFair();
  raw.close();
});

/** Whether the server answered stream `id` with a 200 (HPACK static index 8 is `:status 200`). */
function answered200(raw: RawH2, id: number): boolean {
  return raw.frames.some((f) => f.type === T.HEADERS && f.stream === id && f.payload[0] === 0x88);
}

test.run();
