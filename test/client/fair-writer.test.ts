// The client's streams take turns on one control connection (src/client/fair-writer.ts): a
// real WebSocket over loopback, the reader pausing so the writer's socket fills as it does
// behind a slow network. A small answer started after a bulk one is not stuck behind all of
// it; each stream's End comes after all its Data; a Reset drops what its stream had queued; a
// stream whose frames wait is told to stop reading, and told when its turn came.
import net from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FairWriter } from '../../src/client/fair-writer.js';
import { WsConnection } from '../../src/protocol/ws-connection.js';
import { F, MAX_FRAME_BYTES, decodeFrame, type Frame } from '../../src/protocol/frames.js';
import { withDeadline } from '../helpers/deadline.js';

const CHUNK = 64 * 1024;

/** A client/server WebSocket pair on loopback; the server side collects the frames it reads. */
async function pair(): Promise<{ writer: WsConnection; reader: net.Socket; frames: Frame[]; close: () => void }> {
  const frames: Frame[] = [];
  let serverSocket!: net.Socket;
  const server = net.createServer((s) => {
    serverSocket = s;
    const ws = new WsConnection(s, Buffer.alloc(0), MAX_FRAME_BYTES, 'server');
    ws.on('message', (m: Uint8Array) => frames.push(decodeFrame(m)));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise<void>((r) => client.once('connect', r));
  await withDeadline(new Promise<void>((r) => (serverSocket ? r() : server.once('connection', () => r()))), 5_000, 'accept');
  return {
    writer: new WsConnection(client, Buffer.alloc(0), MAX_FRAME_BYTES, 'client'),
    reader: serverSocket,
    frames,
    close: () => {
      client.destroy();
      server.close();
    },
  };
}

const sids = (frames: Frame[], type: number): number[] => frames.filter((f) => f[0] === type).map((f) => f[1] as number);

test('a small answer after a bulk one waits for a frame of it, not for all of it; Ends follow their Data', async () => {
  const p = await pair();
  p.reader.pause(); // the visitor side is slow: the writer's buffer fills
  const w = new FairWriter(p.writer);
  for (let i = 0; i < 64; i++) w.data(1, Buffer.alloc(CHUNK, 1)); // 4 MiB of bulk
  w.end(1);
  w.data(3, Buffer.from('small answer'));
  w.end(3);
  p.reader.resume();
  await withDeadline((async () => { while (sids(p.frames, F.End).length < 2) await new Promise((r) => setTimeout(r, 10)); })(), 10_000, 'both Ends');
  const data = p.frames.filter((f) => f[0] === F.Data);
  const bulkBytes = data.filter((f) => f[1] === 1).reduce((n, f) => n + (f[2] as Buffer).length, 0);
  assert.is(bulkBytes, 64 * CHUNK, 'every bulk byte arrived');
  const small = p.frames.findIndex((f) => f[0] === F.Data && f[1] === 3);
  const bulkAfter = p.frames.slice(small).filter((f) => f[0] === F.Data && f[1] === 1).length;
  assert.ok(bulkAfter > 32, `the small answer went ahead of most of the bulk (${bulkAfter} of 64 bulk frames came after it)`);
  for (const sid of [1, 3]) {
    const end = p.frames.findIndex((f) => f[0] === F.End && f[1] === sid);
    assert.ok(p.frames.slice(end + 1).every((f) => f[1] !== sid), `nothing of stream ${sid} after its End`);
  }
  p.close();
});

test("a Reset goes at once and drops what its stream had queued: no Data of it follows", async () => {
  const p = await pair();
  p.reader.pause();
  const w = new FairWriter(p.writer);
  for (let i = 0; i < 64; i++) w.data(5, Buffer.alloc(CHUNK, 5));
  w.reset(5, [F.Reset, 5, 'visitor-gone']);
  w.data(7, Buffer.from('after'));
  w.end(7);
  p.reader.resume();
  await withDeadline((async () => { while (!sids(p.frames, F.End).includes(7)) await new Promise((r) => setTimeout(r, 10)); })(), 10_000, 'End of 7');
  const reset = p.frames.findIndex((f) => f[0] === F.Reset && f[1] === 5);
  assert.ok(reset >= 0, 'the Reset arrived');
  assert.ok(p.frames.slice(reset + 1).every((f) => f[1] !== 5), 'no frame of the reset stream after its Reset');
  p.close();
});

test('a stream whose frames wait while the queues are full hears so (data() is false) and hears when its queue emptied', async () => {
  const p = await pair();
  p.reader.pause();
  const turns: number[] = [];
  const w = new FairWriter(p.writer, (sid) => turns.push(sid));
  const taken: boolean[] = [];
  // 10 MiB: past the socket's share (256 KiB) and past what the queues hold before pausing (8 MiB).
  for (let i = 0; i < 160; i++) taken.push(w.data(9, Buffer.alloc(CHUNK, 9)));
  assert.ok(taken[0], 'the first chunk went straight to the socket');
  assert.ok(taken[16], 'a queued chunk with the queues far from full: the stream reads on');
  assert.is(taken.at(-1), false, 'once the queues are full, the stream is told its bytes wait');
  assert.equal(turns, [], 'no turn before the socket drains');
  p.reader.resume();
  await withDeadline((async () => { while (!turns.includes(9)) await new Promise((r) => setTimeout(r, 10)); })(), 10_000, 'the turn of stream 9');
  assert.is(w.data(9, Buffer.from('more')), true, 'after its turn, its bytes go straight again');
  p.close();
});

test("the server's Reset drops what a stream had queued even when the stream is gone (its End was queued)", async () => {
  const p = await pair();
  p.reader.pause();
  const w = new FairWriter(p.writer);
  for (let i = 0; i < 64; i++) w.data(11, Buffer.alloc(CHUNK, 11));
  w.end(11);
  w.drop(11);
  w.data(13, Buffer.from('after'));
  w.end(13);
  p.reader.resume();
  await withDeadline((async () => { while (!sids(p.frames, F.End).includes(13)) await new Promise((r) => setTimeout(r, 10)); })(), 10_000, 'End of 13');
  const sent = p.frames.filter((f) => f[0] === F.Data && f[1] === 11).length;
  assert.ok(sent < 16, `most of the dropped stream never went (${sent} of 64 frames did, before the drop)`);
  assert.not.ok(sids(p.frames, F.End).includes(11), 'nor its End');
  p.close();
});

test.run();
