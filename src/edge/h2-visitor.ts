import http2, { type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { ApiError, ProblemCode } from '../errors.js';
import { clientOfHeaders, type ClientAddress } from '../http/client-address.js';
import { renderProblem } from '../http/problem.js';
import { isGrpcContentType } from '../protocol/grpc-framing.js';
import type { RequestHead } from '../protocol/http1-parser.js';
import type { VisitorAnswer, VisitorConnection } from './visitor-port.js';

// One HTTP/2 stream of a visitor as the tunnel's visitor adapter sees it (visitor-port.ts): the
// stream is the carrier (its 'drain', its destroy = RST_STREAM), H2Answer writes the answer as
// HEADERS, DATA and trailing HEADERS (nghttp2 frames them: no framing of ours on this side).
//
//   ServerHttp2Stream ─'data'/'end'─▶ Exchange (ingress.ts TunnelVisitor)
//                     ◀── H2Answer ◀─ TunnelVisitor ◀─ response head, Data, End + trailers

const { NGHTTP2_INTERNAL_ERROR, NGHTTP2_NO_ERROR } = http2.constants;

/** What the HTTP/2 stream's session does for it: the send timeout, the reset budget. */
export interface H2SessionHooks {
  /** After writes: the session's socket may be backing up (the send timeout). */
  wrote(): void;
}

/** Fields the answer may not carry over HTTP/2 (RFC 9113 §8.2.2): the connection's own, or framing. */
const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'http2-settings', 'host']);

/** The carrier of one request on an HTTP/2 stream. */
export class H2StreamCarrier implements VisitorConnection {
  drainListener: (() => void) | null = null;

  constructor(
    readonly socket: ServerHttp2Stream,
    /** The connection's client (the PROXY header's source under --proxy-protocol). */
    private readonly peer: string,
  ) {
    socket.on('drain', () => this.drainListener?.());
  }
  // nghttp2 joins a turn's frames into its own sends: writes go as they come.
  write(chunk: string | Uint8Array): boolean {
    return typeof chunk === 'string' ? this.socket.write(chunk, 'latin1') : this.socket.write(chunk);
  }
  endSocket(): void {
    this.socket.end();
  }
  setCreditBlocked(blocked: boolean): void {
    // A paused stream is not read: nghttp2 stops opening its window, so the visitor stops sending.
    if (blocked) this.socket.pause();
    else this.socket.resume();
  }
  detach(): void {
    // No upgrades over HTTP/2 (RFC 9113 §8.6): nothing takes the stream over.
  }
  clientOf(head: RequestHead): ClientAddress {
    return clientOfHeaders(this.peer, head.headers);
  }
}

/** The answer on one HTTP/2 stream. */
export class H2Answer implements VisitorAnswer {
  started = false;
  finished = false;
  status = 0;
  readonly carriesTrailers = true;
  /** Content-Length left to send, or null (the answer ends when its producer says). */
  private remaining: number | null = null;
  private trailers: OutgoingHttpHeaders | null = null;
  /** This end reset the stream (an answer it could not finish): not the visitor's doing. */
  resetHere = false;

  constructor(
    private readonly stream: ServerHttp2Stream,
    readonly method: string,
    private readonly hooks: H2SessionHooks,
  ) {
    stream.on('wantTrailers', () => {
      try {
        stream.sendTrailers(this.trailers ?? {});
      } catch {
        this.abort();
      }
    });
  }

  closeAfter(): void {
    // The stream ends with its answer; the connection goes on for the others.
  }

  head(status: number, headers: readonly string[], contentLength: number | null): void {
    if (this.started || this.stream.destroyed) return;
    this.started = true;
    this.status = status;
    const out = toH2Headers(headers);
    out[':status'] = status;
    const bodiless = this.method === 'HEAD' || status === 204 || status === 304;
    if (contentLength !== null && status !== 204) out['content-length'] = contentLength;
    // Nothing follows: HEADERS with END_STREAM (gRPC's trailers-only answer keeps its meaning).
    const empty = bodiless || contentLength === 0;
    if (!empty) this.remaining = contentLength;
    try {
      this.stream.respond(out, { endStream: empty, waitForTrailers: !empty });
    } catch {
      // A field Node refuses to put on HTTP/2 (llhttp let it through): the stream cannot be answered.
      return this.abort();
    }
    this.hooks.wrote();
    if (empty) this.finished = true;
  }

  interim(): void {
    // 100 Continue: HTTP/2 visitors send their body without waiting (nghttp2 never asks for it).
  }

  body(bytes: Uint8Array): boolean {
    if (this.finished || !this.started || bytes.byteLength === 0) return true;
    let chunk = bytes;
    if (this.remaining !== null) {
      // More than declared: cut (the visitor trusts the length it was told).
      if (chunk.byteLength > this.remaining) chunk = chunk.subarray(0, this.remaining);
      this.remaining -= chunk.byteLength;
    }
    const ok = chunk.byteLength === 0 ? true : this.stream.write(chunk);
    this.hooks.wrote();
    if (this.remaining === 0) this.end();
    return ok;
  }

