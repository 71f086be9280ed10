import net from 'node:net';
import { F, type Frame, type HttpHead, type ResetCode, type TcpHead } from '../protocol/frames.js';
import { CreditMeter, SendWindow, StreamEnds, type Source } from '../protocol/flow-control.js';
import type { ResponseHead } from '../protocol/http1-parser.js';
import type { GuardedObserver } from './observer.js';
import { connectOptions, type LocalTarget } from './local-target.js';
import type { ConnUser, ConnWaiter, LocalConn, LocalPool } from './local-pool.js';
import type { Link } from './link.js';
import { requestHeadBytes, sendsChunked } from '../protocol/raw-head.js';

// The client's streams: one visitor request or TCP connection each, toward the local service.
// A stream writes its frames through the Sender of the control connection it arrived on
// (the main connection or a lane, src/client/link.ts).

export interface Sender {
  send(frame: Frame): void;
  /** False: the bytes wait for the stream's turn on the connection (fair-writer.ts); the stream's turnCame() follows. */
  sendData(sid: number, bytes: Uint8Array): boolean;
}

/**
 * One stream on the client: a visitor's HTTP request or TCP connection toward the local
 * service. Flow control and the end/reset bookkeeping are protocol/flow-control.ts's: the
 * SendWindow pauses the local source (pause/resume) when credit runs out, and so does a turn
 * the connection's writer makes it wait for (the source reads while neither holds it back);
 * the CreditMeter returns credit for bytes the local service took, StreamEnds finishes the stream once.
 * local = local service → visitor (our End), peer = visitor → local service (the server's End).
 */
export abstract class ClientStream implements Source {
  /** Response / TCP bytes we may still send before the server returns credit. */
  protected readonly window = new SendWindow(this);
  /** Its bytes wait for their turn on the connection: the source stays paused until turnCame(). */
  private waitingTurn = false;
  protected readonly meter = new CreditMeter(this);
  protected readonly ends = new StreamEnds(this);
  bytesIn = 0;
  bytesOut = 0;
  readonly startedMs = Date.now();
  /** The observer's view of this HTTP exchange (null: nobody observes; it copies ≤ 64 KiB a body). */
  capture: GuardedObserver | null = null;
  /** The tunnel it serves, as its client keeps it (tunnel-client.ts), and the link it came on. */
  owner: unknown = null;
  link: Link | null = null;
  /** The local service gave no answer: its error, or null for a timeout (see local-error.ts). */
  localFailure: { err: Error | null } | null = null;

  constructor(
    readonly sid: number,
    protected readonly out: Sender,
    protected readonly onFinish: (s: ClientStream) => void,
  ) {}

  get done(): boolean {
    return this.ends.done;
  }

  reportCredit(bytes: number): void {
    if (!this.ends.done) this.out.send([F.Credit, this.sid, bytes]);
  }

  streamFinished(): void {
    this.finished();
  }

  /** Bytes from the server toward the local service. */
  abstract onData(bytes: Buffer): void;
  /** Ends the local service's input (request body end, TCP FIN). */
  protected abstract endDestination(): void;
  /** Tears down the local side's sockets and requests. */
  protected abstract destroy(): void;
  /** Stops and restarts reading the local source (the window and the writer's turns decide when). */
  protected abstract pauseSource(): void;
  protected abstract resumeSource(): void;

  // Source, for the window: the writer may hold the source back as well.
  pause(): void {
    this.pauseSource();
  }
  resume(): void {
    if (!this.waitingTurn) this.resumeSource();
  }

  /** The connection's writer sent what this stream had queued (link.ts). */
  turnCame(): void {
    if (!this.waitingTurn) return;
    this.waitingTurn = false;
    if (!this.window.paused && !this.ends.done) this.resumeSource();
  }
  /** The link's sweep (link.ts): a stream past its response deadline gives up. */
  checkDeadline(_nowMs: number): void {}

  onCredit(bytes: number): void {
    this.window.grant(bytes);
  }

  /** The server's End: the visitor finished sending. */
  onEnd(): void {
    if (this.ends.endPeer() !== 'ok') return;
    this.endDestination();
    this.ends.settle();
  }

  onReset(code: ResetCode): void {
    this.capture?.fail(code);
    if (!this.ends.finish()) return;
    this.destroy();
  }

  /** The connection is gone: drop everything without reporting (the owner clears its map). */
  abort(): void {
    this.capture?.fail('connection-lost');
    this.ends.finish(false);
    this.destroy();
  }

  /** Bytes from the local service toward the visitor (the caller counts the payload in bytesOut). */
  protected forward(chunk: Buffer): void {
    if (this.ends.done) return;
    if (!this.out.sendData(this.sid, chunk) && !this.waitingTurn) {
      this.waitingTurn = true;
      if (!this.window.paused) this.pauseSource();
    }
    this.window.spend(chunk.length);
  }

  /** The local service finished sending. */
  protected localEnded(): void {
    if (!this.ends.endLocal()) return;
    this.out.send([F.End, this.sid]);
    this.ends.settle();
  }

