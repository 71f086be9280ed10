import { ReceiveWindow, SendWindow, StreamEnds } from '../protocol/flow-control.js';
import { type Refusal, type ResetCode, type StreamHead } from '../protocol/frames.js';
import { ResponseParser, type ResponseHead, type ResponseSink } from '../protocol/http1-parser.js';
import type { StatsDelta } from '../protocol/tunnel-messages.js';
import type { Downstream, Upstream } from './stream.js';

// TunnelActor: one registered tunnel, living on the shard that holds its control connection.
// It owns the tunnel's streams and counters. Everything runs on the shard's event loop, so
// its state needs no locks; other shards reach it only through mesh messages (edge/mesh.ts).
//
//   visitor adapter ─Upstream─▶ TunnelStream ─frames─▶ control connection ─▶ client
//                  ◀Downstream─ TunnelStream ◀frames── control connection ◀── client

/** What a tunnel needs from its control connection. */
export interface StreamCarrier {
  /** Opens stream `sid` on the wire; false when the connection cannot take more streams. */
  openStream(stream: TunnelStream, head: StreamHead): boolean;
  sendData(sid: number, bytes: Uint8Array): void;
  sendEnd(sid: number): void;
  sendReset(sid: number, code: ResetCode): void;
  sendCredit(sid: number, bytes: number): void;
  sendClosed(tunnelId: string, why: Refusal): void;
  forget(sid: number): void;
  /** The client broke the protocol on stream `sid` (already reset both ways): for the log. */
  violated(sid: number, why: string): void;
  /** A stream callback driven by a frame threw: the connection ends (a bug, not the peer's). */
  fault(err: unknown): void;
}

export interface TunnelSpec {
  id: string;
  type: 'http' | 'tcp';
  userId: string;
  teamId: string | null;
  sessionId: string;
  url: string;
  remotePort: number | null;
  /** a lane: the tunnel is owned by another shard, and this shard's visitors use this connection */
  lane: boolean;
}

/**
 * One stream of a tunnel: relays between a visitor adapter and the wire, counting bytes. For
 * HTTP the client's Data is the local service's answer as raw bytes: this parses it (llhttp,
 * src/protocol/http1-parser.ts) into the head, body and end the adapter writes, so whatever the
 * client sends, a visitor only ever gets one well-formed answer per request (a bad one: 502).
 * It also checks the client's flow-control arithmetic (protocol/flow-control.ts): a violation
 * resets this stream both ways with 'protocol' (→ 502 for a visitor). Credit counts raw bytes:
 * the visitor's adapter returns what it wrote of the body, and this adds the bytes that were
 * head and framing (no adapter ever sees those).
 */
export class TunnelStream implements Upstream {
  sid = 0;
  /** What may answer: 'upgrade' streams alone accept a 101; 'tcp' streams take raw bytes. */
  kind: 'http' | 'upgrade' | 'tcp' = 'http';
  /** The request's method (a HEAD's answer has no body). */
  method = 'GET';
  /** HTTP: the answer's parser (taken at its first byte); after a 101, bytes pass as they are. */
  private reader: AnswerReader | null = null;
  private switched = false;
  /** The whole answer was parsed: any further byte is a second answer nobody asked for. */
  private answered = false;
  /** Raw bytes of the answer that were head or framing: credited back with the next credit. */
  private overhead = 0;
  /** Body bytes handed to the adapter during the current Data frame. */
  private bodyBytes = 0;
  /** local = visitor → client (our End), peer = client → visitor (the client's End). */
  private readonly ends = new StreamEnds(this);
  /** Answer bytes the client may still send (Data spends, the Credit we send grants). */
  private readonly clientWindow = new ReceiveWindow();
  /** Request bytes sent to the client, to check the credit it returns (the adapter pauses the visitor). */
  private readonly requestWindow = new SendWindow();

  constructor(
    readonly tunnel: TunnelActor,
    private readonly carrier: StreamCarrier,
    readonly down: Downstream,
  ) {}

  /** Its StreamEnds finished: off the connection's and the tunnel's books. */
  streamFinished(): void {
    this.carrier.forget(this.sid);
    this.tunnel.streams.delete(this);
    if (this.reader !== null) AnswerReader.release(this.reader);
    this.reader = null;
    if (this.tunnel.streams.size === 0) this.tunnel.onIdle?.();
  }

  /** The head said "no body": the visitor's side is complete without an End frame. */
  bodyless(): void {
    this.ends.endLocal();
  }

