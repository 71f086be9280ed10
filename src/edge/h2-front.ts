import http2, { type Http2Server, type ServerHttp2Session, type ServerHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import type { Logger } from '../log.js';
import { TokenBucket } from '../protocol/token-bucket.js';
import { MAX_HEAD_BYTES, type RequestHead } from '../protocol/http1-parser.js';
import type { Exchange } from './front-connection.js';
import { H2Answer, H2StreamCarrier, h2RequestHead, NGHTTP2_NO_ERROR } from './h2-visitor.js';
import type { VisitorAnswer, VisitorConnection } from './visitor-port.js';
import { SendTimeout } from './send-timeout.js';
import { countH2Stream } from './metrics.js';
import type { Socket } from 'node:net';

// HTTP/2 on the public port (RFC 9113), on Node's node:http2 (nghttp2): burrow frames nothing
// and decodes no HPACK itself. The front hands over a connection that negotiated `h2` by ALPN
// (TLS) or opened with the HTTP/2 preface (h2c with prior knowledge, on a plain port); each
// stream is one visitor request, served exactly as an HTTP/1.1 request to the same Host is:
//
//   Front ─socket─▶ H2Front.serve: ServerHttp2Session (nghttp2, the settings below)
//     'stream' ─▶ h2RequestHead (h2-visitor.ts) ─▶ :authority a tunnel's host, covered by the
//                 connection's certificate (else 421) ─▶ tunnels.serve (shard.ts: access rules,
//                 visitor limit, TunnelVisitor) with the stream as carrier and H2Answer as writer
//
// Only tunnel traffic is served over HTTP/2: the API and the control WebSocket stay on HTTP/1.1
// (ALPN offers h2 only for a tunnel's host name; a stream for any other host gets 421, which
// sends a browser to a new HTTP/1.1 connection).
//
// Abuse (CVE-2023-44487 Rapid Reset, CVE-2025-8671 MadeYouReset, CONTINUATION, SETTINGS and PING
// floods, HPACK bombs): nghttp2 bounds the header list, the frames it rejects and the acks it
// queues; on top, each session spends a token for every stream that ends in a reset before its
// answer was complete (whoever sent the RST_STREAM: the visitor's own, or nghttp2's after a frame
// of the visitor's that broke the stream), for every PING and every SETTINGS frame, and a
// session out of tokens gets GOAWAY (ENHANCE_YOUR_CALM) and is closed. A stream costs the
// tunnel client a request: that is what a reset flood aims at, so the budget is counted here.

const { NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

/** A session without a stream closes after this long (the HTTP/1.1 keep-alive's idle timeout). */
const IDLE_TIMEOUT_MS = 60_000;
/** An abuser's session: GOAWAY, then the socket goes after this long whatever it does. */
const GOAWAY_GRACE_MS = 1_000;
/** PINGs and SETTINGS a session may send at once, and per second after that. */
const CONTROL_BURST = 64;
const CONTROL_PER_SECOND = 16;
/** Hosts whose certificate check a session remembers (a browser coalesces a handful). */
const MAX_CHECKED_HOSTS = 64;

/** What the shard's tunnels provide to HTTP/2 streams (a part of shard.ts ShardTunnels). */
export interface H2Tunnels {
  tunnelOf(host: string): string | null;
  serve(conn: VisitorConnection, head: RequestHead, res: VisitorAnswer, id: string): Exchange;
}

export interface H2Options {
  log: Logger;
  tunnels: H2Tunnels;
  /** --h2-max-streams: concurrent streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS). */
  maxStreams: number;
  /** --send-timeout: a session whose socket takes nothing of its answers this long is closed. */
  sendTimeoutMs: number;
}

/** One per shard: serves the HTTP/2 connections its fronts hand over. */
export class H2Front {
  private readonly server: Http2Server;

  constructor(private readonly opts: H2Options) {
    const max = opts.maxStreams;
    this.server = http2.createServer({
      // The head limits of HTTP/1.1 (MAX_HEAD_BYTES, 128 fields): HPACK bombs and CONTINUATION
      // floods end at the same bounds (nghttp2 refuses the stream, then the session).
      maxHeaderListPairs: 128,
      maxSendHeaderBlockLength: MAX_HEAD_BYTES,
      // Frames nghttp2 rejects (invalid ones, streams over the cap) before it ends the session.
      maxSessionInvalidFrames: 64,
      maxSessionRejectedStreams: max,
      maxOutstandingPings: 4,
      maxSettings: 16,
      // MiB of nghttp2's own queues per session (headers, acks, DATA handed to it) before new
      // streams are refused: Node's default, said here so it is a choice.
      maxSessionMemory: 10,
      settings: {
        maxConcurrentStreams: max,
        maxHeaderListSize: MAX_HEAD_BYTES,
        // WebSockets stay on HTTP/1.1: no extended CONNECT (RFC 8441).
        enableConnectProtocol: false,
        enablePush: false,
      },
    });
    this.server.on('session', (session: ServerHttp2Session) => this.adopt(session));
    this.server.on('sessionError', () => undefined);
  }

  /** ALPN: h2 for a tunnel's host name, HTTP/1.1 for everything else (the API, control connections). */
  alpn(servername: string, offered: readonly string[]): string | undefined {
    if (offered.includes('h2') && servername !== '' && this.opts.tunnels.tunnelOf(servername) !== null) return 'h2';
    return offered.includes('http/1.1') ? 'http/1.1' : undefined;
  }

  /** A connection that negotiated h2, or sent the h2c preface (its bytes read so far unshifted). */
  serve(socket: Duplex, peer: string): void {
    // node:http2 makes the session inside this emit ('session', synchronously): adopt() takes
    // the socket and its client from here, since the session itself only shows a proxy of it.
    // A server TLSSocket of our own making still says it is handshaking after 'secure' (Node's
    // tls.Server clears this before 'secureConnection'); node:http2 would wait for a
    // 'secureConnect' that never comes.
    if (socket instanceof tls.TLSSocket) (socket as tls.TLSSocket & { secureConnecting: boolean }).secureConnecting = false;
    this.handing = { socket, peer };
    try {
      this.server.emit('connection', socket);
    } finally {
      this.handing = null;
    }
  }
  private handing: { socket: Duplex; peer: string } | null = null;

  private adopt(session: ServerHttp2Session): void {
    if (!this.handing) return void session.destroy();
    const { socket, peer } = this.handing;
    const budget = new SessionBudget(this.opts.maxStreams);
    const sendTimeout = 'bytesWritten' in socket ? new SendTimeout(socket as Socket, this.opts.sendTimeoutMs) : null;
    const hooks = { wrote: () => sendTimeout?.check() };
    const checked = new Map<string, boolean>();
    const cert = socket instanceof tls.TLSSocket ? socket.getCertificate() : null;
    let open = 0;
    let idle: NodeJS.Timeout | null = null;
    const armIdle = (): void => {
      if (idle) clearTimeout(idle);
      idle = setTimeout(() => session.close(), IDLE_TIMEOUT_MS);
    };
    armIdle();
    let goneAway = false;
    const abuse = (why: string): void => {
      if (goneAway || session.closed || session.destroyed) return;
      goneAway = true;
      this.opts.log.info({ peer, why }, 'h2: session over its budget: GOAWAY');
      session.goaway(NGHTTP2_ENHANCE_YOUR_CALM);
      setTimeout(() => session.destroy(), GOAWAY_GRACE_MS).unref();
    };
    // The visitor's FIN: it sends nothing more, not even WINDOW_UPDATE, so its streams cannot
    // finish. The front keeps a connection half-open for HTTP/1.1 (allowHalfOpen); kept so here,
    // the session went on answering a client that had gone, for seconds, each stream's answer
    // whole (its tunnel streams never reset) while the next visitors' answers waited behind them.
    socket.once('end', () => session.destroy());
    session.on('error', () => undefined);
    session.on('close', () => {
      if (idle) clearTimeout(idle);
      sendTimeout?.stop();
    });
    session.on('ping', () => {
      if (!budget.control.take()) abuse('PING flood');
    });
    session.on('remoteSettings', () => {
      if (!budget.control.take()) abuse('SETTINGS flood');
    });
    session.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, raw: string[]) => {
      open++;
      if (idle) clearTimeout(idle);
      idle = null;
      stream.on('error', () => undefined);
      const answer = new H2Answer(stream, headers[':method'] ?? 'GET', hooks);
      let exchange: Exchange | null = null;
      stream.once('close', () => {
        if (--open === 0 && !session.closed) armIdle();
        // A stream that ended in a reset before its answer did, not by this end's choice.
        if (stream.rstCode !== NGHTTP2_NO_ERROR && !answer.resetHere && !(answer.finished && stream.writableFinished)) {
          if (!budget.resets.take()) abuse('stream resets (Rapid Reset / MadeYouReset)');
        }
        if (exchange && !(answer.finished && stream.writableFinished)) exchange.abort();
        exchange = null;
      });
      const head = h2RequestHead(headers, raw, (flags & http2.constants.NGHTTP2_FLAG_END_STREAM) !== 0 || stream.endAfterHeaders);
      if ('reason' in head) return refuse(answer, head.status === 501 ? 'not-implemented' : 'bad-request', head.reason, stream);
      countH2Stream();
      const id = this.opts.tunnels.tunnelOf(head.host!);
      if (id === null) return refuse(answer, 'misdirected', 'this host is not served over HTTP/2 here; use HTTP/1.1', stream);
      if (cert && !covers(checked, cert, head.host!)) return refuse(answer, 'misdirected', "the connection's certificate does not cover this host; open a new connection", stream);
      exchange = this.opts.tunnels.serve(new H2StreamCarrier(stream, peer), head, answer, id);
      const ex = exchange;
      stream.on('data', (chunk: Buffer) => ex.requestBody(chunk));
      stream.on('end', () => ex.requestEnd([]));
    });
  }
}

