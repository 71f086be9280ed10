import { ReceiveWindow, SendWindow, StreamEnds } from '../protocol/flow-control.js';
import { type Refusal, type ResetCode, type ResponseHead, type StreamHead } from '../protocol/frames.js';
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
 * One stream of a tunnel: relays between a visitor adapter and the wire, counting bytes.
 * It also checks the order of the client's frames, so no adapter ever sees a sequence it
 * cannot handle (a second response head, body before the head, a 101 on a plain request),
 * and the client's flow-control arithmetic (protocol/flow-control.ts): a violation resets
 * this stream both ways with 'protocol' (→ 502 for a visitor). Credit is batched by the
 * adapter that writes the bytes out; this relay sends each report on as one Credit frame.
 */
export class TunnelStream implements Upstream {
  sid = 0;
  /** What may answer: 'upgrade' streams alone accept a 101; 'tcp' streams take no head. */
  kind: 'http' | 'upgrade' | 'tcp' = 'http';
  private responded = false;
  /** local = visitor → client (our End), peer = client → visitor (the client's End). */
  private readonly ends = new StreamEnds(() => {
    this.carrier.forget(this.sid);
    this.tunnel.streams.delete(this);
  });
  /** Response bytes the client may still send (Data spends, the Credit we send grants). */
  private readonly clientWindow = new ReceiveWindow();
  /** Request bytes sent to the client, to check the credit it returns (the adapter pauses the visitor). */
  private readonly requestWindow = new SendWindow();

  constructor(
    readonly tunnel: TunnelActor,
    private readonly carrier: StreamCarrier,
    readonly down: Downstream,
  ) {}

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
    this.carrier.sendCredit(this.sid, bytes);
    this.clientWindow.granted(bytes);
  }
  /** A bug in the adapter's deferred work (outside any frame handler): end the connection. */
  fault(err: unknown): void {
    this.carrier.fault(err);
  }

  // ---- frames from the client ----
  onResponse(head: ResponseHead): void {
    if (this.ends.done) return;
    if (this.kind === 'tcp') return this.violation('a response head on a tcp stream');
    if (this.responded) return this.violation('a second response head');
    if (head.status === 101 && this.kind !== 'upgrade') return this.violation('status 101 as the response to a plain request');
    // Interim answers are the origin's to send and the visitor's to do without: only 100
    // Continue goes on (to a visitor that asked for it); the final head still follows.
    if (head.status < 200 && head.status !== 101) {
      if (head.status === 100 && this.kind === 'http') this.down.response(head);
      return;
    }
    this.responded = true;
    this.down.response(head);
  }
  onData(bytes: Uint8Array): void {
    if (this.ends.done) return;
    if (this.kind !== 'tcp' && !this.responded) return this.violation('body bytes before the response head');
    if (this.ends.peerDone) return this.violation('body bytes after the end');
    if (!this.clientWindow.receive(bytes.byteLength)) return this.violation(`${this.clientWindow.overrun} bytes over the flow-control window`);
    this.tunnel.count(0, bytes.byteLength);
    this.down.data(bytes);
  }
  onEnd(): void {
    const end = this.ends.endPeer();
    if (end === 'over') return;
    if (end === 'duplicate') return this.violation('a second end');
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

  /** The client's frames broke the stream's order: reset it both ways. */
  private violation(why: string): void {
    this.carrier.sendReset(this.sid, 'protocol');
    this.ends.finish();
    this.carrier.violated(this.sid, why);
    this.down.reset('protocol');
  }

  /** The tunnel or its connection is going away. */
  abort(code: ResetCode): void {
    if (!this.ends.finish()) return;
    this.down.reset(code);
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