  // ---- Upstream: visitor → client ----
  data(bytes: Uint8Array): void {
    if (this.ends.done) return;
    this.tunnel.count(bytes.byteLength, 0);
    this.requestWindow.spend(bytes.byteLength);
    this.carrier.sendData(this.sid, bytes);
  }
  end(): void {
    if (!this.ends.endLocal()) return;
    this.carrier.sendEnd(this.sid);
    this.ends.settle();
  }
  reset(code: ResetCode): void {
    if (this.ends.done) return;
    this.carrier.sendReset(this.sid, code);
    this.ends.finish();
  }
  credit(bytes: number): void {
    if (this.ends.done) return;
    const n = bytes + this.overhead;
    this.overhead = 0;
    this.carrier.sendCredit(this.sid, n);
    this.clientWindow.granted(n);
  }
  /** A bug in the adapter's deferred work (outside any frame handler): end the connection. */
  fault(err: unknown): void {
    this.carrier.fault(err);
  }

  // ---- frames from the client ----
  onData(bytes: Uint8Array): void {
    if (this.ends.done) return;
    if (this.ends.peerDone) return this.violation('body bytes after the end');
    if (!this.clientWindow.receive(bytes.byteLength)) return this.violation(`${this.clientWindow.overrun} bytes over the flow-control window`);
    if (this.kind === 'tcp' || this.switched) return this.passOn(bytes);
    if (this.answered) return this.violation('bytes after the end of the answer');
    this.reader ??= AnswerReader.take(this, this.method, this.kind === 'upgrade');
    this.bodyBytes = 0;
    const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const r = this.reader.parser.execute(view);
    if (this.ends.done) return;
    switch (r.kind) {
      case 'more':
        break;
      case 'paused':
        // One answer per request: bytes after it can only be a smuggled second one.
        if (r.consumed < view.length) return this.violation(`${view.length - r.consumed} bytes after the end of the answer`);
        break;
      case 'upgrade': {
        const rest = view.subarray(r.consumed);
        this.overhead += r.consumed;
        if (rest.length > 0) this.passOn(rest);
        return;
      }
      case 'error':
        return this.violation(`an answer llhttp refuses (${r.reason})`);
    }
    this.overhead += view.length - this.bodyBytes;
  }
  onEnd(): void {
    const end = this.ends.endPeer();
    if (end === 'over') return;
    if (end === 'duplicate') return this.violation('a second end');
    if (this.kind !== 'tcp' && !this.switched && !this.answered) {
      // A close-delimited body ends here (finish() ends it); an answer cut short, or none at
      // all, is the client's fault.
      const r = this.reader ? this.reader.parser.finish() : { kind: 'error' as const, reason: 'no answer at all' };
      if (r?.kind === 'error') return this.violation(`the answer ended early (${r.reason})`);
    }
    this.down.end();
    this.ends.settle();
  }
  onReset(code: ResetCode): void {
    if (!this.ends.finish()) return;
    this.down.reset(code);
  }
  onCredit(bytes: number): void {
    if (this.ends.done) return;
    const outstanding = this.requestWindow.outstanding;
    if (!this.requestWindow.grant(bytes)) return this.violation(`credit for ${bytes} bytes, only ${outstanding} were sent`);
    this.down.credit(bytes);
  }

  /** Bytes that go to the adapter as they are (TCP, an upgraded connection). */
  private passOn(bytes: Uint8Array): void {
    this.tunnel.count(0, bytes.byteLength);
    this.down.data(bytes);
  }

  // ---- the answer, as its parser reads it (AnswerReader) ----
  answerHead(h: ResponseHead): void {
    if (h.status === 101 && this.kind !== 'upgrade') return this.violation('status 101 as the answer to a plain request');
    // Interim answers are the origin's to send and the visitor's to do without: only 100
    // Continue goes on (to a visitor that asked for it); the final head still follows.
    if (h.status < 200 && h.status !== 101) {
      if (h.status === 100 && this.kind === 'http') this.down.response({ status: 100, headers: [] });
      return;
    }
    // After a 101 the bytes are the upgraded protocol's: the parser's end of this message is no end of the stream.
    if (h.status === 101) this.switched = true;
    this.down.response({ status: h.status, headers: h.headers });
  }
  answerBody(chunk: Buffer): void {
    this.bodyBytes += chunk.byteLength;
    this.tunnel.count(0, chunk.byteLength);
    this.down.data(chunk);
  }
  answerEnd(trailers: string[]): void {
    if (this.switched) return;
    this.answered = true;
    // Trailers (gRPC's grpc-status) go on: an h2 visitor gets them as HTTP/2 trailers.
    this.down.end(trailers.length > 0 ? trailers : undefined);
  }

