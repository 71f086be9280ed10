import { F, MAX_DATA_BYTES, dataFrameHead, encodeFrame, type Frame } from '../protocol/frames.js';
import type { WsConnection } from '../protocol/ws-connection.js';

// The streams of one control connection take turns on its socket. Written straight through, a
// bulk download put its whole window (2 MiB) in the socket's buffer at once, and a small answer
// on another stream waited behind all of it (head-of-line: p99 19 ms beside a download, against
// ssh's 5.7 ms, bench/results). Now the socket's own buffer holds at most FILL_BYTES; past that
// each stream's frames wait in a queue of its own, and on every drain the queues are served a
// frame each in turn, so a new stream waits for at most one frame of each busy one.
//
// Once the queues hold more than HOLD_BYTES, a stream whose frames wait stops reading its local
// source until its turn came and its queue is empty (data() returns false, then `turn(sid)`).
// Flow control alone bounded each stream by its window, not the connection: 1024 concurrent
// 1 MiB answers (h2load -c16 -m64) were read whole from the local service (1 GiB, 2 GiB of RSS)
// while the socket got FILL_BYTES an event loop turn, each turn spent reading them, so nothing
// reached the visitors for seconds. Now the queues hold at most HOLD_BYTES and about one local
// read (≤ 64 KiB) a stream past it. Below it nothing pauses: pausing a source at every queued
// read cost 64 downloads of 1 MiB a third of the client's CPU (more system calls a request).

/** What the socket's buffer may hold before frames queue (128 KiB cost a single download 18 % of its rate, 256 KiB 9 %). */
const FILL_BYTES = 256 * 1024;
/** What the queues may hold before a stream with frames waiting stops reading its source. */
const HOLD_BYTES = 8 * 1024 * 1024;

type Queued = { head: Buffer; payload: Uint8Array } | { frame: Buffer };

export class FairWriter {
  /** Queues of the streams waiting for their turn, in turn order. */
  private readonly queues = new Map<number, Queued[]>();
  /** Bytes in the queues. */
  private queuedBytes = 0;

  constructor(
    private readonly ws: WsConnection,
    /** A stream whose data() returned false: its queue emptied, it may read its source again. */
    private readonly turn: (sid: number) => void = () => undefined,
  ) {
    ws.on('drain', () => this.pump());
  }

  /**
   * A stream's bytes, as Data frames of at most MAX_DATA_BYTES, in order with its End. False:
   * some wait for the stream's turn while the queues are full; it should stop reading its source
   * until `turn(sid)`.
   */
  data(sid: number, bytes: Uint8Array): boolean {
    for (let off = 0; off < bytes.byteLength; off += MAX_DATA_BYTES) {
      const part = bytes.byteLength <= MAX_DATA_BYTES ? bytes : bytes.subarray(off, off + MAX_DATA_BYTES);
      // Head and payload as two writes: the payload (a Buffer the local socket handed us,
      // never reused) is not copied.
      this.put(sid, { head: dataFrameHead(sid, part.byteLength), payload: part });
    }
    return this.queuedBytes <= HOLD_BYTES || !this.queues.has(sid);
  }

  /** The stream's End: after its queued Data. */
  end(sid: number): void {
    this.put(sid, { frame: encodeFrame([F.End, sid]) });
  }

  /** A Reset goes at once: the stream's queued Data is void, and must not follow it. */
  reset(sid: number, frame: Frame): void {
    this.drop(sid);
    this.ws.send(encodeFrame(frame));
  }

  /**
   * The server reset the stream: what it still had queued is void. Its stream may be gone here
   * already (the answer was read whole and its End queued), so this is the only one to drop it:
   * a visitor that left mid-answer no longer costs the others its whole answer.
   */
  drop(sid: number): void {
    const queue = this.queues.get(sid);
    if (!queue) return;
    for (const item of queue) this.queuedBytes -= sizeOf(item);
    this.queues.delete(sid);
  }

  private put(sid: number, item: Queued): void {
    const queue = this.queues.get(sid);
    if (!queue && this.ws.bufferedBytes < FILL_BYTES) return this.write(item);
    this.queuedBytes += sizeOf(item);
    if (queue) queue.push(item);
    else this.queues.set(sid, [item]);
  }

  private write(item: Queued): void {
    if ('frame' in item) this.ws.send(item.frame);
    else this.ws.sendParts(item.head, item.payload);
  }

  /** A frame from each waiting stream in turn, until the socket's buffer is full again. */
  private pump(): void {
    while (this.queues.size > 0 && this.ws.bufferedBytes < FILL_BYTES) {
      for (const [sid, queue] of this.queues) {
        const item = queue.shift()!;
        this.queuedBytes -= sizeOf(item);
        this.write(item);
        if (queue.length === 0) {
          this.queues.delete(sid);
          this.turn(sid);
        }
        if (this.ws.bufferedBytes >= FILL_BYTES) return;
      }
    }
  }
}

function sizeOf(item: Queued): number {
  return 'frame' in item ? item.frame.byteLength : item.head.byteLength + item.payload.byteLength;
}
