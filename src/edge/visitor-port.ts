import type { Duplex } from 'node:stream';
import type { ApiError, ProblemCode } from '../errors.js';
import type { ClientAddress } from '../http/client-address.js';
import type { RequestHead } from '../protocol/http1-parser.js';

// What a tunnel's visitor adapter (ingress.ts TunnelVisitor, shard.ts serve) needs of the
// visitor's side, whatever protocol it speaks: an HTTP/1.x connection of the front
// (FrontConnection + VisitorResponse) or one stream of an HTTP/2 session (h2-visitor.ts).

/** The carrier of one visitor request. */
export interface VisitorConnection {
  /** Where the answer's bytes go: the connection's socket, or the HTTP/2 stream ('drain', destroy). */
  readonly socket: Duplex;
  /** Writes toward the visitor (a string is latin1): the answer of an upgrade, then its bytes; false: over the high-water mark. */
  write(chunk: string | Uint8Array): boolean;
  /** Ends the visitor's side after what waited to be written. */
  endSocket(): void;
  /** Told when the carrier drains (the current visitor's flow control): set and cleared by its user. */
  drainListener: (() => void) | null;
  /** Stops or restarts reading the request body for the tunnel's credit window. */
  setCreditBlocked(blocked: boolean): void;
  /** The exchange takes the socket over (an upgrade's 101: HTTP/1.1 only). */
  detach(): void;
  /** The client of a request (--trust-proxy reads its forwarding headers). */
  clientOf(head: RequestHead): ClientAddress;
}

/** The one writer of an answer toward the visitor (visitor-response.ts for HTTP/1.x, h2-visitor.ts for HTTP/2). */
export interface VisitorAnswer {
  /** The head went out (no other answer may start). */
  started: boolean;
  readonly finished: boolean;
  readonly status: number;
  /** HTTP/2: an answer's trailers reach the visitor (HTTP/1.x visitors never got them, and still do not). */
  readonly carriesTrailers?: boolean;
  closeAfter(): void;
  head(status: number, headers: readonly string[], contentLength: number | null): void;
  interim(status: number, headers: readonly string[]): void;
  /** Body bytes; false: the carrier is over its high-water mark (wait for 'drain'). */
  body(bytes: Uint8Array): boolean;
  end(trailers?: readonly string[]): void;
  problem(code: ProblemCode, detail: string, opts?: { extra?: Pick<ApiError, 'errors' | 'headers'>; html?: boolean; status?: number }): void;
  abort(): void;
}
