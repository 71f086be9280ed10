import type { ProblemCode } from '../errors.js';
import { CreditMeter, SendWindow, type Source } from '../protocol/flow-control.js';
import type { HttpHead, ResetCode, ResponseHead } from '../protocol/frames.js';
import { hostOnlyCookie, requestHeaders, tunnelResponseHeaders, tunnelTrailers } from '../protocol/http-headers.js';
import type { ClientAddress } from '../http/client-address.js';
import type { RequestHead } from '../protocol/http1-parser.js';
import { FrontConnection, type Exchange } from './front-connection.js';
import type { VisitorAnswer, VisitorConnection } from './visitor-port.js';
import type { Downstream, Upstream } from './stream.js';
import type { Finishing, VisitorLimit } from './visitor-limit.js';
import { countHttpAnswer } from './metrics.js';
import { visitorBuffers, type BufferHolder } from './visitor-buffers.js';
import { addressGroup } from '../protocol/cidr.js';

// Public HTTP ingress: one visitor request for <id>.<domain>, parsed by the front.
//
//   FrontConnection ─body/end─▶ TunnelVisitor ─Upstream─▶ TunnelStream (tunnel on this shard, or its lane)
//                                            └─▶ MeshUpstream (tunnel on another shard, edge/mesh.ts)
//   visitor socket ◀─VisitorResponse◀─ TunnelVisitor ◀─Downstream── response head, Data, End
//
// The client is untrusted: its answer is parsed again by llhttp (TunnelStream) before a byte
// reaches the visitor, hop-by-hop fields and a second length are dropped or refused here, and
// VisitorResponse frames the body itself, so no client can end a response early or smuggle a
// second one into a connection a load balancer shares.
// After a 101 to a WebSocket (or other) upgrade the stream is a byte relay both ways.
// Flow control (protocol/flow-control.ts): a SendWindow stops reading the visitor's socket when
// the stream's credit runs out; a CreditMeter reports response bytes consumed once the socket
// took them (write() under its high-water mark, or at 'drain'). What a socket buffers meanwhile
// counts toward the shard's budget (visitor-buffers.ts): under pressure the meter keeps credit
// back, so every window shrinks; past the budget new requests are answered 503.

/** Finds where a request for `tunnelId` goes: an Upstream, or null (unknown tunnel). */
export type OpenUpstream = (tunnelId: string, head: HttpHead, down: TunnelVisitor) => Upstream | null;

const RESET_STATUS: Record<ResetCode, [ProblemCode, string]> = {
  'local-unreachable': ['bad-gateway', 'the tunnel client could not reach its local service'],
  'local-invalid': ['bad-gateway', 'the local service sent an invalid response'],
  'local-timeout': ['gateway-timeout', 'the local service did not answer in time'],
  'visitor-gone': ['bad-gateway', 'the request was abandoned'],
  protocol: ['bad-gateway', 'the tunnel client broke the protocol'],
  closing: ['bad-gateway', 'the tunnel client went away'],
  'no-tunnel': ['not-found', 'no tunnel is registered for this host'],
  busy: ['unavailable', 'the tunnel has too many open requests'],
};

export class TunnelVisitor implements Downstream, Exchange, Finishing, Source, BufferHolder {
  up: Upstream | null = null;
  onDone: (() => void) | null = null;
  /** The per-visitor limit's count this request holds (visitor-limit.ts), given back at finish. */
  heldBy: VisitorLimit | null = null;
  heldKey = '';
  private over = false;
  /** The visitor's request was read whole or given up: its body no longer flows (credit no longer matters). */
  private requestEnded = false;
  /** After the 101: raw bytes both ways on the detached socket. */
  private relaying = false;
  /** Relay half-closes: the visitor's FIN (sent on as End), the client's End (sent on as FIN). */
  private visitorEnded = false;
  private peerEnded = false;
  private readonly window: SendWindow;
  private readonly meter = new CreditMeter(this);
  /** Bytes the socket buffers for this visitor, counted in the shard's budget until 'drain' (or the close). */
  private parked = 0;
  /** Among the shard's holders (visitor-buffers.ts) since it first parked bytes, until it finishes. */
  private enlisted = false;
  /** The client's address (set by serveVisitor); its group is worked out only once bytes are held. */
  clientIp = '';
  private groupOf: string | null = null;
  /** The client's address group, whose share of the budget its bytes count in. */
  get group(): string {
    return (this.groupOf ??= addressGroup(this.clientIp));
  }
  private readonly onDrain = (): void => {
    if (this.parked > 0) visitorBuffers.release(this.group, this.parked);
    this.parked = 0;
    this.meter.drained();
    this.meter.holdBack(visitorBuffers.creditHeld);
  };
  /** A request that can be sent again (no body, no upgrade): how to open it anew (serveVisitor). */
  private againOpen: OpenUpstream | null = null;
  private againId = '';
  private againHead: HttpHead | null = null;
  private retriesLeft = 0;
  /** A response head came: the request is never sent again. */
  private answered = false;
  /** Why its first stream ended, when it was sent again. */
  private vanishedWith: ResetCode | null = null;