/** A short answer of the front's own on a stream; its request body is read and dropped. */
function refuse(answer: H2Answer, code: 'bad-request' | 'not-implemented' | 'misdirected', detail: string, stream: ServerHttp2Stream): void {
  answer.problem(code, detail);
  stream.resume();
}

/** Whether the connection's certificate covers `authority`'s host (RFC 9110 §7.4: else 421). */
function covers(checked: Map<string, boolean>, cert: tls.PeerCertificate | object, authority: string): boolean {
  const host = authority.startsWith('[') ? authority.slice(1, authority.indexOf(']')) : authority.replace(/:\d+$/, '');
  const known = checked.get(host);
  if (known !== undefined) return known;
  const ok = Object.keys(cert).length === 0 || tls.checkServerIdentity(host, cert as tls.PeerCertificate) === undefined;
  if (checked.size < MAX_CHECKED_HOSTS) checked.set(host, ok);
  return ok;
}

/** Per session: resets and control frames it may cause before it is an abuser. */
class SessionBudget {
  /** Streams reset before their answer was done: a browser cancels some, never hundreds a second. */
  readonly resets: TokenBucket;
  readonly control = new TokenBucket(CONTROL_BURST, CONTROL_PER_SECOND);
  constructor(maxStreams: number) {
    this.resets = new TokenBucket(Math.max(2 * maxStreams, 32), Math.max(maxStreams / 2, 8));
  }
}
