// HTTP/1.x message parsing for the public front and for upstream responses, on Node's own
// llhttp binding (HTTPParser of the builtin '_http_common'), in strict mode (kLenientNone).
//
// llhttp refuses by itself: unknown methods; a malformed start line or version; header names
// that are not tokens; control bytes (except HTAB) and DEL in values; non-URL bytes in the
// target; bare CR or LF; obs-fold; whitespace before the colon; Content-Length with
// Transfer-Encoding; a repeated or non-numeric Content-Length; a request Transfer-Encoding that
// does not end in chunked, or names chunked twice; bad chunk sizes and chunk framing; bytes after
// a message that closes the connection; the HTTP/2 preface.
// This wrapper adds what llhttp leaves to its user:
//  - it stops after every message, at its exact last byte (see "Segments" below);
//  - limits counted on raw bytes: request line (414) and head (431);
//  - request policy: exactly one valid Host in HTTP/1.1 (absolute-form authority overrides it),
//    Transfer-Encoding only as a single "chunked" and never in HTTP/1.0, HTTP/1.0 or 1.1 only,
//    "HTTP/" only (llhttp also takes RTSP/ and ICE/), single spaces in the request line, HTTP
//    methods only, CONNECT refused (501), target forms (origin, absolute http(s) without
//    userinfo, '*' for OPTIONS), no fragment, an optional body-size limit (413);
//  - response policy: status 100-599, HTTP/1.x, 101 only when an upgrade was asked for, HEAD,
//    1xx, 204 and 304 without a body, interim 1xx passed on before the final response.
//
// Segments. Node's pause() called from a callback does not stop the execute() in progress (the
// rest of the buffer is parsed, and the *next* execute() fails with HPE_PAUSED and a meaningless
// bytesParsed), so llhttp is never handed bytes past a point where the message may end: a head
// and a chunked body both end with CRLF CRLF, so those are fed in segments that end after each
// CRLF CRLF (found with Buffer#indexOf, remembering a partial match across calls). Bodies framed
// by Content-Length or by the connection's close are not fed to llhttp at all: kOnHeadersComplete
// answers 1 ("no body") and the wrapper counts the bytes and hands out views of the caller's
// chunk (which also saves the copy Node makes of every body chunk it reports).

import { createRequire } from 'node:module';
import { forwardedUpgrade } from './http-headers.js';

export const MAX_REQUEST_LINE_BYTES = 8 * 1024;
export const MAX_HEAD_BYTES = 32 * 1024;

export interface RequestHead {
  method: string;
  /** origin-form path+query as sent; the path+query of an absolute-form target ('/' when empty); '*' for OPTIONS * */
  target: string;
  /** the authority of an absolute-form target, else null */
  authority: string | null;
  versionMinor: 0 | 1;
  /** flat [name, value, ...] in arrival order, names' case as sent, values without surrounding whitespace */
  headers: string[];
  /** the absolute-form authority (RFC 9112 §3.2.2: it overrides Host), else the Host value, else null */
  host: string | null;
  keepAlive: boolean;
  /** an upgrade to take over the connection ('upgrade' result); false when the request has a body (the Upgrade is then ignored, RFC 9110 §7.8) or offers only another HTTP (h2c: http-headers.ts `forwardedUpgrade`) */
  upgrade: boolean;
  expectContinue: boolean;
  chunked: boolean;
  contentLength: number | null;
  hasBody: boolean;
  /** set only for a request that came as an HTTP/2 stream (edge/h2-visitor.ts): 'grpc' when its content-type is gRPC's; absent: HTTP/1.x */
  protocol?: 'h2' | 'grpc';
}

export interface RequestSink {
  head(h: RequestHead): void;
  /** decoded body bytes (chunk framing removed); the view is only valid during the call */
  body(chunk: Buffer): void;
  /** the message is complete; trailers flat [name, value, ...] (empty when none) */
  end(trailers: string[]): void;
}

export type ExecResult =
  | { kind: 'more' }
  | { kind: 'paused'; consumed: number }
  | { kind: 'upgrade'; consumed: number }
  | { kind: 'error'; status: 400 | 413 | 414 | 431 | 501 | 502 | 505; reason: string };

export interface ResponseHead {
  status: number;
  reason: string;
  versionMinor: 0 | 1;
  headers: string[];
  keepAlive: boolean;
  upgrade: boolean;
  chunked: boolean;
  contentLength: number | null;
}

export interface ResponseSink {
  head(h: ResponseHead): void;
  body(chunk: Buffer): void;
  end(trailers: string[]): void;
}

