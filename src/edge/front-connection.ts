import type { Socket } from 'node:net';
import type { Logger } from '../log.js';
import type { ProblemCode } from '../errors.js';
import { clientOfHeaders, trustsPeer, type ClientAddress } from '../http/client-address.js';
import { prefersHtml } from '../http/problem-page.js';
import { RequestParser, type RequestHead } from '../protocol/http1-parser.js';
import { VisitorResponse, type ResponseSink } from './visitor-response.js';
import { SendTimeout } from './send-timeout.js';
import { Deadline } from '../protocol/deadline.js';
import { isName } from '../protocol/http-headers.js';
import type { ConnectionLimits } from './front-limits.js';

// One public connection on the front: requests parsed by llhttp (http1-parser.ts), answered
// strictly one at a time and in order, whoever answers them.
//
//   socket ─data─▶ parser ─head─▶ FrontHost.exchange(): a tunnel (ingress.ts), the API (api-relay.ts),
//                          │                            the control WebSocket (control.ts), or a refusal
//                          ├─body/end─▶ that exchange
//                          └─paused (message complete) ─▶ wait for the response, then the next request
//
// The parser stops after each complete request, so pipelined requests wait (as bytes, one read
// at most: the socket stops reading meanwhile) until the one before is answered, and a request
// body is read only while its exchange takes it (the tunnel's credit window pauses the socket).

/** A request head must arrive whole within this long of its first byte (slowloris); the first byte within --first-byte-timeout. */
const HEAD_TIMEOUT_MS = 10_000;
/** A keep-alive connection between requests, or a request body that stopped, ends after this. */
const IDLE_TIMEOUT_MS = 60_000;
/** After a refusal that closes, what the visitor still sends is read and dropped this long at most. */
const LINGER_MS = 5_000;
/**
 * Writes toward the visitor up to this size wait for the end of the current read and leave as
 * one buffer: a small answer's head, body and framing in one send (the answer to a 14 B request
 * is one write of a few hundred bytes). Larger ones go at once, with what waited before them.
 */
const JOIN_MAX_BYTES = 4096;
/** The socket's 'error' listener: a connection's errors end in 'close', handled there. Module-level, so it holds no connection. */
const ignore = (): void => undefined;

/** Who serves one request. The connection calls these in order: body* then end, or abort. */
export interface Exchange {
  requestBody(chunk: Buffer): void;
  requestEnd(trailers: string[]): void;
  /** An upgrade request's head was read: the exchange owns the socket from now on, with `rest` its first bytes. */
  upgraded?(rest: Buffer): void;
  /** The visitor went away, or the request broke off (a parse error mid-body). */
  abort(): void;
}

/** What the shard provides to the front's connections. */
export interface FrontHost {
  log: Logger;
  /** Picks who serves this request; it may answer `response` itself at once. */
  exchange(conn: FrontConnection, head: RequestHead, response: VisitorResponse): Exchange;
  /**
   * Whether a request may use the descriptors kept in reserve (front-limits.ts): a control
   * connection or the API yes, tunnel traffic no. Absent: every request may.
   */
  reserved?(head: RequestHead): boolean;
}

/** The front's bounds one connection applies (edge/front-limits.ts, --first-byte-timeout, --send-timeout). */
export interface ConnectionTerms {
  firstByteTimeoutMs: number;
  sendTimeoutMs: number;
  /** The shard's counts, for the descriptors an API relay adds. */
  limits: ConnectionLimits | null;
  /** Accepted into the reserve: only requests FrontHost.reserved admits are served. */
  reserveOnly: boolean;
}

/** Terms of a front without limits (tests of the parts, the redirect port before its options). */
export const DEFAULT_TERMS: ConnectionTerms = { firstByteTimeoutMs: 5_000, sendTimeoutMs: 60_000, limits: null, reserveOnly: false };

/** Discards a request body (its answer was given without it). */
export const DISCARD: Exchange = { requestBody() {}, requestEnd() {}, abort() {} };

