import { F, FrameError, decodeFrame, encodeFrame, type Frame, type HttpHead, type TcpHead } from '../protocol/frames.js';
import { FairWriter } from './fair-writer.js';
import type { ClientStream, Sender } from './streams.js';
import type { WsClient } from '../protocol/ws-client.js';

// One control connection of a client, as its streams see it: the main connection
// (tunnel-client.ts), a lane on another shard (lanes.ts) or the sibling on another node
// (node-sibling.ts), each a ClientConnection (joined-connection.ts) around its Link. The server
// opens every stream on the connection the visitor's shard holds, and each stream answers on
// that same connection.

/** Opens a client stream for StreamOpen `sid` of tunnel `tunnelId` on `link`. */
export type StreamOpener = (link: Link, sid: number, tunnelId: string, head: HttpHead | TcpHead) => void;

/** Longer than a heartbeat could wait for its Pong (HEARTBEAT_MISSES intervals). */
const MAX_RTT_MS = 60_000;
/** Response deadlines are looked at this often at most (and a quarter of the timeout at least). */
const MAX_SWEEP_MS = 1_000;

export class Link {
  readonly streams = new Map<number, ClientStream>();
  readonly sender: Sender;
  lastSeenMs = Date.now();
  /** The last heartbeat's round trip (Ping sent → its Pong), ms; null before the first Pong. */
  rttMs: number | null = null;

  /**
   * One timer for the response deadlines of all the link's streams, running while it has
   * streams: a timer per request cost an allocation and two timer-list moves each. A stream
   * times out between its deadline and a sweep period (≤ 1 s, ≤ a quarter of the timeout) later.
   */
  private sweep: NodeJS.Timeout | null = null;
  private readonly writer: FairWriter;

  constructor(readonly ws: WsClient) {
    const writer = (this.writer = new FairWriter(ws, (sid) => this.streams.get(sid)?.turnCame()));
    this.sender = {
      send: (frame) => {
        // A stream's End waits for its queued Data; its Reset overtakes it (fair-writer.ts).
        if (frame[0] === F.End) writer.end(frame[1]);
        else if (frame[0] === F.Reset) writer.reset(frame[1], frame);
        else this.send(frame);
      },
      sendData: (sid, bytes) => writer.data(sid, bytes),
    };
  }

  send(frame: Frame): void {
    this.ws.send(encodeFrame(frame));
  }

  /**
   * One message from the server: marks the connection alive, decodes it (a malformed one closes
   * the connection, 1002), handles what every connection handles alike (streams, heartbeats).
   * Returns the frame left for the connection's owner, or null.
   */
  receive(m: Buffer, open: StreamOpener): Frame | null {
    this.lastSeenMs = Date.now();
    let frame: Frame;
    try {
      frame = decodeFrame(m);
    } catch (err) {
      this.ws.close(1002, (err as FrameError).message);
      return null;
    }
    return this.handleStreamFrame(frame, open) ? null : frame;
  }

  /** The frames every connection handles alike (streams, heartbeats); false for the others. */
  private handleStreamFrame(frame: Frame, open: StreamOpener): boolean {
    switch (frame[0]) {
      case F.StreamOpen:
        open(this, frame[1], frame[2], frame[3]);
        return true;
      case F.Data:
        this.streams.get(frame[1])?.onData(frame[2] as Buffer);
        return true;
      case F.End:
        this.streams.get(frame[1])?.onEnd();
        return true;
      case F.Reset:
        this.writer.drop(frame[1]);
        this.streams.get(frame[1])?.onReset(frame[2]);
        return true;
      case F.Credit:
        this.streams.get(frame[1])?.onCredit(frame[2]);
        return true;
      case F.Ping:
        this.send([F.Pong, frame[1]]);
        return true;
      case F.Pong: {
        // Our own Ping's clock reading comes back; a Pong that names a future or long-past
        // time was not ours (or the clock stepped): not a measurement.
        const rtt = Date.now() - frame[1];
        if (rtt >= 0 && rtt <= MAX_RTT_MS) this.rttMs = rtt;
        return true;
      }
      default:
        return false;
    }
  }

  /** Adds a stream; its response deadline (if it has one) is watched from now on. */
  addStream(s: ClientStream, timeoutMs: number): void {
    this.streams.set(s.sid, s);
    if (this.sweep === null) {
      const period = Math.max(10, Math.min(MAX_SWEEP_MS, Math.floor(timeoutMs / 4)));
      this.sweep = setInterval(this.checkDeadlines, period);
      // The streams' sockets keep the process alive, not their deadlines.
      this.sweep.unref();
    }
  }

  private readonly checkDeadlines = (): void => {
    if (this.streams.size === 0) {
      clearInterval(this.sweep!);
      this.sweep = null;
      return;
    }
    const now = Date.now();
    for (const s of this.streams.values()) s.checkDeadline(now);
  };

  /** The connection is gone: its streams die with it (no frames: there is no one to tell). */
  abortStreams(): void {
    if (this.sweep !== null) clearInterval(this.sweep);
    this.sweep = null;
    for (const s of this.streams.values()) s.abort();
    this.streams.clear();
  }
}