// ---- Node's binding ---------------------------------------------------------------------------

interface NativeError extends Error {
  code: string;
  reason: string;
  bytesParsed: number;
}
interface NativeParser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenientFlags: number): void;
  execute(data: Buffer): number | NativeError;
  close(): void;
  [callback: number]: unknown;
}
interface NativeParserClass {
  new (): NativeParser;
  REQUEST: number;
  RESPONSE: number;
  kOnHeaders: number;
  kOnHeadersComplete: number;
  kOnBody: number;
  kOnMessageComplete: number;
  kLenientNone?: number;
}

// '_http_common' is documented as deprecated for applications (DEP0199, documentation-only) but
// is the only way to Node's llhttp; createRequire works the same on Node 20, 22 and 24.
const { HTTPParser } = createRequire(import.meta.url)('_http_common') as { HTTPParser: NativeParserClass };
// The strict checks listed above are llhttp 9's (bare CR/LF, obs-fold...); older ones were laxer.
if (Number(process.versions.llhttp?.split('.')[0]) < 9) {
  throw new Error(`http1-parser needs llhttp >= 9, this Node has ${process.versions.llhttp}`);
}
const STRICT = HTTPParser.kLenientNone ?? 0;
const ASYNC_RESOURCE = {};

// llhttp's method numbers (llhttp.h; Node's own `methods` array is not indexed by them past
// SOURCE). The RTSP methods (35-45) and PRI (34) are left out: refused as non-HTTP.
const METHODS: (string | undefined)[] = [
  'DELETE', 'GET', 'HEAD', 'POST', 'PUT', 'CONNECT', 'OPTIONS', 'TRACE', 'COPY', 'LOCK', 'MKCOL',
  'MOVE', 'PROPFIND', 'PROPPATCH', 'SEARCH', 'UNLOCK', 'BIND', 'REBIND', 'UNBIND', 'ACL', 'REPORT',
  'MKACTIVITY', 'CHECKOUT', 'MERGE', 'M-SEARCH', 'NOTIFY', 'SUBSCRIBE', 'UNSUBSCRIBE', 'PATCH',
  'PURGE', 'MKCALENDAR', 'LINK', 'UNLINK', 'SOURCE',
];
METHODS[46] = 'QUERY';
const CONNECT = 5;

const CR = 13;
const LF = 10;
const CRLF2 = Buffer.from('\r\n\r\n');
const MORE: ExecResult = Object.freeze({ kind: 'more' });

type ErrorStatus = 400 | 413 | 414 | 431 | 501 | 502 | 505;
type ErrorResult = Extract<ExecResult, { kind: 'error' }>;

const enum State {
  Head, // between messages or inside a head: fed to llhttp in segments
  Length, // Content-Length body: counted here
  Chunked, // chunked body: fed to llhttp in segments
  Eof, // close-delimited response body: everything until finish()
  Done, // a message completed: waits for resume()
  Upgraded,
  Failed,
  Finished, // finish() was called
  Closed,
}

/** How much of "\r\n\r\n" the bytes up to `end` end with (0-3), given the state `s` before `start`. */
function crlf2State(buf: Buffer, start: number, end: number, s: number): number {
  let i = start;
  if (end - start > 3) {
    i = end - 3; // the last 3 bytes decide: a longer suffix can't be a proper prefix
    s = 0;
  }
  for (; i < end; i++) {
    const c = buf[i];
    s = c === CR ? (s === 2 ? 3 : 1) : c === LF ? (s === 1 || s === 3 ? 2 : 0) : 0;
  }
  return s;
}

// RFC 3986 reg-name characters (unreserved, sub-delims, '%' checked apart).
const REG_NAME = new Uint8Array(128);
for (const c of 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&\'()*+,;=') REG_NAME[c.charCodeAt(0)] = 1;

function isHex(c: number): boolean {
  return (c >= 48 && c <= 57) || ((c | 0x20) >= 97 && (c | 0x20) <= 102);
}

