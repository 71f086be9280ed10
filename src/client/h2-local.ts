import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import { STATUS_CODES } from 'node:http';
import type { HttpHead } from '../protocol/frames.js';
import { connectOptions, hostPort, type LocalTarget } from './local-target.js';
import { ClientStream, type Sender } from './streams.js';

// A local service that speaks HTTP/2 (`burrow http h2c://…` or `h2://…`: gRPC servers): the
// client opens one HTTP/2 stream per visitor request on a session per tunnel, and writes the
// answer back as HTTP/1.1 with chunked framing and its trailers in the last chunk:
//
//   StreamOpen{head} ─▶ H2LocalStream: :method/:path/:authority + fields (te: trailers) ─▶ local service
//   Data(HTTP/1.1 head, chunks…, last chunk with trailers) ◀─ 'response', 'data', 'trailers', 'end'
//
// Why HTTP/1.1 on the tunnel: the edge already reads every answer with llhttp (strict) before a
// byte reaches a visitor (tunnel.ts TunnelStream), and llhttp reads chunked trailers; so the
// tunnel's frames, the mesh, cluster links and the edge's checks stay one path for every local
// service, and an HTTP/2 visitor gets the trailers as HTTP/2 trailers (h2-visitor.ts). An answer
// that ends with its HEADERS (gRPC's trailers-only errors) goes as Content-Length: 0, which the
// edge answers with HEADERS + END_STREAM again.

const { NGHTTP2_CANCEL, NGHTTP2_FLAG_END_STREAM } = http2.constants;

/** Request fields HTTP/2 forbids or that belong to the visitor's hop (RFC 9113 §8.2.2). */
const NOT_ON_H2 = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'host', 'http2-settings', 'expect']);

/** One HTTP/2 session per tunnel toward its local service, opened again when it ends. */
export class H2Sessions {
  private session: ClientHttp2Session | null = null;
  private closed = false;

  constructor(readonly local: LocalTarget) {}

  get(): ClientHttp2Session {
    if (this.closed) throw new Error('the tunnel is closing');
    const live = this.session;
    if (live && !live.closed && !live.destroyed) return live;
    const origin = `${this.local.tls ? 'https' : 'http'}://${hostPort(this.local)}`;
    const s = http2.connect(origin, { ...connectOptions(this.local), settings: { enablePush: false } });
    const forget = (): void => {
      if (this.session === s) this.session = null;
    };
    s.on('error', forget);
    s.on('goaway', forget);
    s.on('close', forget);
    this.session = s;
    return s;
  }

  close(): void {
    this.closed = true;
    this.session?.close();
    this.session = null;
  }
}

