import net from 'node:net';
import { encodeProxyV2, type ProxySource } from '../protocol/proxy-header.js';
import { ResponseParser, type RequestHead, type ResponseHead } from '../protocol/http1-parser.js';
import type { Exchange, FrontConnection } from './front-connection.js';
import type { VisitorResponse } from './visitor-response.js';

// The management API, browser login and health answer from this shard's uWS App, which listens
// on a unix socket only: the front hands it each request it parsed, and writes the answer back
// through the same VisitorResponse as tunnel traffic.
//
//   visitor ─▶ FrontConnection ─ApiExchange─▶ unix socket (PROXY v2 header: the client) ─▶ uWS App
//   visitor ◀─ VisitorResponse ◀─ ResponseParser (llhttp) ◀──────────────────────────────────┘
//
// One upstream connection per visitor connection, opened at its first API request and kept
// alive between them; its first bytes are a PROXY v2 header naming the visitor's peer, which
// uWS parses, so the API's client address (limits, logs) is the visitor's.

const CRLF = '\r\n';

export interface ApiTarget {
  /** The uWS App's unix socket. */
  path: string;
  /** Host given to a request that named none (HTTP/1.0). */
  defaultHost: string;
}

/** One kept-alive connection to the uWS App, serving one visitor connection's API requests in order. */
class ApiUpstream {
  readonly socket: net.Socket;
  private readonly parser: ResponseParser;
  /** The exchange whose request went out last (the next answer is its). */
  current: ApiExchange | null = null;
  private responding: ApiExchange | null = null;
  dead = false;

  constructor(target: ApiTarget, proxyHeader: Buffer) {
    // The answer in progress belongs to the exchange current at its head: a Content-Length
    // answer completes the visitor's response with its last byte, and the next pipelined
    // request may begin (become current) before the parser reports this one's end.
    this.parser = new ResponseParser({
      head: (h) => {
        this.responding = this.current;
        this.responding?.onHead(h);
      },
      body: (chunk) => this.responding?.onBody(chunk),
      end: (trailers) => {
        const ex = this.responding;
        this.responding = null;
        if (this.current === ex) this.current = null;
        ex?.onEnd(trailers);
      },
    });
    this.socket = net.connect({ path: target.path });
    this.socket.setNoDelay(true);
    this.socket.write(proxyHeader);
    this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
    this.socket.on('error', () => undefined);
    this.socket.on('close', () => {
      this.dead = true;
      this.parser.close();
      const ex = this.responding ?? this.current;
      this.current = this.responding = null;
      ex?.upstreamLost();
    });
  }

  begin(ex: ApiExchange, method: string): void {
    this.current = ex;
    this.parser.expect(method, false);
  }

  private onData(chunk: Buffer): void {
    let data = chunk;
    while (data.byteLength > 0 && !this.dead) {
      const r = this.parser.execute(data);
      if (r.kind === 'more') return;
      if (r.kind !== 'paused') {
        // uWS answered something llhttp refuses, or switched protocols: nothing sane follows.
        this.socket.destroy();
        return;
      }
      data = data.subarray(r.consumed);
      this.parser.resume();
    }
  }

  close(): void {
    this.dead = true;
    this.socket.destroy();
  }
}

const upstreams = new WeakMap<FrontConnection, ApiUpstream>();
/** Descriptors an upstream holds: its own end and the App's end of the unix socket. */
const UPSTREAM_FDS = 2;

function upstreamOf(conn: FrontConnection, target: ApiTarget): ApiUpstream {
  const known = upstreams.get(conn);
  if (known && !known.dead) return known;
  const socket = conn.socket;
  const source: ProxySource = { ip: conn.peer, port: socket.remotePort ?? 0 };
  const dest: ProxySource = { ip: socket.localAddress ?? '127.0.0.1', port: socket.localPort ?? 0 };
  const up = new ApiUpstream(target, encodeProxyV2(source, dest));
  // Both ends of the unix socket are this process's descriptors (edge/front-limits.ts).
  const limits = conn.terms.limits;
  if (limits) {
    limits.holdFds(UPSTREAM_FDS);
    up.socket.once('close', () => limits.releaseFds(UPSTREAM_FDS));
  }
  upstreams.set(conn, up);
  socket.once('close', () => up.close());
  return up;
}