/** host [":" port]: a reg-name or IPv4 (non-empty), or "[" IPv6 "]"; port 1-5 digits, <= 65535. */
function validAuthority(s: string): boolean {
  const n = s.length;
  if (n === 0 || n > 261) return false;
  let i: number;
  if (s.charCodeAt(0) === 0x5b) {
    const close = s.indexOf(']');
    if (close < 3) return false;
    let colon = false;
    for (let j = 1; j < close; j++) {
      const c = s.charCodeAt(j);
      if (c === 0x3a) colon = true;
      else if (c !== 0x2e && !isHex(c)) return false;
    }
    if (!colon) return false;
    i = close + 1;
  } else {
    for (i = 0; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c === 0x3a) break;
      if (c === 0x25) {
        if (i + 2 >= n || !isHex(s.charCodeAt(i + 1)) || !isHex(s.charCodeAt(i + 2))) return false;
        i += 2;
      } else if (c > 127 || REG_NAME[c] === 0) return false;
    }
    if (i === 0) return false;
  }
  if (i === n) return true;
  if (s.charCodeAt(i) !== 0x3a || n - i - 1 < 1 || n - i - 1 > 5) return false;
  let port = 0;
  for (let j = i + 1; j < n; j++) {
    const d = s.charCodeAt(j) - 48;
    if (d < 0 || d > 9) return false;
    port = port * 10 + d;
  }
  return port <= 65535;
}

/** A header name (of the right length) against its lower-case form; `usual` is the common spelling. */
function named(name: string, lower: string, usual: string): boolean {
  if (name === usual || name === lower) return true;
  // the first letter tells most same-length names apart without a lower-cased copy
  return (name.charCodeAt(0) | 0x20) === lower.charCodeAt(0) && name.toLowerCase() === lower;
}

/** Content-Length as a number (llhttp already checked it is digits), or -1 past 2^53. */
function lengthOf(v: string): number {
  const n = Number(v);
  return v.length > 0 && Number.isSafeInteger(n) ? n : -1;
}

function isChunked(v: string): boolean {
  return v.length === 7 && (v === 'chunked' || v.toLowerCase() === 'chunked');
}

// ---- shared machinery ---------------------------------------------------------------------------

abstract class Http1Parser {
  protected state = State.Head;
  private readonly native: NativeParser;
  private inNative = false;
  private closeAsked = false;
  private failure: ErrorResult | null = null;
  /** how much of "\r\n\r\n" the bytes fed to llhttp end with */
  private tail = 0;

  // the message in progress
  protected headBytes = 0;
  /** a byte other than CR/LF was seen (llhttp skips empty lines before a message) */
  protected started = false;
  protected firstByte = 0;
  protected lineOpen = true;
  protected lineBytes = 0;
  /** start-line length without CRLF, once its LF was seen */
  protected lineLen = -1;
  /** a 1xx was passed on: the final response is still due */
  protected awaitingFinal = false;
  /** the 9th byte before the start line's LF: 'H' of " HTTP/1.x" in a request line */
  protected protoByte = 0;
  private readonly lineTail = Buffer.alloc(9);
  private flushed: string[] | null = null;
  private flushedUrl = '';
  protected headDone = false;
  protected headError: ErrorResult | null = null;
  private completed = false;
  private trailers: string[] | null = null;
  private remaining = 0;
  protected bodyBytes = 0;
  private bodyTooLarge = false;

  protected constructor(
    private readonly type: number,
    protected readonly maxHead: number,
    protected readonly maxLine: number,
    protected readonly maxBody: number,
    private readonly badStatus: ErrorStatus | null,
  ) {
    const p = new HTTPParser();
    // llhttp's own limit stays as a backstop (trailers); it counts fewer bytes than the raw head.
    p.initialize(type, ASYNC_RESOURCE, maxHead, STRICT);
    p[HTTPParser.kOnHeaders] = (h: string[], url: string) => this.onHeaders(h, url);
    p[HTTPParser.kOnHeadersComplete] = (
      major: number, minor: number, h: string[] | undefined, method: number | undefined, url: string | undefined,
      status: number | undefined, reason: string | undefined, upgrade: boolean, keepAlive: boolean,
    ): number => {
      this.headDone = true;
      if (h === undefined) {
        // more than 32 fields: they came through kOnHeaders
        h = this.flushed ?? [];
        url = this.flushedUrl;
      }
      return this.onHead(major, minor, h, method ?? -1, url ?? '', status ?? 0, reason ?? '', upgrade, keepAlive);
    };
    p[HTTPParser.kOnBody] = (b: Buffer) => this.onBody(b);
    p[HTTPParser.kOnMessageComplete] = () => {
      this.completed = true;
    };
    this.native = p;
  }