  constructor(
    private readonly conn: VisitorConnection,
    private readonly res: VisitorAnswer,
    private readonly request: RequestHead,
    /** The tunnel's public host (no port), for Set-Cookie's Domain rule. */
    private readonly tunnelHost: string,
  ) {
    this.window = new SendWindow(this);
    conn.drainListener = this.onDrain;
  }

  // ---- Source: the request's credit window pauses the visitor ----
  // Before a 101 the connection reads the request body; after it, the raw socket is ours.
  pause(): void {
    if (this.relaying) this.conn.socket.pause();
    else if (!this.requestEnded) this.conn.setCreditBlocked(true);
  }
  resume(): void {
    if (this.relaying) this.conn.socket.resume();
    else if (!this.requestEnded) this.conn.setCreditBlocked(false);
  }

  /** Sends a bodiless request again, to another member if there is one; false when it cannot. */
  private retry(): boolean {
    if (this.againOpen === null || this.retriesLeft-- <= 0) return false;
    // The carrier of a new stream sets onDone afresh: what was chained to it (a pool's load
    // count) still runs once the stream is done.
    const chained = this.onDone;
    const up = this.againOpen(this.againId, this.againHead!, this);
    if (!up) return false;
    const carrier = this.onDone;
    if (carrier !== chained) {
      this.onDone = () => {
        carrier?.();
        chained?.();
      };
    }
    this.up = up;
    return true;
  }

  /** serveVisitor: the request may be sent again (it has no body) if its member vanishes. */
  mayRetry(tunnelId: string, head: HttpHead, open: OpenUpstream): void {
    this.againOpen = open;
    this.againId = tunnelId;
    this.againHead = head;
    this.retriesLeft = MAX_RETRIES;
  }

  get ended(): boolean {
    return this.over;
  }

  // ---- Exchange: the visitor's request ----
  // The body still goes on once the answer is complete (a local service may answer before it
  // read an upload): the client must finish writing the request, or its connection to the
  // local service would carry the rest as the start of the next request.
  requestBody(chunk: Buffer): void {
    if (this.requestEnded || !this.up) return;
    this.up.data(chunk);
    this.window.spend(chunk.byteLength);
  }

  requestEnd(): void {
    if (this.requestEnded) return;
    this.requestEnded = true;
    // A bodiless request's head said so (HttpHead.end): no End frame.
    if (this.up && this.request.hasBody) this.up.end();
  }

  /** An upgrade request: the head went; what follows the 101 is relayed from `rest` on. */
  upgraded(rest: Buffer): void {
    this.conn.detach();
    const socket = this.conn.socket;
    // Until the answer, bytes wait in the socket (a visitor sends nothing before the 101).
    socket.pause();
    if (rest.byteLength > 0) socket.unshift(rest);
    socket.on('end', () => {
      if (!this.relaying || this.visitorEnded) return;
      this.visitorEnded = true;
      this.up?.end();
      if (this.peerEnded) this.finish();
    });
  }

  abort(): void {
    const wasRequestOpen = !this.requestEnded;
    this.requestEnded = true;
    // A visitor gone before its request ended, or before its answer: the stream is reset.
    if (this.over && !wasRequestOpen) return;
    this.finish();
    this.up?.reset('visitor-gone');
  }

  // ---- Downstream: tunnel → visitor ----
  /** The meter's report: request bytes the local side took, as credit toward the client. */
  reportCredit(bytes: number): void {
    this.up?.credit(bytes);
  }

  credit(bytes: number): void {
    this.window.grant(bytes);
  }