  protected reset(code: ResetCode): void {
    if (this.ends.done) return;
    this.capture?.fail(code, this.localFailure?.err);
    this.out.send([F.Reset, this.sid, code]);
    this.ends.finish();
  }

  protected finished(): void {
    this.capture?.end(); // after a fail, a no-op
    this.onFinish(this);
  }
}

/**
 * One visitor request toward the local service, as bytes on a pooled raw connection
 * (src/client/local-pool.ts): the head written from the edge's HttpHead, the body as it comes
 * (chunked when the visitor's had no length), and the answer relayed as the local service sent
 * it, in Data frames; llhttp reads it only to find its end, check its head and feed the
 * inspector. An upgrade's 101 turns the stream into a byte relay both ways. Measured against
 * undici (the pool this replaces) at 64 concurrent small requests: see bench/results.
 */
export class RawHttpStream extends ClientStream implements ConnUser, ConnWaiter {
  private conn: LocalConn | null = null;
  private status = 0;
  /** The answer's final head was read (1xx interim ones do not count). */
  private answered = false;
  /** Raw bytes of the answer were relayed: a failure now can only cut the stream. */
  private relayed = false;
  /** The answer is complete on the wire (the connection may carry another request). */
  private complete = false;
  private readonly chunked: boolean;
  private readonly shared: boolean;
  /** When the answer's head must have come (Date.now() ms); 0 once it came. */
  private deadlineMs: number;
  /** No connection yet (acquire may queue): writes wait in `pendingHead` and `queued`. */
  private waitingForConn = true;
  /** The request's head, written first once the connection comes. */
  private pendingHead: string | Uint8Array | null;
  /** Body bytes that came before the connection (rare: made only then). */
  private queued: (string | Uint8Array)[] | null = null;
  private retried = false;
  /** The local service may take another request on this connection after the answer. */
  private keepAlive = false;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: HttpHead, private readonly pool: LocalPool, timeoutMs: number) {
    super(sid, out, onFinish);
    const hasBody = !head.end && !head.upgrade;
    this.requestWritten = !hasBody && !head.upgrade;
    if (this.requestWritten) this.ends.endPeer();
    this.chunked = hasBody && sendsChunked(head);
    this.shared = !hasBody && !head.upgrade;
    this.deadlineMs = this.startedMs + timeoutMs;
    this.pendingHead = head.raw ?? requestHeadBytes(head, this.chunked);
    this.start();
  }

  private start(): void {
    this.pool.acquire(this.shared, this.head.upgrade, this);
  }

  /** The pool's answer to start(): a connection for this request. */
  granted(c: LocalConn): void {
    if (this.done) return this.pool.release(c, this.shared, true);
    this.attach(c);
  }

  private attach(c: LocalConn): void {
    this.conn = c;
    c.user = this;
    c.parser.expect(this.head.method, this.head.upgrade);
    this.waitingForConn = false;
    const head = this.pendingHead!;
    this.pendingHead = null;
    this.write(head);
    const q = this.queued;
    this.queued = null;
    if (q) for (const part of q) this.write(part);
    if (this.peerEndedEarly) this.endDestination();
  }

  private write(part: string | Uint8Array): boolean {
    if (this.waitingForConn) {
      (this.queued ??= []).push(part);
      return true;
    }
    const sock = this.conn!.socket;
    return typeof part === 'string' ? sock.write(part, 'latin1') : sock.write(part);
  }

  // ---- visitor → local service ----
  onData(bytes: Buffer): void {
    if (this.done) return;
    this.bytesIn += bytes.length;
    if (!this.conn?.upgraded) this.capture?.requestBody(bytes);
    if (this.chunked) this.write(`${bytes.length.toString(16)}\r\n`);
    const taken = this.write(bytes);
    if (this.chunked) this.write('\r\n');
    this.meter.wrote(bytes.length, taken);
  }
  private peerEndedEarly = false;
  /** The whole request is on the connection (a bodiless one from the start). */
  private requestWritten: boolean;
  protected endDestination(): void {
    if (this.waitingForConn) {
      this.peerEndedEarly = true;
      return;
    }
    if (this.conn?.upgraded) this.conn.socket.end();
    else if (this.chunked) this.write('0\r\n\r\n');
    this.requestWritten = true;
  }

  // ---- local service → visitor (ConnUser) ----
  onRaw(chunk: Buffer): void {
    if (this.done || !this.conn) return;
    if (this.conn.upgraded) {
      this.bytesOut += chunk.length;
      return this.forward(chunk);
    }
    const r = this.conn.parser.execute(chunk);
    switch (r.kind) {
      case 'more':
        return this.relay(chunk);
      case 'paused':
        this.relay(r.consumed === chunk.length ? chunk : chunk.subarray(0, r.consumed));
        // Bytes after a complete answer were never asked for: that connection is not reused.
        if (r.consumed < chunk.length) this.keepAlive = false;
        else this.conn?.parser.resume();
        if (this.complete) this.localEnded();
        return;
      case 'upgrade':
        this.conn.upgraded = true;
        return this.relay(chunk);
      case 'error':
        return this.invalid(r.reason);
    }
  }

  private relay(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.relayed = true;
    this.forward(bytes);
  }

  onResponseHead(h: ResponseHead): void {
    if (h.status < 200 && h.status !== 101) return; // relayed as bytes; not the answer
    this.deadlineMs = 0;
    this.answered = true;
    this.status = h.status;
    this.keepAlive = h.keepAlive;
    this.capture?.response(h.status, h.headers, { version: h.versionMinor === 0 ? 'HTTP/1.0' : 'HTTP/1.1', reason: h.reason });
    if (h.status === 101) this.capture?.end();
  }
  onResponseBody(chunk: Buffer): void {
    this.bytesOut += chunk.length;
    this.capture?.responseBody(chunk);
  }
  onResponseEnd(): void {
    // A 101's message ends where the upgraded protocol begins: the stream goes on.
    if (this.status === 101) return;
    this.complete = true;
    // The stream's End follows the bytes relayed by onRaw (this runs inside its execute()):
    // onRaw sends it once they went.
  }
  onDrain(): void {
    this.meter.drained();
  }
  onEof(): void {
    const c = this.conn;
    if (!c || this.done) return;
    if (c.upgraded) return this.localEnded();
    // A close-delimited answer ends here; anything else cut short is an error.
    const r = c.parser.finish();
    if (r?.kind === 'error') return this.invalid(r.reason);
    if (this.complete) this.localEnded();
    else this.failed(null);
  }
  onConnError(err: Error | null, reused: boolean): void {
    if (this.done) return;
    // A kept-alive connection the local service closed just as it was reused: once more on a
    // new one, when nothing of the answer came and the request had no body to replay.
    if (reused && !this.relayed && !this.retried && this.shared) {
      this.retried = true;
      this.conn = null;
      this.waitingForConn = true;
      this.pendingHead = this.head.raw ?? requestHeadBytes(this.head, this.chunked);
      this.attach(this.pool.fresh());
      return;
    }
    this.failed(err);
  }

  private failed(err: Error | null): void {
    if (!this.answered && !this.done) this.localFailure ??= { err: err ?? new Error('the local service closed the connection without an answer') };
    this.reset(this.relayed ? 'closing' : 'local-unreachable');
  }

  /** The local service answered something llhttp refuses: the visitor gets 502 (or a cut). */
  private invalid(reason: string): void {
    if (!this.relayed) this.localFailure ??= { err: new Error(`invalid response from the local service: ${reason}`) };
    this.reset(this.relayed ? 'closing' : 'local-invalid');
  }

  override checkDeadline(nowMs: number): void {
    if (this.deadlineMs === 0 || nowMs < this.deadlineMs || this.done) return;
    this.deadlineMs = 0;
    this.localFailure ??= { err: null };
    this.reset('local-timeout');
  }

  protected destroy(): void {
    this.deadlineMs = 0;
    const c = this.conn;
    this.conn = null;
    if (c) this.pool.release(c, this.shared, false);
  }
  protected pauseSource(): void {
    this.conn?.socket.pause();
  }
  protected resumeSource(): void {
    this.conn?.socket.resume();
  }
  get statusCode(): number {
    return this.status;
  }
  protected override finished(): void {
    this.deadlineMs = 0;
    const c = this.conn;
    this.conn = null;
    // A complete answer to a request written whole leaves a connection fit for the next one;
    // a request cut short would leave its rest to be read as the start of the next request.
    if (c) this.pool.release(c, this.shared, this.complete && this.requestWritten && this.keepAlive && !c.upgraded);
    super.finished();
  }
}