  /** Checks a complete head; returns what kOnHeadersComplete answers llhttp (0, or 1: no body here). */
  protected abstract onHead(
    major: number, minor: number, headers: string[], method: number, url: string,
    status: number, reason: string, upgrade: boolean, keepAlive: boolean,
  ): number;
  /** The head checked fine (onHead) and ended at `pos`: deliver it; a result stops execute(). */
  protected abstract afterHead(pos: number): ExecResult | null;
  protected abstract deliverBody(b: Buffer): void;
  protected abstract deliverEnd(trailers: string[]): void;

  protected error(status: ErrorStatus, reason: string): ErrorResult {
    return { kind: 'error', status, reason };
  }

  execute(chunk: Buffer): ExecResult {
    switch (this.state) {
      case State.Done: throw new Error('execute() after a complete message: call resume() first');
      case State.Failed: return this.failure!;
      case State.Upgraded: throw new Error('execute() after an upgrade');
      case State.Finished: throw new Error('execute() after finish()');
      case State.Closed: return this.closedResult();
      default: break;
    }
    if (this.inNative) throw new Error('execute() re-entered from a sink callback');
    const len = chunk.length;
    let pos = 0;
    while (pos < len) {
      switch (this.state) {
        case State.Head: {
          const end = this.segmentEnd(chunk, pos);
          const tooBig = this.scanHead(chunk, pos, end);
          if (tooBig) return this.fail(tooBig);
          const err = this.feed(chunk, pos, end);
          pos = end;
          if (this.isClosed()) return this.closedResult();
          if (this.headDone) {
            // our verdict first: llhttp may also fail right after a head we refuse
            if (this.headError) return this.fail(this.headError);
            if (err) return this.fail(err);
            const r = this.afterHead(pos);
            if (r) return r;
          } else if (err) {
            return this.fail(err);
          }
          break;
        }
        case State.Length: {
          const n = Math.min(this.remaining, len - pos);
          this.remaining -= n;
          this.deliverBody(n === len ? chunk : chunk.subarray(pos, pos + n));
          pos += n;
          if (this.isClosed()) return this.closedResult();
          if (this.remaining === 0) return this.complete(pos, []);
          break;
        }
        case State.Chunked: {
          const end = this.segmentEnd(chunk, pos);
          const err = this.feed(chunk, pos, end);
          pos = end;
          if (this.isClosed()) return this.closedResult();
          if (err) return this.fail(err);
          if (this.bodyTooLarge) return this.fail(this.error(413, 'body larger than allowed'));
          if (this.completed) return this.complete(pos, this.trailers ?? []);
          break;
        }
        case State.Eof:
          this.deliverBody(pos === 0 ? chunk : chunk.subarray(pos));
          pos = len;
          if (this.isClosed()) return this.closedResult();
          break;
        default:
          // a sink callback moved the state (close() is handled above)
          return this.state === State.Failed ? this.failure! : MORE;
      }
    }
    return MORE;
  }

  /** After 'paused': go on with the next message. */
  resume(): void {
    if (this.state !== State.Done) return;
    this.state = State.Head;
    this.newMessage();
  }

  /** The peer half-closed. */
  finish(): ExecResult | null {
    let r: ExecResult | null = null;
    switch (this.state) {
      case State.Head:
        if (this.started || this.awaitingFinal) r = this.fail(this.error(this.badStatus ?? 400, 'connection closed inside a head'));
        break;
      case State.Length:
      case State.Chunked:
        r = this.fail(this.error(this.badStatus ?? 400, 'connection closed inside a body'));
        break;
      case State.Eof:
        this.deliverEnd([]);
        break;
      case State.Failed:
        return this.failure;
      default:
        break;
    }
    if (r === null && !this.isClosed()) this.state = State.Finished;
    return r;
  }

  /** Frees the native parser. Required: Node keeps it (and this object) alive until closed. */
  close(): void {
    if (this.state === State.Closed) return;
    this.state = State.Closed;
    // never delete the C++ parser under llhttp_execute (a sink called from kOnBody)
    if (this.inNative) this.closeAsked = true;
    else this.native.close();
  }

  /**
   * Between messages, outside execute(): the native parser may be initialized again for another
   * user (reset()) instead of freed and a new one made, as Node's own http pools its parsers.
   */
  get reusable(): boolean {
    return !this.inNative && (this.state === State.Done || (this.state === State.Head && !this.started && !this.awaitingFinal));
  }

  /** Starts afresh, as new (only when `reusable`). */
  protected resetParser(): void {
    this.native.initialize(this.type, ASYNC_RESOURCE, this.maxHead, STRICT);
    this.state = State.Head;
    this.closeAsked = false;
    this.failure = null;
    this.awaitingFinal = false;
    this.firstByte = 0;
    this.protoByte = 0;
    this.remaining = 0;
    this.newMessage();
  }