  /** The client's frames broke the stream's order: reset it both ways. */
  private violation(why: string): void {
    if (this.ends.done) return;
    this.carrier.sendReset(this.sid, 'protocol');
    this.ends.finish();
    this.carrier.violated(this.sid, why);
    this.down.reset('protocol');
  }

  /** The tunnel or its connection is going away. */
  abort(code: ResetCode): void {
    if (!this.ends.finish()) return;
    this.down.reset(code, true);
  }
}

/**
 * An answer parser and the sink that hands its results to the stream it serves. A shard's
 * streams come and go by the thousand a second: a finished stream's reader goes back to a free
 * list and its native llhttp parser is initialized again for the next one (as Node's own http
 * does), instead of a parser and three closures made and freed per request.
 */
class AnswerReader implements ResponseSink {
  private static readonly idle: AnswerReader[] = [];
  /** Readers kept for reuse; beyond this a finished one is freed. */
  private static readonly MAX_IDLE = 256;

  readonly parser: ResponseParser = new ResponseParser(this);
  private stream: TunnelStream | null = null;

  static take(stream: TunnelStream, method: string, upgrade: boolean): AnswerReader {
    const r = AnswerReader.idle.pop() ?? new AnswerReader();
    r.stream = stream;
    r.parser.expect(method, upgrade);
    return r;
  }

  /** The stream is over: its reader is kept when its parser is between messages, else freed. */
  static release(r: AnswerReader): void {
    r.stream = null;
    if (r.parser.reusable && AnswerReader.idle.length < AnswerReader.MAX_IDLE) {
      r.parser.reuse(r);
      AnswerReader.idle.push(r);
    } else r.parser.close();
  }

  head(h: ResponseHead): void {
    this.stream?.answerHead(h);
  }
  body(chunk: Buffer): void {
    this.stream?.answerBody(chunk);
  }
  end(trailers: string[]): void {
    this.stream?.answerEnd(trailers);
  }
}

export class TunnelActor {
  readonly streams = new Set<TunnelStream>();
  readonly registeredAtMs = Date.now();
  /** Counters since the last report to the StatsActor. */
  private delta: StatsDelta;
  private dirty = false;
  closed = false;
  /** Extra teardown (the TCP listener of a tcp tunnel). */
  onClose: (() => void) | null = null;
  /** A tunnel leaving (its client sent Close with streams open): called when its last stream ends. */
  onIdle: (() => void) | null = null;

  constructor(
    readonly spec: TunnelSpec,
    private readonly carrier: StreamCarrier,
    private readonly markDirty: (t: TunnelActor) => void,
  ) {
    this.delta = { sessionId: spec.sessionId, bytesIn: 0, bytesOut: 0, requests: 0 };
  }

  get id(): string {
    return this.spec.id;
  }

  /** A new visitor stream (HTTP request or TCP connection); null when the connection is full. */
  openStream(head: StreamHead, down: Downstream): TunnelStream | null {
    if (this.closed) return null;
    const s = new TunnelStream(this, this.carrier, down);
    if (!this.carrier.openStream(s, head)) return null;
    if (head.kind === 'http' && head.end) s.bodyless();
    s.kind = head.kind === 'tcp' ? 'tcp' : head.upgrade ? 'upgrade' : 'http';
    if (head.kind === 'http') s.method = head.method;
    this.streams.add(s);
    this.delta.requests++;
    this.touch();
    return s;
  }

  count(bytesIn: number, bytesOut: number): void {
    this.delta.bytesIn += bytesIn;
    this.delta.bytesOut += bytesOut;
    this.touch();
  }

  private touch(): void {
    if (!this.dirty) {
      this.dirty = true;
      this.markDirty(this);
    }
  }

  /** Counters since the last call (null when nothing changed). */
  takeDelta(): StatsDelta | null {
    if (!this.dirty) return null;
    const d = this.delta;
    this.delta = { sessionId: this.spec.sessionId, bytesIn: 0, bytesOut: 0, requests: 0 };
    this.dirty = false;
    return d;
  }

  /**
   * Ends every stream; `why` (when given) tells the client. Returns the final counters. An
   * adapter that throws does not keep the others, the TCP listener or the registry entry
   * (the caller reports the counters) alive: its error goes to the carrier once all is down.
   */
  close(why: Refusal | null): StatsDelta | null {
    if (this.closed) return null;
    this.closed = true;
    let failure: { err: unknown } | null = null;
    for (const s of [...this.streams]) {
      try {
        s.abort('closing');
      } catch (err) {
        failure ??= { err };
      }
    }
    this.onClose?.();
    if (why) this.carrier.sendClosed(this.id, why);
    if (failure) this.carrier.fault(failure.err);
    return this.takeDelta();
  }
}
