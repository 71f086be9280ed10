import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/fixtures.js';
import { F, INITIAL_WINDOW_BYTES, MAX_DATA_BYTES, type Frame, type Opened } from '../../src/protocol/frames.js';
import { WINDOW_SLACK_BYTES } from '../../src/protocol/flow-control.js';
import { rawPeer, type RawPeer } from './raw-peer.js';
import { sleep } from './helpers.js';
import { lanePorts } from '../helpers/ports.js';

// A TCP stream's window, enforced by the edge both ways: a client that never returns credit
// receives no more than the window from a visitor, and one that sends past the window and its
// slack has the stream reset. (A 4 MiB window for TCP streams was tried and measured no faster
// on the bench: the stream is CPU-bound there, and the window is what a stalled stream holds.)

let server: TestServer;
const peers: RawPeer[] = [];
const sockets: net.Socket[] = [];
const RANGE_MIN = lanePorts(21).min;

test.before(async () => {
  server = await startServer({ args: ['--tcp-port-range', `${RANGE_MIN}-${RANGE_MIN + 20}`] });
});

test.after(async () => {
  for (const s of sockets) s.destroy();
  for (const p of peers) p.ws.destroy();
  await server?.stop();
});

/** A raw client with a TCP tunnel and one visitor connected to it: the stream's id and the socket. */
async function tcpStream(): Promise<{ peer: RawPeer; sid: number; visitor: net.Socket }> {
  const peer = await rawPeer(server.url, server.adminKey);
  peers.push(peer);
  const opened = await peer.open({ type: 'tcp' });
  assert.is(opened[0], F.Opened, JSON.stringify(opened));
  const port = (opened[2] as Opened).remotePort!;
  const visitor = net.connect(port, '127.0.0.1');
  visitor.on('error', () => undefined);
  sockets.push(visitor);
  const open = await peer.waitFor((f) => f[0] === F.StreamOpen, 5_000, 'StreamOpen');
  return { peer, sid: open[1] as number, visitor };
}

const dataBytes = (frames: Frame[], sid: number): number =>
  frames.reduce((n, f) => n + (f[0] === F.Data && f[1] === sid ? (f[2] as Uint8Array).byteLength : 0), 0);

test('a client that returns no credit gets one window from a TCP visitor, and no more', async () => {
  const { peer, sid, visitor } = await tcpStream();
  // The visitor sends three windows' worth; the edge stops reading it once one window is out.
  visitor.write(Buffer.alloc(3 * INITIAL_WINDOW_BYTES, 7));
  await eventually(() => dataBytes(peer.frames, sid) >= INITIAL_WINDOW_BYTES, 10_000, 'a whole window at the client');
  await sleep(300);
  const got = dataBytes(peer.frames, sid);
  // The window, plus at most what the socket handed over in the read that spent it.
  assert.ok(got <= INITIAL_WINDOW_BYTES + 256 * 1024, `${got} bytes`);
  // Credit for all of it: the rest flows.
  peer.send([F.Credit, sid, got]);
  await eventually(() => dataBytes(peer.frames, sid) > got, 5_000, 'more after credit');
});

test('a client may keep a window in flight on a TCP stream; past it and the slack the stream is reset', async () => {
  const { peer, sid, visitor } = await tcpStream();
  // The visitor reads nothing: once the kernel's buffers are full the edge credits nothing more.
  visitor.pause();
  const credited = (): number => peer.frames.reduce((n, f) => n + (f[0] === F.Credit && f[1] === sid ? (f[2] as number) : 0), 0);
  let sent = 0;
  for (let round = 0; round < 100; round++) {
    const before = credited();
    // Up to the window exactly: credit may be for any number of bytes (the edge credits what the
    // visitor's socket took, and a frame may reach it in pieces), so the last frame may be short.
    while (sent < before + INITIAL_WINDOW_BYTES) {
      const n = Math.min(MAX_DATA_BYTES, before + INITIAL_WINDOW_BYTES - sent);
      peer.send([F.Data, sid, Buffer.alloc(n, 1)]);
      sent += n;
    }
    await sleep(200);
    if (credited() === before) break;
  }
  assert.is(sent - credited(), INITIAL_WINDOW_BYTES, 'a whole window in flight');
  assert.not.ok(peer.frames.some((f) => f[0] === F.Reset && f[1] === sid), 'no reset within the window');
  for (let extra = 0; extra <= WINDOW_SLACK_BYTES + MAX_DATA_BYTES; extra += MAX_DATA_BYTES) peer.send([F.Data, sid, Buffer.alloc(MAX_DATA_BYTES, 2)]);
  const reset = await withDeadline(peer.waitFor((f) => f[0] === F.Reset && f[1] === sid, 10_000, 'Reset'), 10_000, 'reset');
  assert.is(reset[2], 'protocol');
});

test.run();
