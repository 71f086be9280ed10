import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { EventEmitter } from 'node:events';
import type { TokenBucket } from './token-bucket.js';
import { WS_CLOSE, WS_OP, WsDecoder, WsFrameError, encodeClosePayload, parseClosePayload, writeWsHeader, wsHeaderBytes } from './ws-frames.js';

// One end of a WebSocket on a raw socket (binary messages): the tunnel client's control socket
// (client/ws-client.ts, role 'client') and the edge's end of it (edge/control.ts, role
// 'server'). Framing is ws-frames.ts; this adds message reassembly (bounded), ping/pong, the
// close handshake and one write per loop turn.

/** How long a closed connection waits for the peer to close its side. */
const CLOSE_LINGER_MS = 2_000;
const NO_PAYLOAD = new Uint8Array(0);
/**
 * Frames and payloads smaller than this are copied into one buffer per loop turn; larger
 * payloads are written as they are (no copy), each a chunk of the socket's queue.
 */
const JOIN_BELOW_BYTES = 4096;
/**
 * What one chunk waiting in a socket's write queue holds beyond its bytes: its Buffer and the
 * stream's queue entry (measured: ~170 B of heap, ~270 B of RSS for a 6-byte chunk). Tiny
 * frames counted by their bytes alone let a peer that never reads grow the process by 400 MiB
 * while the count said a few MiB.
 */
export const CHUNK_OVERHEAD_BYTES = 256;
/** What a closed connection still reads (and drops) while it waits for the peer's FIN. */
const READ_AFTER_CLOSE_BYTES = 64 * 1024;

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

/** The Sec-WebSocket-Accept of a handshake's Sec-WebSocket-Key (RFC 6455 section 4.2.2). */
export function websocketAccept(key: string): string {
  return createHash('sha1').update(key + WS_GUID).digest('base64');
}

export interface WsEvents {
  /** The message, or (splitPayloads) its first piece and the rest, views of the socket's reads. */
  message: [Buffer, Buffer[]?];
  close: [number, string];
  drain: [];
  /** Reading stopped: more than `pauseReadsOverBytes` of output waits for the peer. */
  readsPaused: [];
  /** Reading went on: the peer read half of it. */
  readsResumed: [];
}

export interface WsOptions {
  /**
   * Stop reading while this much output (unreadCost) waits for the peer, and go on once half of
   * it left: whatever a peer sends that costs an answer then waits in its own kernel buffers, not
   * in ours. Only one end of a connection may set it (the server's), or two ends that both
   * write much and read little would wait for each other.
   */
  pauseReadsOverBytes?: number;
  /** Every Ping the peer sends spends a token; a peer that runs out is closed (1008). */
  answerBudget?: TokenBucket;
  /**
   * A message that arrived across socket reads comes as 'message' (first, more): views of the
   * reads, not one copied buffer. Its listener must take both arguments.
   */
  splitPayloads?: boolean;
}

export class WsConnection extends EventEmitter<WsEvents> {
  private readonly decoder: WsDecoder;
  private fragments: Buffer[] = [];
  private fragmentBytes = 0;
  private closed = false;
  /** When the peer was last heard (any bytes): a link's heartbeat (src/cluster/node-links.ts) reads it. */
  lastSeenMs = Date.now();

  /** Our frames are masked exactly when we are the client end (RFC 6455 §5.1). */
  private readonly masked: boolean;