/**
 * A connection's phase. `open`: between requests, or reading one (the parser runs). Then, for the
 * request the host serves, its two ends in either order: `answering` (read whole, its answer due:
 * the parser is paused) or `answered` (its answer is on the wire while the rest of its body is
 * still read and dropped), and `done` when both happened (for as long as the parser is still
 * inside that request's callbacks; then the next request: `open`). `ended`: nothing more is
 * parsed, the socket ends. `detached`: the socket belongs to someone else (a WebSocket, an
 * upgraded relay, a refusal's linger).
 */
type Phase = 'open' | 'answering' | 'answered' | 'done' | 'ended' | 'detached';

export class FrontConnection implements ResponseSink {
  private readonly parser: RequestParser;
  private exchange: Exchange | null = null;
  private response: VisitorResponse | null = null;
  /** Bytes read but not parsed yet: the next pipelined request(s), waiting for this answer. */
  private pending: Buffer | null = null;
  /** Where the connection is (see Phase). */
  private phase: Phase = 'open';
  /** Re-entry guards: a callback of the parser, or of drive(), may come back here. */
  private inParser = false;
  private driving = false;
  /** The connection closes after the current answer (the request or the answer said so). */
  private closing = false;
  /** The visitor sent its FIN (the socket is half-open): answers still due go out, then we end too. */
  private peerEnded = false;
  /** Reading stops while the tunnel has no credit for more request body. */
  private creditBlocked = false;
  /** A request head must arrive whole in time (slowloris); set at its first byte. */
  private readonly headDeadline = new Deadline(() => this.onHeadTimeout());
  /**
   * Between requests, and while a request body is read: the connection's idle timeout, pushed
   * back by every read. Off while an answer is due. (Not the socket's own setTimeout, which
   * allocates a timer at every call: three calls a request.)
   */
  private readonly idleDeadline = new Deadline(() => this.onIdleDeadline());
  /** Until the first byte arrives (--first-byte-timeout); null after it. */
  private firstByteTimer: NodeJS.Timeout | null = null;
  private readonly sendTimeout: SendTimeout;
  /**
   * Small writes of the current read, in order (JOIN_MAX_BYTES), and their size: the first
   * `joinedCount` entries (the array is reused, never emptied: an emptied one allocates again).
   */
  private readonly joined: (string | Uint8Array | undefined)[] = [];
  private joinedCount = 0;
  private joinedBytes = 0;
  private flushQueued = false;
  /**
   * Told when the socket drains (the current tunnel visitor's flow control). A field its user
   * sets and clears, not a listener added and removed per request.
   */
  drainListener: (() => void) | null = null;
  private readonly onSocketDrain = (): void => this.drainListener?.();
  private readonly flushTurn = (): void => {
    this.flushQueued = false;
    this.flush();
  };

  constructor(
    readonly socket: Socket,
    /** The peer's address (the PROXY header's source under --proxy-protocol). */
    readonly peer: string,
    private readonly host: FrontHost,
    readonly terms: ConnectionTerms = DEFAULT_TERMS,
  ) {
    this.sendTimeout = new SendTimeout(socket, terms.sendTimeoutMs);
    this.firstByteTimer = setTimeout(this.onFirstByteTimeout, terms.firstByteTimeoutMs);
    this.parser = new RequestParser({
      head: (h) => this.onHead(h),
      body: (chunk) => this.exchange?.requestBody(chunk),
      end: (trailers) => this.onRequestEnd(trailers),
    });
    socket.setNoDelay(true);
    this.idleDeadline.set(IDLE_TIMEOUT_MS);
    socket.on('data', this.onData);
    socket.on('drain', this.onSocketDrain);
    socket.on('end', this.onSocketEnd);
    socket.on('error', ignore);
    socket.on('close', this.onSocketClose);
  }

  private readonly onSocketEnd = (): void => this.onEnd();
  private readonly onSocketClose = (): void => this.onClose();

  /** The client of a request on this connection (--trust-proxy reads its forwarding headers). */
  clientOf(head: RequestHead): ClientAddress {
    if (this.directClient !== null) return this.directClient;
    // A peer that is no trusted proxy is the client of every request on the connection.
    if (!trustsPeer(this.peer)) return (this.directClient = clientOfHeaders(this.peer, head.headers));
    return clientOfHeaders(this.peer, head.headers);
  }
  private directClient: ClientAddress | null = null;