  response(head: ResponseHead): void {
    if (this.over || this.res.started) return;
    this.answered = true;
    // The head was parsed by llhttp in strict mode (TunnelStream): tokens, values and status are
    // checked there; what remains is what a visitor must not get from a tunnel.
    const filtered = tunnelResponseHeaders(head.headers, this.tunnelHost);
    if (typeof filtered === 'string') return this.problem('bad-gateway', `the tunnel's local service sent an invalid response: ${filtered}`, 'protocol');
    if (head.status === 101) {
      if (!this.request.upgrade) return this.problem('bad-gateway', "the tunnel's local service switched protocols on a plain request", 'protocol');
      return this.switchProtocols(head.headers);
    }
    if (head.status < 200) {
      if (head.status === 100 && this.request.expectContinue) this.res.interim(100, []);
      return;
    }
    // An upgrade the local service declined: the connection cannot go on as HTTP after it.
    if (this.request.upgrade) this.res.closeAfter();
    countHttpAnswer(head.status, this.request.protocol);
    this.res.head(head.status, filtered.headers, filtered.contentLength);
    if (this.res.finished) this.finish();
  }

  /**
   * 101: the origin's own head goes out (Upgrade, Sec-WebSocket-Accept…), then raw bytes. Its
   * Set-Cookie follows the same host-only rule as any other answer's: a Domain of the base
   * domain would reach every tunnel and the API host.
   */
  private switchProtocols(headers: string[]): void {
    countHttpAnswer(101, this.request.protocol);
    const socket = this.conn.socket;
    let text = 'HTTP/1.1 101 Switching Protocols\r\n';
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i]!;
      const value = name.length === 10 && name.toLowerCase() === 'set-cookie' ? hostOnlyCookie(headers[i + 1]!, this.tunnelHost) : headers[i + 1]!;
      text += `${name}: ${value}\r\n`;
    }
    this.res.started = true;
    this.relaying = true;
    this.conn.write(text + '\r\n');
    socket.on('data', (b: Buffer) => {
      if (this.over || this.visitorEnded) return;
      this.up?.data(b);
      this.window.spend(b.byteLength);
    });
    socket.resume();
  }

  data(bytes: Uint8Array): void {
    if (this.over) {
      // Still return the credit so the client's window does not leak.
      this.meter.accepted(bytes.byteLength);
      return;
    }
    if (this.relaying) {
      this.wrote(bytes.byteLength, this.conn.write(bytes));
      return;
    }
    this.wrote(bytes.byteLength, this.res.body(bytes));
    if (this.res.finished) this.finish();
  }

  /** `n` bytes went to the socket; `taken`: under its high-water mark (else they wait for 'drain'). */
  private wrote(n: number, taken: boolean): void {
    this.meter.wrote(n, taken);
    if (!taken) {
      this.parked += n;
      visitorBuffers.hold(this.group, n);
      if (!this.enlisted) {
        this.enlisted = true;
        visitorBuffers.enlist(this);
      }
      // The shard's ceiling: no room left to wait for slow visitors; the latest ones are cut off
      // (this one, or others that came after it).
      if (visitorBuffers.overCeiling) {
        visitorBuffers.shed();
        if (this.over) return;
      }
    }
    this.meter.holdBack(visitorBuffers.creditHeld);
  }

  get parkedBytes(): number {
    return this.parked;
  }

  /** The ceiling's choice: disconnected, its bytes given back now (not at the close) so the others see the room. */
  cutOff(): void {
    if (this.parked > 0) visitorBuffers.release(this.group, this.parked);
    this.parked = 0;
    this.enlisted = false;
    visitorBuffers.leave(this);
    // The answer's own abort: an HTTP/2 stream's destroy() would be RST_STREAM(NO_ERROR), which a
    // visitor takes for the end of a complete (short) answer.
    if (this.relaying) this.conn.socket.destroy();
    else this.res.abort();
    this.abort();
  }

  end(trailers?: string[]): void {
    if (this.over) return;
    if (this.relaying) {
      if (this.peerEnded) return;
      this.peerEnded = true;
      this.conn.endSocket();
      if (this.visitorEnded) this.finish();
      return;
    }
    if (!this.res.started) return this.problem('bad-gateway', 'the local service sent no response', 'protocol');
    this.res.end(trailers && this.res.carriesTrailers ? tunnelTrailers(trailers) : undefined);
    this.finish();
  }

  reset(code: ResetCode, vanished = false): void {
    if (this.over) return;
    // The member it went to vanished before answering (its connection or node went, or it left):
    // a request without a body is sent again, of another member if there is one: always when no
    // tunnel took it, else only when its method is idempotent (it may have reached the service).
    if (vanished && !this.res.started && !this.answered && (code === 'no-tunnel' || IDEMPOTENT.has(this.request.method))) {
      this.vanishedWith ??= code;
      if (this.retry()) return;
    }
    // Sent again and found nothing: the visitor hears why the first attempt ended.
    if (code === 'no-tunnel' && this.vanishedWith !== null) code = this.vanishedWith;
    if (!this.res.started) {
      // Codes are checked at decode; a code of a newer peer still answers 502.
      const [problem, detail] = RESET_STATUS[code] ?? RESET_STATUS.protocol;
      this.problem(problem, detail, null);
      return;
    }
    this.finish();
    if (this.relaying) this.conn.socket.destroy();
    else this.res.abort();
  }

  /** Answers a short problem (404 unknown tunnel, 502, 504); `resetWith` tells the stream, if any. */
  problem(code: ProblemCode, detail: string, resetWith: ResetCode | null = 'visitor-gone'): void {
    if (this.over || this.res.started) return;
    if (this.request.upgrade) this.res.closeAfter();
    // A browser (its Accept prefers text/html) gets an HTML page.
    this.res.problem(code, detail, { html: FrontConnection.wantsHtml(this.request) });
    countHttpAnswer(this.res.status, this.request.protocol);
    this.finish();
    if (resetWith) this.up?.reset(resetWith);
  }

  private finish(): void {
    if (this.over) return;
    this.over = true;
    const socket = this.conn.socket;
    if (this.conn.drainListener === this.onDrain) this.conn.drainListener = null;
    if (this.enlisted) {
      this.enlisted = false;
      visitorBuffers.leave(this);
    }
    // The answer's last bytes may still wait in the socket: counted until they leave or it closes.
    const parked = this.parked;
    this.parked = 0;
    if (parked > 0) {
      const group = this.group;
      if (socket.destroyed) visitorBuffers.release(group, parked);
      else {
        const free = (): void => {
          socket.off('drain', free);
          socket.off('close', free);
          visitorBuffers.release(group, parked);
        };
        socket.on('drain', free);
        socket.on('close', free);
      }
    }
    this.onDone?.();
    const limit = this.heldBy;
    if (limit !== null) {
      this.heldBy = null;
      limit.release(this.heldKey);
    }
  }
}