export class TcpStream extends ClientStream {
  private readonly sock: net.Socket;
  private connected = false;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: TcpHead, local: LocalTarget) {
    super(sid, out, onFinish);
    this.sock = net.connect({ host: local.host, port: local.port, noDelay: true, allowHalfOpen: true, lookup: connectOptions(local).lookup });
    this.sock.on('connect', () => (this.connected = true));
    this.sock.on('data', (chunk: Buffer) => {
      this.bytesOut += chunk.length;
      this.forward(chunk);
    });
    this.sock.on('drain', () => this.meter.drained());
    this.sock.on('end', () => this.localEnded());
    this.sock.on('error', (err) => {
      if (!this.connected && !this.done) this.localFailure ??= { err };
      this.reset(this.connected ? 'closing' : 'local-unreachable');
    });
    // Both directions ended normally: the stream is already done and this is a no-op.
    this.sock.on('close', () => this.reset('closing'));
  }
  onData(bytes: Buffer): void {
    if (this.done) return;
    this.bytesIn += bytes.length;
    this.meter.wrote(bytes.length, this.sock.write(bytes));
  }
  protected endDestination(): void {
    this.sock.end();
  }
  protected destroy(): void {
    this.sock.destroy();
  }
  protected pauseSource(): void {
    this.sock.pause();
  }
  protected resumeSource(): void {
    this.sock.resume();
  }
}