  /** (a method: the state may change under sink callbacks, which TypeScript's narrowing can't see) */
  protected isClosed(): boolean {
    return this.state === State.Closed;
  }

  protected newMessage(): void {
    this.tail = 0;
    this.headBytes = 0;
    this.started = false;
    this.lineOpen = true;
    this.lineBytes = 0;
    this.lineLen = -1;
    this.flushed = null;
    this.flushedUrl = '';
    this.headDone = false;
    this.headError = null;
    this.completed = false;
    this.trailers = null;
    this.bodyBytes = 0;
    this.bodyTooLarge = false;
  }

  /** After a head: how its body is framed. */
  protected startBody(kind: State.Length | State.Chunked | State.Eof, length: number): void {
    this.state = kind;
    this.remaining = length;
    this.completed = false;
  }

  protected complete(pos: number, trailers: string[]): ExecResult {
    this.deliverEnd(trailers);
    if (this.isClosed()) return this.closedResult();
    this.state = State.Done;
    return { kind: 'paused', consumed: pos };
  }

  protected fail(e: ErrorResult): ErrorResult {
    if (this.state !== State.Closed) {
      this.state = State.Failed;
      this.failure = e;
    }
    return e;
  }

  protected closedResult(): ErrorResult {
    return this.error(this.badStatus ?? 400, 'parser closed');
  }

  /** Where the next segment for llhttp ends: after the next "\r\n\r\n", or the chunk's end. */
  private segmentEnd(buf: Buffer, pos: number): number {
    const s = this.tail;
    if (s === 3) {
      if (buf[pos] === LF) return pos + 1;
    } else if (s === 2) {
      if (buf[pos] === CR && buf[pos + 1] === LF) return pos + 2;
    } else if (s === 1) {
      if (buf[pos] === LF && buf[pos + 1] === CR && buf[pos + 2] === LF) return pos + 3;
    }
    const i = buf.indexOf(CRLF2, pos);
    return i < 0 ? buf.length : i + 4;
  }

  /** Raw-byte accounting of a head segment before llhttp sees it: 414 / 431. */
  private scanHead(buf: Buffer, pos: number, end: number): ErrorResult | null {
    this.headBytes += end - pos;
    if (this.lineOpen) {
      let i = pos;
      if (!this.started) {
        while (i < end && (buf[i] === CR || buf[i] === LF)) i++;
        if (i < end) {
          this.started = true;
          this.firstByte = buf[i];
        }
      }
      if (i < end) {
        const lf = buf.indexOf(LF, i);
        if (lf < 0 || lf >= end) {
          this.lineBytes += end - i;
          this.keepLineTail(buf, i, end);
          // the last byte may be the CR
          if (this.lineBytes - 1 > this.maxLine) return this.error(this.badStatus ?? 414, 'request line too long');
        } else {
          this.lineBytes += lf + 1 - i;
          this.lineOpen = false;
          this.lineLen = this.lineBytes - 2;
          const k = lf - 9;
          this.protoByte = k >= i ? buf[k] : this.lineTail[9 - (i - k)];
          if (this.lineLen > this.maxLine) return this.error(this.badStatus ?? 414, 'request line too long');
        }
      }
    }
    if (this.headBytes > this.maxHead) return this.error(this.badStatus ?? 431, 'head too large');
    return null;
  }

  /** Keeps the last 9 bytes of a start line that goes on in the next chunk. */
  private keepLineTail(buf: Buffer, start: number, end: number): void {
    const n = end - start;
    if (n >= 9) {
      buf.copy(this.lineTail, 0, end - 9, end);
    } else {
      this.lineTail.copyWithin(0, n, 9);
      buf.copy(this.lineTail, 9 - n, start, end);
    }
  }

  /** Hands llhttp buf[start, end); an llhttp error as an error result. */
  private feed(buf: Buffer, start: number, end: number): ErrorResult | null {
    const view = start === 0 && end === buf.length ? buf : buf.subarray(start, end);
    this.tail = crlf2State(buf, start, end, this.tail);
    let r: number | NativeError;
    this.inNative = true;
    try {
      r = this.native.execute(view);
    } catch (e) {
      // a sink threw from kOnBody: llhttp is left in error
      this.inNative = false;
      this.fail(this.error(this.badStatus ?? 400, 'sink failed'));
      if (this.closeAsked) this.native.close();
      throw e;
    }
    this.inNative = false;
    if (this.closeAsked) {
      this.native.close();
      return null;
    }
    if (typeof r === 'number') {
      // Node reports no Error while llhttp's upgrade flag is set: a short count is one
      return r === view.length ? null : this.error(this.badStatus ?? 400, 'malformed message');
    }
    return this.parseError(r.code, r.reason);
  }