/** One visitor request on an HTTP/2 stream to the local service. */
export class H2LocalStream extends ClientStream {
  private req: ClientHttp2Stream | null = null;
  private status = 0;
  private answered = false;
  /** The answer's body goes in chunks (no Content-Length): the trailers can follow the last one. */
  private chunked = false;
  private trailers: IncomingHttpHeaders | null = null;
  private readonly headTimer: NodeJS.Timeout;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: HttpHead, sessions: H2Sessions, timeoutMs: number) {
    super(sid, out, onFinish);
    if (head.end) this.ends.endPeer();
    this.headTimer = setTimeout(() => {
      this.localFailure ??= { err: null };
      this.reset('local-timeout');
    }, timeoutMs);
    let req: ClientHttp2Stream;
    try {
      req = sessions.get().request(requestHeaders(head, sessions.local), { endStream: head.end });
    } catch (err) {
      this.localFailure = { err: err as Error };
      queueMicrotask(() => this.reset('local-unreachable'));
      return;
    }
    this.req = req;
    req.on('response', (h, flags) => this.onResponse(h, flags));
    req.on('data', (chunk: Buffer) => this.onBody(chunk));
    req.on('trailers', (t) => (this.trailers = t));
    req.on('end', () => this.onLocalEnd());
    req.on('drain', () => this.meter.drained());
    req.on('error', (err) => this.onLocalError(err));
    req.on('close', () => {
      // Reset by the local service (or its session lost) before the answer ended.
      if (!this.done && req.rstCode !== http2.constants.NGHTTP2_NO_ERROR) this.onLocalError(new Error(`the local service reset the stream (HTTP/2 error ${req.rstCode})`));
    });
  }

  get statusCode(): number {
    return this.status;
  }

  // ---- visitor → local service ----
  onData(bytes: Buffer): void {
    if (this.done || !this.req) return;
    this.bytesIn += bytes.length;
    this.capture?.requestBody(bytes);
    this.meter.wrote(bytes.length, this.req.write(bytes));
  }
  protected endDestination(): void {
    this.req?.end();
  }

  // ---- local service → visitor ----
  private onResponse(h: IncomingHttpHeaders, flags: number): void {
    if (this.done) return;
    clearTimeout(this.headTimer);
    this.answered = true;
    const status = Number(h[':status']);
    this.status = status;
    const fields = flatFields(h);
    this.capture?.response(status, fields, { version: 'HTTP/2', reason: STATUS_CODES[status] ?? '' });
    let text = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\n`;
    for (let i = 0; i < fields.length; i += 2) text += `${fields[i]}: ${fields[i + 1]}\r\n`;
    const bodiless = this.head.method === 'HEAD' || status === 204 || status === 304;
    if ((flags & NGHTTP2_FLAG_END_STREAM) !== 0 && !bodiless) {
      // Trailers-only (gRPC errors): nothing follows the head.
      if (h['content-length'] === undefined) text += 'Content-Length: 0\r\n';
    } else if (!bodiless && h['content-length'] === undefined) {
      this.chunked = true;
      text += 'Transfer-Encoding: chunked\r\n';
    }
    this.send(Buffer.from(text + '\r\n', 'latin1'));
  }

  private onBody(chunk: Buffer): void {
    if (this.done || chunk.length === 0) return;
    this.bytesOut += chunk.length;
    this.capture?.responseBody(chunk);
    if (!this.chunked) return this.send(chunk);
    this.send(Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`, 'latin1'), chunk, CRLF]));
  }

  private onLocalEnd(): void {
    if (this.done || !this.answered) return;
    const t = this.trailers ? flatFields(this.trailers) : [];
    if (t.length > 0) this.capture?.trailers?.(t);
    if (this.chunked) {
      let text = '0\r\n';
      for (let i = 0; i < t.length; i += 2) text += `${t[i]}: ${t[i + 1]}\r\n`;
      this.send(Buffer.from(text + '\r\n', 'latin1'));
    }
    this.localEnded();
  }

  private onLocalError(err: Error): void {
    if (this.done) return;
    if (!this.answered) {
      this.localFailure ??= { err };
      return this.reset('local-unreachable');
    }
    this.reset('closing');
  }

  private send(bytes: Buffer): void {
    this.forward(bytes);
  }

  protected destroy(): void {
    clearTimeout(this.headTimer);
    // The visitor went (its RST_STREAM, or the edge's): the local service hears a cancel.
    if (this.req && !this.req.closed) this.req.close(NGHTTP2_CANCEL);
  }
  protected pauseSource(): void {
    this.req?.pause();
  }
  protected resumeSource(): void {
    this.req?.resume();
  }
  protected override finished(): void {
    clearTimeout(this.headTimer);
    super.finished();
  }
}

const CRLF = Buffer.from('\r\n');

/** The edge's request head as HTTP/2 fields: pseudo-headers from the head, :authority from Host. */
function requestHeaders(head: HttpHead, local: LocalTarget): OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {
    ':method': head.method,
    ':path': head.target,
    ':scheme': local.tls ? 'https' : 'http',
  };
  const h = head.headers;
  for (let i = 0; i < h.length; i += 2) {
    const name = h[i]!.toLowerCase();
    if (name === 'host') {
      out[':authority'] ??= h[i + 1]!;
      continue;
    }
    if (NOT_ON_H2.has(name)) continue;
    const had = out[name];
    const value = h[i + 1]!;
    if (had === undefined) out[name] = value;
    else if (Array.isArray(had)) had.push(value);
    else out[name] = [had, value];
  }
  out[':authority'] ??= hostPort(local);
  // gRPC servers want it (it says the path carries trailers), and it is the only TE HTTP/2 allows.
  out.te = 'trailers';
  return out;
}

/** Node's header object as flat [name, value, ...] without pseudo-headers; repeats in order. */
function flatFields(h: IncomingHttpHeaders): string[] {
  const out: string[] = [];
  for (const [name, value] of Object.entries(h)) {
    if (name.startsWith(':') || value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) out.push(name, v);
    else out.push(name, String(value));
  }
  return out;
}