/**
 * Builds the head toward the client and opens the stream. `dropAuthorization`: the header held
 * the tunnel's basic-auth password (edge/access.ts), which the client and local service never see.
 */
export function serveVisitor(visitor: TunnelVisitor, request: RequestHead, client: ClientAddress, tunnelId: string, open: OpenUpstream, dropAuthorization: boolean): void {
  const raw = dropAuthorization ? withoutAuthorization(request.headers) : request.headers;
  const head: HttpHead = {
    kind: 'http',
    method: request.method,
    target: request.target,
    headers: requestHeaders(raw, client, request.upgrade, request.host),
    upgrade: request.upgrade,
    end: !request.hasBody && !request.upgrade,
  };
  // Only HTTP/2 streams carry it (the inspector shows it); an HTTP/1.1 head keeps its shape.
  if (request.protocol !== undefined) head.protocol = request.protocol;
  // Past the budget of bytes held for slow visitors, a new answer to one of them would only add to it.
  visitor.clientIp = client.ip;
  if (visitorBuffers.full && visitorBuffers.refuses(visitor.group)) return visitor.problem('unavailable', 'the server holds as much as it can for visitors that read slowly right now; read the answers you asked for, or try again shortly', null);
  const up = open(tunnelId, head, visitor);
  if (!up) return visitor.problem('not-found', `no tunnel is registered for "${tunnelId}"`, null);
  visitor.up = up;
  if (head.end) visitor.mayRetry(tunnelId, head, open);
}

/** How often a bodiless request whose member vanished before answering is sent again. */
const MAX_RETRIES = 2;
/** RFC 9110 section 9.2.2: sending these again has the effect of sending them once. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

function withoutAuthorization(headers: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!;
    if (name.length === 13 && name.toLowerCase() === 'authorization') continue;
    out.push(name, headers[i + 1]!);
  }
  return out;
}
