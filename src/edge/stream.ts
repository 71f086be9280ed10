import type { ResetCode, ResponseHead } from '../protocol/frames.js';

// A stream has two ends: the visitor side (a visitor's HTTP connection, a TCP socket, or a proxy for a
// visitor on another shard) and the tunnel side (a stream on a control connection).
//
//   visitor adapter ──Upstream──▶ tunnel side ──frames──▶ burrow client ──▶ local service
//   visitor adapter ◀─Downstream── tunnel side ◀─frames── burrow client ◀── local service
//
// Credit is end to end: the visitor adapter holds the window for request bytes it may send
// (Downstream.credit grows it), the client holds the window for response bytes; whoever
// writes bytes out to a socket reports them consumed, batched by its CreditMeter
// (protocol/flow-control.ts; Upstream.credit / Credit frames). The tunnel side only relays and
// counts, so a shard in the middle never buffers.

/** Visitor adapter → tunnel side. Calls must consume `bytes` synchronously. */
export interface Upstream {
  /** request body / TCP bytes from the visitor */
  data(bytes: Uint8Array): void;
  /** the visitor finished sending (end of body, TCP half-close) */
  end(): void;
  /** the visitor is gone or the adapter failed */
  reset(code: ResetCode): void;
  /** the visitor received `bytes` more of the response: the client may send that many more */
  credit(bytes: number): void;
  /** the adapter's deferred work (after the frame handler returned) threw: end the stream's carrier */
  fault?(err: unknown): void;
}

/** Tunnel side → visitor adapter. `data` views are of buffers nobody reuses (they may be kept). */
export interface Downstream {
  response(head: ResponseHead): void;
  data(bytes: Uint8Array): void;
  /** The answer is complete; `trailers` flat [name, value, ...] as llhttp read them (a chunked answer's), if any. */
  end(trailers?: string[]): void;
  /**
   * The stream is over. `vanished`: the edge ended it because its carrier went (the tunnel
   * closed, its connection, a link or a node was lost, or no tunnel took it): not an answer of
   * the client's, so a request that never reached a local service may be sent elsewhere.
   */
  reset(code: ResetCode, vanished?: boolean): void;
  /** the client consumed `bytes` of the request: the adapter may send that many more */
  credit(bytes: number): void;
}