  protected parseError(code: string, reason: string): ErrorResult {
    const why = `${code}: ${reason}`;
    if (this.badStatus !== null) return this.error(this.badStatus, why);
    switch (code) {
      case 'HPE_HEADER_OVERFLOW': return this.error(this.lineOpen ? 414 : 431, why);
      case 'HPE_CHUNK_EXTENSIONS_OVERFLOW': return this.error(413, why);
      // A length past 2^64 (llhttp's own limit; the wrapper refuses past 2^53 the same way)
      case 'HPE_INVALID_CONTENT_LENGTH': return this.error(/overflow/i.test(reason) ? 413 : 400, why);
      case 'HPE_PAUSED_H2_UPGRADE': return this.error(505, 'HTTP/2 prior knowledge is not served here');
      // "HTTP/1.2", "HTTP/3.0": well formed but unsupported (other version errors are syntax)
      case 'HPE_INVALID_VERSION': return this.error(reason === 'Invalid HTTP version' ? 505 : 400, why);
      default: return this.error(400, why);
    }
  }

  private onHeaders(h: string[], url: string): void {
    if (this.state === State.Head) {
      if (this.flushed === null) this.flushed = h;
      else for (let i = 0; i < h.length; i++) this.flushed.push(h[i]);
      this.flushedUrl += url;
    } else if (this.trailers === null) {
      this.trailers = h;
    } else {
      for (let i = 0; i < h.length; i++) this.trailers.push(h[i]);
    }
  }

  private onBody(b: Buffer): void {
    if (this.bodyTooLarge || this.state === State.Closed) return;
    this.bodyBytes += b.length;
    if (this.bodyBytes > this.maxBody) {
      this.bodyTooLarge = true;
      return;
    }
    this.deliverBody(b);
  }
}

// ---- requests -----------------------------------------------------------------------------------

/**
 * One per client connection. Stops after every message ('paused'): answer it, then resume() and
 * execute() the bytes after `consumed`. close() when the connection is gone.
 */
export class RequestParser extends Http1Parser {
  private head: RequestHead | null = null;

  constructor(
    private readonly sink: RequestSink,
    opts: { maxHeadBytes?: number; maxRequestLineBytes?: number; maxBodyBytes?: number } = {},
  ) {
    super(
      HTTPParser.REQUEST,
      opts.maxHeadBytes ?? MAX_HEAD_BYTES,
      opts.maxRequestLineBytes ?? MAX_REQUEST_LINE_BYTES,
      opts.maxBodyBytes ?? Number.MAX_SAFE_INTEGER,
      null,
    );
  }