  /**
   * Writes toward the visitor (a string is latin1): small ones wait for the end of the current
   * read (a microtask) and leave joined in one buffer; the result is socket.write's, which for a
   * joined write into an idle socket is true (it is far under the high-water mark).
   */
  write(chunk: string | Uint8Array): boolean {
    const socket = this.socket;
    const n = typeof chunk === 'string' ? chunk.length : chunk.byteLength;
    if (this.joinedBytes + n <= JOIN_MAX_BYTES && socket.writableLength === 0 && !socket.destroyed) {
      this.joined[this.joinedCount++] = chunk;
      this.joinedBytes += n;
      if (!this.flushQueued) {
        this.flushQueued = true;
        queueMicrotask(this.flushTurn);
      }
      return true;
    }
    // What waited goes first, in the same send.
    const corked = this.joinedCount > 0;
    if (corked) {
      socket.cork();
      this.flush();
    }
    const ok = typeof chunk === 'string' ? socket.write(chunk, 'latin1') : socket.write(chunk);
    if (corked) socket.uncork();
    // A backed-up socket starts the send timeout here.
    this.sendTimeout.check();
    return ok;
  }

  /** The writes that waited, now (before the socket ends or changes hands). */
  private flush(): void {
    const parts = this.joined;
    const n = this.joinedCount;
    if (n === 0) return;
    const bytes = this.joinedBytes;
    this.joinedBytes = 0;
    this.joinedCount = 0;
    // A destroyed socket sends nothing: the entries are only let go.
    let out: string | Uint8Array | null = null;
    if (this.socket.destroyed) out = null;
    else if (n === 1) out = parts[0]!;
    else {
      const buf = Buffer.allocUnsafe(bytes);
      let o = 0;
      for (let i = 0; i < n; i++) {
        const p = parts[i]!;
        o += typeof p === 'string' ? buf.write(p, o, 'latin1') : (buf.set(p, o), p.byteLength);
      }
      out = buf;
    }
    for (let i = 0; i < n; i++) parts[i] = undefined;
    if (out === null) return;
    if (typeof out === 'string') this.socket.write(out, 'latin1');
    else this.socket.write(out);
    this.sendTimeout.check();
  }

  /** Ends the socket after what waited to be written. */
  endSocket(): void {
    this.flush();
    this.socket.end();
  }

  /** Stops or restarts reading the request body for the tunnel's credit window. */
  setCreditBlocked(blocked: boolean): void {
    this.creditBlocked = blocked;
    this.updateReading();
  }

  /** The exchange takes the socket over (after an upgrade's 101 or a WebSocket handshake). */
  detach(): void {
    this.flush();
    this.phase = 'detached';
    this.headDeadline.stop();
    this.idleDeadline.stop();
    this.clearFirstByteTimer();
    this.socket.off('data', this.onData);
    this.parser.close();
  }