  end(trailers: readonly string[] = []): void {
    if (this.finished || !this.started) return;
    // Fewer bytes than its Content-Length: the visitor learns it from a reset, never a short body.
    if (this.remaining !== null && this.remaining > 0) return this.abort();
    this.finished = true;
    if (trailers.length > 0) this.trailers = toH2Headers(trailers);
    this.stream.end();
  }

  problem(code: ProblemCode, detail: string, opts: { extra?: Pick<ApiError, 'errors' | 'headers'>; html?: boolean; status?: number } = {}): void {
    const r = renderProblem(code, detail, opts);
    const flat: string[] = [];
    for (const [k, v] of Object.entries(r.headers ?? {})) flat.push(k, v);
    const bytes = Buffer.from(r.body ?? '');
    this.head(r.status, flat, bytes.byteLength);
    this.body(bytes);
  }

  abort(): void {
    if (this.finished && this.stream.destroyed) return;
    this.finished = true;
    this.resetHere = true;
    if (!this.stream.destroyed) this.stream.close(NGHTTP2_INTERNAL_ERROR);
  }
}

/** Flat [name, value, ...] → Node's header object: lower-case names, repeats as arrays, no connection fields. */
function toH2Headers(flat: readonly string[]): OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (let i = 0; i < flat.length; i += 2) {
    const name = flat[i]!.toLowerCase();
    if (CONNECTION_SPECIFIC.has(name) || name.startsWith(':') || name === 'content-length') continue;
    const value = flat[i + 1]!;
    const had = out[name];
    if (had === undefined) out[name] = value;
    else if (Array.isArray(had)) had.push(value);
    else out[name] = [had, value];
  }
  return out;
}

/** A request's :path: origin-form of visible ASCII, or '*' (OPTIONS). */
const PATH_RE = /^\/[\x21-\x7e]*$/;

/**
 * The request head of an HTTP/2 stream as the front's parser would have given it for HTTP/1.1,
 * or why it cannot be served (a 4xx/5xx and a reason). nghttp2 already refused what RFC 9113
 * forbids (connection-specific fields, upper-case names, a bad pseudo-header set, `te` other
 * than `trailers`); what is left is burrow's own policy, the front's for HTTP/1.1.
 */
export function h2RequestHead(headers: IncomingHttpHeaders, raw: readonly string[], endStream: boolean): RequestHead | { status: 400 | 501; reason: string } {
  const method = headers[':method'] ?? '';
  if (method === 'CONNECT') return { status: 501, reason: 'CONNECT is not served here' };
  const target = headers[':path'] ?? '';
  if (!(PATH_RE.test(target) || (target === '*' && method === 'OPTIONS')) || target.includes('#')) return { status: 400, reason: 'the :path is not an origin-form target' };
  const fields: string[] = [];
  let cookies: string | null = null;
  let hostHeader: string | null = null;
  let contentLength: number | null = null;
  let grpc = false;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.startsWith(':')) continue;
    const value = raw[i + 1]!;
    // RFC 9113 §8.2.3: split cookies join again for an HTTP/1.1 service.
    if (name === 'cookie') {
      cookies = cookies === null ? value : `${cookies}; ${value}`;
      continue;
    }
    if (name === 'host') {
      if (hostHeader !== null) return { status: 400, reason: 'two host fields' };
      hostHeader = value;
    }
    if (name === 'content-length') {
      if (!/^\d{1,15}$/.test(value) || (contentLength !== null && contentLength !== Number(value))) return { status: 400, reason: 'an invalid content-length' };
      contentLength = Number(value);
    }
    // nghttp2 hands names in lower case (RFC 9113 §8.2.1 refuses others).
    if (name === 'content-type') grpc = isGrpcContentType(value);
    fields.push(name, value);
  }
  if (cookies !== null) fields.push('cookie', cookies);
  // RFC 9113 §8.3.1: :authority when present, else Host; one of them names the tunnel.
  const host = headers[':authority'] ?? hostHeader;
  if (!host || !/^[A-Za-z0-9.-]{1,253}(?::\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::\d{1,5})?$/.test(host)) return { status: 400, reason: 'no valid :authority' };
  const hasBody = !endStream;
  return {
    method,
    target,
    authority: null,
    versionMinor: 1,
    headers: fields,
    host,
    keepAlive: true,
    upgrade: false,
    expectContinue: false,
    chunked: hasBody && contentLength === null,
    contentLength,
    hasBody,
    protocol: grpc ? 'grpc' : 'h2',
  };
}

export { NGHTTP2_NO_ERROR };