  protected onHead(
    major: number, minor: number, headers: string[], methodNo: number, url: string,
    _status: number, _reason: string, upgrade: boolean, keepAlive: boolean,
  ): number {
    this.head = null;
    const method = METHODS[methodNo];
    // llhttp takes several spaces between the parts and RTSP/ or ICE/ for HTTP/
    if (method === undefined || this.lineLen !== method.length + url.length + 10 || this.protoByte !== 0x48) {
      return this.refuse(400, method === undefined ? 'unsupported method' : 'malformed request line');
    }
    if (major !== 1 || minor > 1) return this.refuse(505, 'HTTP version not supported');
    if (methodNo === CONNECT) return this.refuse(501, 'CONNECT is not supported');

    let host: string | null = null;
    let hosts = 0;
    let cl: string | null = null;
    let cls = 0;
    let te: string | null = null;
    let tes = 0;
    let expectContinue = false;
    let upgradeTo = '';
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i];
      switch (name.length) {
        case 7:
          if (named(name, 'upgrade', 'Upgrade')) upgradeTo = upgradeTo === '' ? headers[i + 1] : `${upgradeTo}, ${headers[i + 1]}`;
          break;
        case 4:
          if (named(name, 'host', 'Host')) {
            host = headers[i + 1];
            hosts++;
          }
          break;
        case 6:
          if (named(name, 'expect', 'Expect')) {
            const v = headers[i + 1];
            if (v.length === 12 && v.toLowerCase() === '100-continue') expectContinue = true;
          }
          break;
        case 14:
          if (named(name, 'content-length', 'Content-Length')) {
            cl = headers[i + 1];
            cls++;
          }
          break;
        case 17:
          if (named(name, 'transfer-encoding', 'Transfer-Encoding')) {
            te = headers[i + 1];
            tes++;
          }
          break;
      }
    }
    if (hosts > 1) return this.refuse(400, 'more than one Host');
    if (hosts === 0 && minor === 1) return this.refuse(400, 'HTTP/1.1 request without Host');
    if (host !== null && !validAuthority(host)) return this.refuse(400, 'invalid Host');
    if (cls > 1) return this.refuse(400, 'more than one Content-Length');
    if (tes > 0 && cls > 0) return this.refuse(400, 'Content-Length with Transfer-Encoding');
    if (tes > 0 && minor === 0) return this.refuse(400, 'Transfer-Encoding in HTTP/1.0');
    if (tes > 1 || (te !== null && !isChunked(te))) return this.refuse(400, 'unsupported Transfer-Encoding');
    let contentLength: number | null = null;
    if (cl !== null) {
      contentLength = lengthOf(cl);
      if (contentLength < 0) return this.refuse(413, `Content-Length ${cl.slice(0, 32)} is larger than this server takes`);
      if (contentLength > this.maxBody) return this.refuse(413, `Content-Length ${cl.slice(0, 32)} is larger than allowed`);
    }

    // the target: origin-form, '*' (OPTIONS), or absolute-form http(s) (CONNECT's authority-form is refused above)
    let target = url;
    let authority: string | null = null;
    const c0 = url.charCodeAt(0);
    if (c0 === 0x2f) {
      if (url.includes('#')) return this.refuse(400, 'fragment in request target');
    } else if (url === '*') {
      if (method !== 'OPTIONS') return this.refuse(400, "'*' target outside OPTIONS");
    } else {
      const lower = url.slice(0, 8).toLowerCase();
      const k = lower.startsWith('http://') ? 7 : lower === 'https://' ? 8 : 0;
      if (k === 0) return this.refuse(400, 'invalid request target');
      let e = k;
      for (; e < url.length; e++) {
        const c = url.charCodeAt(e);
        if (c === 0x2f || c === 0x3f || c === 0x23) break;
      }
      authority = url.slice(k, e);
      if (!validAuthority(authority)) return this.refuse(400, 'invalid authority in request target');
      const rest = url.slice(e);
      if (rest.includes('#')) return this.refuse(400, 'fragment in request target');
      target = rest === '' ? '/' : rest.charCodeAt(0) === 0x3f ? `/${rest}` : rest;
    }

    const chunked = te !== null;
    const hasBody = chunked || (contentLength !== null && contentLength > 0);
    this.head = {
      method,
      target,
      authority,
      versionMinor: minor as 0 | 1,
      headers,
      host: authority ?? host,
      keepAlive,
      // with a body, the Upgrade is ignored (RFC 9110 §7.8): the request is served as it is;
      // so is one that offers only another HTTP (h2c), which is never passed on
      upgrade: upgrade && !hasBody && forwardedUpgrade(upgradeTo) !== '',
      expectContinue,
      chunked,
      contentLength,
      hasBody,
    };
    // chunked bodies are llhttp's to decode; a Content-Length body is counted here
    return chunked ? 0 : 1;
  }

  private refuse(status: ErrorStatus, reason: string): number {
    this.headError = { kind: 'error', status, reason };
    return 1;
  }

  protected afterHead(pos: number): ExecResult | null {
    const h = this.head!;
    this.head = null;
    this.sink.head(h);
    if (this.isClosed()) return this.closedResult();
    if (h.upgrade) {
      this.sink.end([]);
      if (this.isClosed()) return this.closedResult();
      this.state = State.Upgraded;
      return { kind: 'upgrade', consumed: pos };
    }
    if (h.chunked) this.startBody(State.Chunked, 0);
    else if (h.hasBody) this.startBody(State.Length, h.contentLength!);
    else return this.complete(pos, []);
    return null;
  }

  protected deliverBody(b: Buffer): void {
    this.sink.body(b);
  }

  protected deliverEnd(trailers: string[]): void {
    this.sink.end(trailers);
  }
}

// ---- responses ----------------------------------------------------------------------------------

/**
 * One per upstream connection: tells where each response ends and checks its head. Call
 * expect() before each response; interim 1xx heads are passed on and the final one follows.
 * close() when the connection is gone.
 */