  /**
   * After detach, once the new owner handles the socket's end and close itself (a control
   * WebSocket): lets go of the socket entirely, so this connection, its parser and the
   * handshake's head and exchange are garbage instead of riding along with every idle tunnel
   * (about 3 KiB of each one's shard heap).
   */
  release(): void {
    this.detach();
    this.socket.off('end', this.onSocketEnd);
    this.socket.off('close', this.onSocketClose);
    this.socket.off('drain', this.onSocketDrain);
    this.drainListener = null;
    this.sendTimeout.stop();
    this.exchange = null;
    this.response = null;
    this.pending = null;
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.firstByteTimer !== null) this.clearFirstByteTimer();
    if (this.exchange === null && !this.closing && !this.headDeadline.on) this.headDeadline.set(HEAD_TIMEOUT_MS);
    if (this.idleDeadline.on) this.idleDeadline.set(IDLE_TIMEOUT_MS);
    this.pending = this.pending === null ? chunk : Buffer.concat([this.pending, chunk]);
    this.drive();
  };

  /** Parses what is pending while the current exchange lets it. */
  private drive(): void {
    if (this.driving) return;
    this.driving = true;
    try {
      while (this.pending !== null && (this.phase === 'open' || this.phase === 'answered')) {
        const data = this.pending;
        this.pending = null;
        this.inParser = true;
        let r;
        try {
          r = this.parser.execute(data);
        } finally {
          this.inParser = false;
        }
        // The parser's callbacks moved the phase on (TypeScript keeps the loop's narrowing).
        const phase = this.phase as Phase;
        if (phase === 'detached') return;
        if (r.kind === 'error') return this.refuse(r.status, r.reason);
        if (r.kind === 'upgrade') {
          // Refused at its head (access rules, limits): nothing switches; the answer ends it.
          if (phase === 'answered' || phase === 'done') {
            this.closing = true;
            this.advance();
            break;
          }
          const rest = data.subarray(r.consumed);
          const ex = this.exchange;
          if (ex?.upgraded) ex.upgraded(rest);
          else this.refuse(400, 'this request cannot switch protocols here');
          return;
        }
        if (r.kind === 'paused') {
          const rest = data.subarray(r.consumed);
          if (rest.byteLength > 0) this.pending = rest;
          // Answered already (a refusal, a fast answer): the next request goes now.
          if (phase === 'done') this.advance();
        }
      }
    } finally {
      this.driving = false;
    }
    this.updateReading();
  }

  private updateReading(): void {
    if (this.phase === 'detached' || this.socket.destroyed) return;
    const parsing = this.phase === 'open' || this.phase === 'answered';
    const hold = this.creditBlocked || (!parsing && this.pending !== null);
    if (hold) this.socket.pause();
    else this.socket.resume();
  }

  private onHead(head: RequestHead): void {
    this.headDeadline.clear();
    this.idleDeadline.set(IDLE_TIMEOUT_MS);
    const response = new VisitorResponse(this, head.method, head.versionMinor, head.keepAlive);
    this.response = response;
    if (this.closing) {
      this.exchange = DISCARD;
      return;
    }
    if (this.terms.reserveOnly && this.host.reserved && !this.host.reserved(head)) {
      // The descriptors left are kept for tunnel clients and the API (front-limits.ts).
      this.exchange = DISCARD;
      response.closeAfter();
      response.problem('unavailable', 'the server holds as many connections as it can right now; try again shortly', { html: FrontConnection.wantsHtml(head), extra: { headers: { 'retry-after': '5' } } });
      return;
    }
    this.exchange = this.host.exchange(this, head, response);
  }

  private onRequestEnd(trailers: string[]): void {
    if (this.phase === 'open') {
      this.phase = 'answering';
      // Waiting for the answer (a long poll, an event stream) is not idleness.
      this.idleDeadline.clear();
    } else if (this.phase === 'answered') this.phase = 'done';
    this.exchange?.requestEnd(trailers);
  }

  /** VisitorResponse: the answer is on the wire. */
  responded(keepAlive: boolean): void {
    if (!keepAlive) this.closing = true;
    if (this.phase === 'detached') {
      // An answer written after its exchange took the socket over (a control handshake refused
      // once its key was checked, an upgrade the local service declined): it ends the socket.
      if (this.closing) this.endSocket();
      return;
    }
    if (this.phase === 'open') this.phase = 'answered';
    else if (this.phase === 'answering') this.phase = 'done';
    // Inside the parser, drive() advances when execute returns; before the request is read
    // whole, the rest of its body is still read (and dropped by a finished exchange).
    if (this.phase !== 'done' || this.inParser) return;
    this.advance();
    this.drive();
  }

  /** Request read and answered: the next one, or the end of the connection. */
  private advance(): void {
    this.exchange = null;
    this.response = null;
    this.phase = 'open';
    this.creditBlocked = false;
    if (this.closing || (this.peerEnded && this.pending === null)) {
      this.phase = 'ended';
      this.endSocket();
      return;
    }
    this.idleDeadline.set(IDLE_TIMEOUT_MS);
    this.parser.resume();
  }

  /** The visitor's FIN: a request cut short is aborted; requests read whole are still answered. */
  private onEnd(): void {
    if (this.phase === 'detached') return;
    this.peerEnded = true;
    // A request still being read: it was cut short.
    if (this.exchange !== null && (this.phase === 'open' || this.phase === 'answered')) {
      const ex = this.exchange;
      this.exchange = null;
      ex.abort();
      this.socket.destroy();
      return;
    }
    if (this.exchange === null && this.pending === null) {
      this.phase = 'ended';
      this.endSocket();
    }
  }

  /**
   * A request the parser refused: its status at once with `Connection: close`, unless an
   * answer already started (then the connection just ends). What reached a tunnel is reset.
   */
  private refuse(status: RefusalStatus, reason: string): void {
    this.host.log.debug({ peer: this.peer, status, reason }, 'refused a malformed request');
    const ex = this.exchange;
    this.exchange = DISCARD;
    ex?.abort();
    const started = this.response?.started ?? false;
    if (started) return void this.socket.destroy();
    const response = new VisitorResponse(this, 'GET', 1, false);
    this.response = response;
    // As a request read whole whose answer is due: the problem below is that answer.
    this.phase = 'answering';
    this.closing = true;
    response.problem(REFUSAL_PROBLEM[status], reason);
    // What the visitor still sends is read and dropped for a while, so it reads the answer
    // rather than a reset; then the connection ends.
    this.detach();
    this.socket.on('data', () => undefined);
    this.socket.resume();
    setTimeout(() => this.socket.destroy(), LINGER_MS).unref();
  }

  private clearFirstByteTimer(): void {
    if (this.firstByteTimer) clearTimeout(this.firstByteTimer);
    this.firstByteTimer = null;
  }

  /** Nothing came since the connection opened: it only holds a descriptor, and is closed without a word. */
  private readonly onFirstByteTimeout = (): void => {
    this.firstByteTimer = null;
    if (this.phase === 'detached' || this.pending !== null || this.exchange !== null) return;
    this.host.log.debug({ peer: this.peer }, 'no request byte within the first-byte timeout: closed');
    this.socket.destroy();
  };

  private onHeadTimeout(): void {
    if (this.exchange === null && this.phase !== 'detached') this.refuse(408, `the request head did not arrive within ${HEAD_TIMEOUT_MS / 1000} s`);
  }

  private onIdleDeadline(): void {
    if (this.phase === 'detached' || this.socket.destroyed) return;
    // Bytes still leaving toward the visitor are not idleness (a stalled send is the send timeout's).
    if (this.socket.writableLength > 0) return this.idleDeadline.set(IDLE_TIMEOUT_MS);
    const ex = this.exchange;
    this.exchange = null;
    ex?.abort();
    this.socket.destroy();
  }

  private onClose(): void {
    this.headDeadline.stop();
    this.idleDeadline.stop();
    this.clearFirstByteTimer();
    this.sendTimeout.stop();
    if (this.phase !== 'detached') this.parser.close();
    const ex = this.exchange;
    this.exchange = null;
    if (ex && this.phase !== 'done') ex.abort();
  }

  /** True when a browser asked (errors as an HTML page). */
  static wantsHtml(head: RequestHead): boolean {
    return prefersHtml(headerOf(head.headers, 'accept') ?? undefined);
  }
}

type RefusalStatus = 400 | 408 | 413 | 414 | 431 | 501 | 502 | 505;
/** The problem code of each status the front refuses a request with. */
const REFUSAL_PROBLEM: Record<RefusalStatus, ProblemCode> = {
  400: 'bad-request', 408: 'request-timeout', 413: 'payload-too-large', 414: 'uri-too-long', 431: 'header-too-large', 501: 'not-implemented', 502: 'bad-gateway', 505: 'http-version',
};

/** The first value of header `lower` (a lower-case name) in a flat list, or null. */
export function headerOf(headers: readonly string[], lower: string): string | null {
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!;
    if (isName(name, lower)) return headers[i + 1]!;
  }
  return null;
}