  constructor(
    readonly socket: Socket,
    head: Buffer,
    private readonly maxMessageBytes: number,
    role: 'client' | 'server',
    opts: WsOptions = {},
  ) {
    super();
    this.pauseReadsOver = opts.pauseReadsOverBytes ?? Infinity;
    this.answerBudget = opts.answerBudget ?? null;
    this.masked = role === 'client';
    this.decoder = new WsDecoder({ maxPayloadBytes: maxMessageBytes, expectMasked: role === 'server', splitPayloads: opts.splitPayloads === true });
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => this.onData(d));
    socket.on('drain', () => this.emit('drain'));
    socket.on('error', () => undefined);
    // A FIN without a close frame ends the WebSocket too (a half-open socket would keep it).
    socket.on('end', () => this.finish(WS_CLOSE.Abnormal, 'connection lost'));
    socket.on('close', () => this.finish(WS_CLOSE.Abnormal, 'connection lost'));
    if (head.length) setImmediate(() => this.onData(head));
  }

  /** Sends one binary message; false when the socket's buffer is over its high-water mark. */
  send(payload: Uint8Array): boolean {
    if (this.closed) return false;
    this.writeFrame(WS_OP.Binary, payload);
    return this.bufferedBytes < this.socket.writableHighWaterMark;
  }

  /** Sends one binary message made of two buffers (a frame head and a payload); a large payload is not copied. */
  sendParts(head: Uint8Array, payload: Uint8Array): boolean {
    if (this.closed) return false;
    this.putHeader(WS_OP.Binary, head.byteLength + payload.byteLength);
    this.put(head);
    this.put(payload);
    return this.bufferedBytes < this.socket.writableHighWaterMark;
  }

  /**
   * Frames written in one loop turn leave in one write, at setImmediate (libuv's check phase,
   * after every socket read of this turn): the small ones joined into one buffer, large payloads
   * beside it in the same writev (the socket is corked meanwhile). With nextTick, each local
   * response read was its own write; per turn, 64 concurrent requests measured 12.4k -> 15.9k
   * req/s and a small request beside a bulk download 10.5 -> 5.2 ms p50. Joined, a turn of many
   * small frames is one chunk in the socket's queue, not two per frame.
   */
  private corked = false;
  /**
   * This turn's small pieces, joined at its end: bytes, or a frame header still as a number
   * (payload bytes × 16 + opcode), written straight into the joined buffer. The first
   * `joinedCount` entries count: the array is reused, never emptied (an emptied array
   * allocates its storage again at the next push).
   */
  private readonly joined: (Uint8Array | number | undefined)[] = [];
  private joinedCount = 0;
  private joinedBytes = 0;
  /** Chunks handed to the socket whose write has not completed (each costs CHUNK_OVERHEAD_BYTES). */
  private chunksQueued = 0;
  /** A Ping's answer, sent once per turn for the latest Ping (RFC 6455 section 5.5.3 allows it). */
  private pendingPong: Buffer | null = null;
  private readonly pauseReadsOver: number;
  private readonly answerBudget: TokenBucket | null;
  private readsPaused = false;
  private readAfterClose = 0;
  private readonly uncork = (): void => {
    if (!this.corked) return;
    this.corked = false;
    this.flushJoined();
    this.socket.uncork();
  };
  private readonly written = (): void => {
    this.chunksQueued--;
    if (this.readsPaused && this.unreadCost <= this.pauseReadsOver / 2) this.resumeReads();
  };
  private corkTick(): void {
    if (this.corked) return;
    this.corked = true;
    this.socket.cork();
    setImmediate(this.uncork);
  }

  /** Queues a piece of this turn's output (corking the socket until the turn ends). */
  private put(piece: Uint8Array): void {
    this.corkTick();
    if (piece.byteLength < JOIN_BELOW_BYTES) {
      this.joined[this.joinedCount++] = piece;
      this.joinedBytes += piece.byteLength;
      return;
    }
    // Mid-frame (its header is joined, this is its payload): the Pong waits for the turn's end.
    this.flushJoined(false);
    this.writeChunk(piece);
  }

  /** A frame header, joined with this turn's small pieces (it is 2 to 14 bytes). */
  private putHeader(op: number, payloadBytes: number): void {
    this.corkTick();
    this.joined[this.joinedCount++] = payloadBytes * 16 + op;
    this.joinedBytes += wsHeaderBytes(payloadBytes, this.masked);
  }

  /**
   * Writes this turn's joined pieces as one chunk. `atFrameEnd`: every frame put so far is
   * whole, so the Pong owed may follow them; a large payload's put() flushes between its
   * frame's header and itself, where a Pong would land inside that frame.
   */
  private flushJoined(atFrameEnd = true): void {
    if (this.pendingPong && atFrameEnd) {
      const pong = this.pendingPong;
      this.pendingPong = null;
      // Not putHeader: this runs as the turn's cork is lifted, and must not cork again.
      this.joined[this.joinedCount++] = pong.byteLength * 16 + WS_OP.Pong;
      this.joined[this.joinedCount++] = pong;
      this.joinedBytes += wsHeaderBytes(pong.byteLength, this.masked) + pong.byteLength;
    }
    const n = this.joinedCount;
    if (n === 0) return;
    const first = this.joined[0]!;
    let chunk: Uint8Array;
    if (n === 1 && typeof first !== 'number') chunk = first;
    else {
      const buf = Buffer.allocUnsafe(this.joinedBytes);
      let o = 0;
      for (let i = 0; i < n; i++) {
        const p = this.joined[i]!;
        if (typeof p === 'number') o = writeWsHeader(buf, o, p & 15, Math.floor(p / 16), this.masked);
        else (buf.set(p, o), (o += p.byteLength));
      }
      chunk = buf;
    }
    this.clearJoined();
    this.writeChunk(chunk);
  }

  private clearJoined(): void {
    for (let i = 0; i < this.joinedCount; i++) this.joined[i] = undefined;
    this.joinedCount = 0;
    this.joinedBytes = 0;
  }

  private writeChunk(chunk: Uint8Array): void {
    this.chunksQueued++;
    this.socket.write(chunk, this.written);
  }

  /** Sends what this turn corked now: for a frame that must leave before something else answers. */
  flush(): void {
    this.uncork(); // the pending setImmediate finds nothing corked, or this turn's next cork
  }

  /** The connection ended (a close frame either way, or the socket went). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Bytes written and not yet taken by the kernel (this turn's included). */
  get bufferedBytes(): number {
    return this.socket.writableLength + this.joinedBytes;
  }

  /** What the output waiting for the peer holds in memory: its bytes and a cost per queued chunk. */
  get unreadCost(): number {
    return this.socket.writableLength + this.joinedBytes + this.chunksQueued * CHUNK_OVERHEAD_BYTES;
  }

  private writeFrame(op: number, payload: Uint8Array): void {
    this.putHeader(op, payload.byteLength);
    if (payload.byteLength > 0) this.put(payload);
  }

  close(code = 1000, reason = ''): void {
    if (this.closed) return;
    this.writeFrame(WS_OP.Close, encodeClosePayload(code, reason));
    this.flush();
    this.socket.end();
    this.finish(code, reason);
  }

  private resumeReads(): void {
    this.readsPaused = false;
    if (this.closed) return;
    this.socket.resume();
    this.emit('readsResumed');
  }

  destroy(): void {
    this.socket.destroy();
    this.finish(WS_CLOSE.Abnormal, 'destroyed');
  }

  private finish(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.clearJoined();
    this.pendingPong = null;
    // After a close frame the socket ends gracefully, so what was written (the close, and the
    // frames before it) still leaves; a peer that never closes its side is cut after a while.
    if (this.socket.writableEnded) setTimeout(() => this.socket.destroy(), CLOSE_LINGER_MS).unref();
    else this.socket.destroy();
    this.emit('close', code, reason);
  }

  /** A Ping frame (the peer answers Pong, which refreshes lastSeenMs). */
  ping(): void {
    if (this.closed) return;
    this.writeFrame(WS_OP.Ping, NO_PAYLOAD);
  }

  private onData(d: Buffer): void {
    if (this.closed) {
      // After our close frame only the peer's close and FIN are awaited: a little more is read
      // and dropped; a peer that keeps sending is not read at all (CLOSE_LINGER_MS cuts it).
      this.readAfterClose += d.length;
      if (this.readAfterClose > READ_AFTER_CLOSE_BYTES) this.socket.pause();
      return;
    }
    this.lastSeenMs = Date.now();
    this.decoder.push(d);
    try {
      while (!this.closed && this.handleOne());
    } catch (err) {
      if (!(err instanceof WsFrameError)) throw err;
      this.close(err.closeCode, err.message);
    }
    if (!this.closed && !this.readsPaused && this.unreadCost > this.pauseReadsOver) {
      this.readsPaused = true;
      this.socket.pause();
      this.emit('readsPaused');
    }
  }

  private handleOne(): boolean {
    const frame = this.decoder.next();
    if (!frame) return false;
    const { op, fin, payload, more } = frame;
    switch (op) {
      case WS_OP.Ping:
        if (this.answerBudget && !this.answerBudget.take(this.lastSeenMs)) {
          throw new WsFrameError(WS_CLOSE.Policy, `more than ${this.answerBudget.burst} frames that need an answer at once (${this.answerBudget.perSecond}/s)`);
        }
        // A flood of Pings costs one Pong a turn, not one each.
        this.pendingPong = Buffer.from(payload);
        this.corkTick();
        return true;
      case WS_OP.Pong:
        return true;
      case WS_OP.Close: {
        const { code, reason } = parseClosePayload(payload);
        this.writeFrame(WS_OP.Close, payload.subarray(0, 2));
        this.flush();
        this.socket.end();
        this.finish(code, reason);
        return false;
      }
      default: {
        // (The decoder refuses a new data frame inside a fragmented message: none is open here.)
        if (op !== WS_OP.Continuation && this.fragments.length > 0) this.fragments = [];
        if (fin && this.fragments.length === 0) {
          if (more) this.emit('message', payload, more);
          else this.emit('message', payload);
          return true;
        }
        let bytes = payload.byteLength;
        this.fragments.push(payload);
        if (more) for (const m of more) (this.fragments.push(m), (bytes += m.byteLength));
        this.fragmentBytes = op === WS_OP.Continuation ? this.fragmentBytes + bytes : bytes;
        if (this.fragmentBytes > this.maxMessageBytes) throw new WsFrameError(WS_CLOSE.TooBig, `a message over ${this.maxMessageBytes} bytes`);
        if (fin) {
          const all = Buffer.concat(this.fragments);
          this.fragments = [];
          this.emit('message', all);
        }
        return true;
      }
    }
  }
}