export class ResponseParser extends Http1Parser {
  private head: ResponseHead | null = null;
  private headRequest = false;
  private upgradeRequested = false;
  /** the head in hand is an interim 1xx */
  private interim = false;
  private bodyKind: State.Length | State.Chunked | State.Eof | null = null;

  constructor(
    private sink: ResponseSink,
    opts: { maxHeadBytes?: number } = {},
  ) {
    const max = opts.maxHeadBytes ?? MAX_HEAD_BYTES;
    super(HTTPParser.RESPONSE, max, max, Number.MAX_SAFE_INTEGER, 502);
  }

  /** This parser, `reusable`, for another connection's answers to `sink`. */
  reuse(sink: ResponseSink): this {
    if (!this.reusable) throw new Error('reuse() of a parser inside a message or execute()');
    this.resetParser();
    this.sink = sink;
    this.head = null;
    this.headRequest = false;
    this.upgradeRequested = false;
    this.interim = false;
    this.bodyKind = null;
    return this;
  }

  /**
   * Before each response: the request's method (HEAD: no body) and whether it asked for an
   * upgrade. Used by the next final (non-1xx) head, then forgotten.
   */
  expect(method: string, upgradeRequested: boolean): void {
    this.headRequest = method === 'HEAD';
    this.upgradeRequested = upgradeRequested;
  }

  protected onHead(
    major: number, minor: number, headers: string[], _method: number, _url: string,
    status: number, reason: string, upgrade: boolean, keepAlive: boolean,
  ): number {
    this.head = null;
    // llhttp also takes RTSP/ and ICE/ status lines
    if (this.firstByte !== 0x48 || major !== 1 || minor > 1) return this.refuse('not an HTTP/1.x response');
    if (status < 100 || status > 599) return this.refuse(`invalid status ${status}`);
    let cl: string | null = null;
    let cls = 0;
    let te: string | null = null;
    let tes = 0;
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i];
      if (name.length === 14 && named(name, 'content-length', 'Content-Length')) {
        cl = headers[i + 1];
        cls++;
      } else if (name.length === 17 && named(name, 'transfer-encoding', 'Transfer-Encoding')) {
        te = headers[i + 1];
        tes++;
      }
    }
    if (cls > 1) return this.refuse('more than one Content-Length');
    if (cls > 0 && tes > 0) return this.refuse('Content-Length with Transfer-Encoding');
    if (tes > 0 && minor === 0) return this.refuse('Transfer-Encoding in HTTP/1.0');
    // other codings would have to be passed on undecoded: not supported
    if (tes > 1 || (te !== null && !isChunked(te))) return this.refuse('unsupported Transfer-Encoding');
    let contentLength: number | null = null;
    if (cl !== null) {
      contentLength = lengthOf(cl);
      if (contentLength < 0) return this.refuse('Content-Length too large');
    }
    if (status === 101 && !(this.upgradeRequested && upgrade)) return this.refuse('unexpected 101');

    this.interim = status < 200 && status !== 101;
    const chunked = te !== null;
    this.head = { status, reason, versionMinor: minor as 0 | 1, headers, keepAlive, upgrade: status === 101, chunked, contentLength };
    const noBody = this.headRequest || status < 200 || status === 204 || status === 304;
    if (!this.interim) {
      this.headRequest = false;
      this.upgradeRequested = false;
    }
    this.bodyKind = noBody ? null
      : chunked ? State.Chunked
      : contentLength !== null ? (contentLength > 0 ? State.Length : null)
      : State.Eof;
    return this.bodyKind === State.Chunked || status === 101 ? 0 : 1;
  }

  private refuse(reason: string): number {
    this.headError = { kind: 'error', status: 502, reason };
    return 1;
  }

  protected afterHead(pos: number): ExecResult | null {
    const h = this.head!;
    this.head = null;
    this.sink.head(h);
    if (this.isClosed()) return this.closedResult();
    if (h.upgrade) {
      this.sink.end([]);
      if (this.isClosed()) return this.closedResult();
      this.state = State.Upgraded;
      return { kind: 'upgrade', consumed: pos };
    }
    if (this.interim) {
      // llhttp took the 1xx as a whole message; the final response follows
      this.newMessage();
      this.awaitingFinal = true;
      return null;
    }
    this.awaitingFinal = false;
    const kind = this.bodyKind;
    if (kind === null) return this.complete(pos, []);
    this.startBody(kind, h.contentLength ?? 0);
    return null;
  }

  protected deliverBody(b: Buffer): void {
    this.sink.body(b);
  }

  protected deliverEnd(trailers: string[]): void {
    this.sink.end(trailers);
  }
}