export class ApiExchange implements Exchange {
  private readonly up: ApiUpstream;
  private readonly chunked: boolean;
  private readonly onDrain = (): void => {
    this.up.socket.resume();
  };

  constructor(
    private readonly conn: FrontConnection,
    private readonly request: RequestHead,
    private readonly res: VisitorResponse,
    target: ApiTarget,
  ) {
    this.up = upstreamOf(conn, target);
    this.chunked = request.chunked;
    this.up.begin(this, request.method);
    this.up.socket.write(serializeHead(request, target.defaultHost), 'latin1');
  }

  requestBody(chunk: Buffer): void {
    if (this.up.dead) return;
    if (this.chunked) this.up.socket.write(`${chunk.byteLength.toString(16)}${CRLF}`, 'latin1');
    this.up.socket.write(chunk);
    if (this.chunked) this.up.socket.write(CRLF, 'latin1');
  }

  requestEnd(trailers: string[]): void {
    if (this.up.dead || !this.chunked) return;
    let text = `0${CRLF}`;
    for (let i = 0; i < trailers.length; i += 2) text += `${trailers[i]}: ${trailers[i + 1]}${CRLF}`;
    this.up.socket.write(text + CRLF, 'latin1');
  }

  abort(): void {
    // The visitor left mid-request: the upstream's framing is broken, so it goes too.
    if (this.up.current === this) this.up.close();
  }

  // ---- the App's answer ----
  onHead(h: ResponseHead): void {
    if (h.status < 200) {
      if (h.status === 100 && this.request.expectContinue) this.res.interim(100, []);
      return;
    }
    if (!h.keepAlive) this.res.closeAfter();
    this.res.head(h.status, withoutFingerprint(h.headers), h.chunked ? null : h.contentLength);
  }

  onBody(chunk: Buffer): void {
    if (!this.res.body(chunk)) {
      // The visitor reads slower than the App answers: stop reading the App until it drains.
      this.up.socket.pause();
      this.conn.socket.once('drain', this.onDrain);
    }
  }

  onEnd(trailers: string[]): void {
    this.res.end(trailers);
  }

  upstreamLost(): void {
    if (!this.res.started) {
      this.res.closeAfter();
      this.res.problem('unavailable', 'the management API is not answering on this server right now; try again');
    } else this.res.abort();
  }
}

/**
 * The request head as the App gets it: the visitor's fields in order, except hop-by-hop ones
 * (the upstream connection is ours), with every X-Forwarded-For line joined into one (uWS reads
 * one line) and the last X-Forwarded-Proto line kept (the nearest proxy's).
 */
function serializeHead(h: RequestHead, defaultHost: string): string {
  let text = `${h.method} ${h.target} HTTP/1.1${CRLF}`;
  let xff: string | null = null;
  let proto: string | null = null;
  let sawHost = false;
  for (let i = 0; i < h.headers.length; i += 2) {
    const name = h.headers[i]!;
    const value = h.headers[i + 1]!;
    switch (name.toLowerCase()) {
      case 'connection':
      case 'keep-alive':
      case 'proxy-connection':
      case 'upgrade':
      case 'te':
        continue;
      case 'x-forwarded-for':
        xff = xff === null ? value : `${xff}, ${value}`;
        continue;
      case 'x-forwarded-proto':
        proto = value;
        continue;
      case 'host':
        if (sawHost) continue;
        sawHost = true;
        text += `${name}: ${h.authority ?? value}${CRLF}`;
        continue;
      default:
        text += `${name}: ${value}${CRLF}`;
    }
  }
  if (!sawHost) text += `Host: ${h.host ?? defaultHost}${CRLF}`;
  if (xff !== null) text += `X-Forwarded-For: ${xff}${CRLF}`;
  if (proto !== null) text += `X-Forwarded-Proto: ${proto}${CRLF}`;
  return text + CRLF;
}

/** uWS writes its name into every answer (compiled in): no server fingerprint leaves the front. */
function withoutFingerprint(headers: string[]): string[] {
  for (let i = 0; i < headers.length; i += 2) {
    if (headers[i]!.toLowerCase() === 'uwebsockets') return [...headers.slice(0, i), ...headers.slice(i + 2)];
  }
  return headers;
}
