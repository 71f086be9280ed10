import type { Socket } from 'node:net';
import { ApiError, assertNever, type ProblemCode } from '../errors.js';
import { scopeAllows } from '../protocol/roles.js';
import { WsConnection, websocketAccept } from '../protocol/ws-connection.js';
import { WS_CLOSE } from '../protocol/ws-frames.js';
import { headerOf, type Exchange, type FrontConnection } from './front-connection.js';
import type { RequestHead } from '../protocol/http1-parser.js';
import type { VisitorResponse } from './visitor-response.js';
import type { Principal } from '../protocol/messages.js';
import type { StatsDelta } from '../protocol/tunnel-messages.js';
import type { Logger } from '../log.js';
import { burrowVersion } from '../version.js';
import type { HandshakeGate } from './handshake-gate.js';
import { TokenBucket } from '../protocol/token-bucket.js';
import { addressGroup } from '../protocol/cidr.js';
import {
  F, dataHeadOf, rawStreamOpenFrame, PROTOCOL_VERSION, MAX_FRAME_BYTES, MAX_DATA_BYTES, MAX_RETRY_AFTER_MS, MAX_STREAMS_PER_CONNECTION, MAX_TUNNELS_PER_CONNECTION,
  HELLO_TIMEOUT_MS, RESUME_HEADER, TICKET_REFRESH_HEADER, FrameError, decodeFrame, encodeFrame, dataFrame,
  type Frame, type Opened, type OpenRequest, type Refusal, type ResetCode, type StreamHead,
} from '../protocol/frames.js';
import type { StreamCarrier, TunnelActor, TunnelStream } from './tunnel.js';
import type { ShardContext, TicketMinter } from './shard-context.js';

// The control WebSocket `GET /tunnel/v1/connect` (one per `burrow` client), upgraded by the
// front itself (protocol/ws-connection.ts on the visitor socket).
//
//   upgrade: Bearer key → ctx.authenticate → scope `tunnels` (401/403 before upgrading)
//   open → wait for Hello (HELLO_TIMEOUT_MS) → Welcome → Open* → TunnelActors (shard.ts)
//   every frame: decodeFrame (shape-checked); a malformed one closes this connection only
//
// A ControlConnection is the StreamCarrier of its tunnels: it numbers streams, turns stream
// calls into frames and routes the client's frames back to the streams.

/** What the control connection needs from the shard. */
export interface ControlHost {
  ctx: ShardContext;
  log: Logger;
  /** Registers a tunnel (registry admission, TCP listener); answers Opened or throws ApiError. */
  open(conn: ControlConnection, req: OpenRequest): Promise<Opened>;
  /** Bumped by every endConnections (revoke, deactivation) on this shard. */
  revocations(): number;
  /** The client gave a tunnel up, or the connection ended: forget it and report. */
  ended(actor: TunnelActor, last: StatsDelta | null): void;
  /** The client gave a tunnel up while streams were open: no new stream reaches it; ended() follows when they are done. */
  leaving(actor: TunnelActor): void;
  connections: Set<ControlConnection>;
  /** The same connections by user id, for the per-user bound on unread output. */
  connectionsByUser: Map<string, Set<ControlConnection>>;
  /** True once the shard drains (shutdown): new control connections are refused. */
  draining?: () => boolean;
  /** Bounds the handshakes in progress: a reconnect storm is shed with 503 (handshake-gate.ts). */
  handshakes: HandshakeGate;
  /** cluster: this node's URL and the other live nodes' (Welcome), else null */
  nodes?: () => { node: string; nodes: string[] } | null;
}

/** Told to clients in Welcome (their status screens show it). */
const SERVER_VERSION = burrowVersion();
const WS_NORMAL = 1000;
const WS_GOING_AWAY = 1001;
const WS_PROTOCOL_ERROR = 1002;
const WS_POLICY = 1008;
/** setTimeout's longest wait (2^31-1 ms, ~24.8 days); a key expiring later re-arms. */
const MAX_TIMER_MS = 2_147_483_647;
const WS_INTERNAL_ERROR = 1011;
/** Longest a tunnel its client closed may take to finish its open streams. */
const LEAVE_TIMEOUT_MS = 30_000;
/** How long the registry may take to count a new control connection. */
const ADMIT_TIMEOUT_MS = 10_000;
/**
 * Frames the client has not read yet, counted as ws.unreadCost (bytes and a cost per queued
 * chunk). Each stream's request bytes are bounded by its 2 MiB window, so a slow but reading
 * client may hold several windows (16 concurrent 1 MiB uploads over TLS must pass); one that
 * stopped reading must not keep what visitors send for it. Past STALLED_UNREAD_BYTES the edge
 * stops reading the connection (whatever the client sends then waits in its kernel buffers),
 * and the client must read half of it within STALL_MS; past MAX_UNREAD_BYTES the connection is
 * closed at once: long before the heartbeat (3 intervals) would notice.
 */
const STALLED_UNREAD_BYTES = 4 * 1024 * 1024;
const STALL_MS = 2_000;
const MAX_UNREAD_BYTES = 24 * 1024 * 1024;
/**
 * All the control connections of one user on this shard together: 32 connections of one user
 * that each stay under the per-connection bounds must not hold 32 of them. Summed only for a
 * connection that already holds USER_CHECK_FROM_BYTES, so the common write pays one comparison.
 */
const MAX_USER_UNREAD_BYTES = 32 * 1024 * 1024;
const USER_CHECK_FROM_BYTES = 1024 * 1024;
/**
 * Frames that cost the edge an answer (Ping, Open, Close, and WebSocket Pings): a client sends a
 * Ping every few seconds and one Open per tunnel when it connects (at most 64). A peer that
 * sends them faster is closed: each answer is output a non-reading peer makes the edge keep.
 */
const ANSWERED_FRAMES_BURST = 256;
const ANSWERED_FRAMES_PER_S = 32;

export class ControlConnection implements StreamCarrier {
  readonly tunnels = new Map<string, TunnelActor>();
  /** tunnels the client closed whose streams are still finishing (F.Close) */
  private readonly leaving = new Set<TunnelActor>();
  private readonly streams = new Map<number, TunnelStream>();
  private nextSid = 1;
  private helloDone = false;
  private closed = false;
  /** Opens waiting for admission: they count toward MAX_TUNNELS_PER_CONNECTION. */
  private admitting = 0;
  private expiryTimer: NodeJS.Timeout | null = null;
  /** It counts toward the user's --max-connections-per-user (until it ends or becomes a lane). */
  private counted = true;
  lastSeenMs = Date.now();
  private readonly helloTimer: NodeJS.Timeout;
  /** One frame to the socket (WsConnection joins a loop turn's frames in one write). */
  private write(bytes: Uint8Array): boolean {
    this.ws.send(bytes);
    const unread = this.ws.unreadCost;
    if (unread < USER_CHECK_FROM_BYTES) return true;
    if (unread > MAX_UNREAD_BYTES) {
      this.fail('the client does not read its control connection');
      return false;
    }
    if (this.userUnreadCost() > MAX_USER_UNREAD_BYTES) {
      this.fail(`the user's clients do not read their control connections (over ${MAX_USER_UNREAD_BYTES >> 20} MiB unread on this server thread)`);
      return false;
    }
    if (unread > STALLED_UNREAD_BYTES) this.armStall();
    return true;
  }

  /** The client must read half of what waits within STALL_MS, or the connection ends. */
  private armStall(): void {
    if (this.stallTimer) return;
    this.stallTimer = setTimeout(() => {
      this.stallTimer = null;
      if (this.ws.unreadCost > STALLED_UNREAD_BYTES / 2) this.fail('the client does not read its control connection');
    }, STALL_MS);
    this.stallTimer.unref();
  }

  private disarmStall(): void {
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
  }

  private userUnreadCost(): number {
    let sum = 0;
    for (const c of this.host.connectionsByUser.get(this.principal.userId) ?? []) sum += c.ws.unreadCost;
    return sum;
  }

  /** Armed while over STALLED_UNREAD_BYTES wait (or reads are paused); reading half of it disarms it. */
  private stallTimer: NodeJS.Timeout | null = null;
  private readonly answerBudget: TokenBucket;

  constructor(
    readonly ws: WsConnection,
    private readonly host: ControlHost,
    readonly principal: Principal,
    readonly ip: string,
    /** Handed to the client in Welcome, for its next handshake. */
    private readonly resumeTicket: string | null,
    /** Shared with the WebSocket, which spends it on Pings (answeredFramesBudget()). */
    budget: TokenBucket = answeredFramesBudget(),
  ) {
    this.helloTimer = setTimeout(() => {
      if (!this.helloDone) this.fatal({ code: 'bad-request', message: `no hello within ${HELLO_TIMEOUT_MS} ms`, permanent: false });
    }, HELLO_TIMEOUT_MS);
    this.armExpiry();
    this.answerBudget = budget;
    ws.on('readsPaused', () => this.armStall());
    ws.on('readsResumed', () => this.disarmStall());
    ws.on('drain', () => this.disarmStall());
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** The key's expiry ends the connection like a revoke (a cached key would be refused then too). */
  private armExpiry(): void {
    const at = this.principal.keyExpiresAtMs;
    if (at === null) return;
    this.expiryTimer = setTimeout(() => {
      if (Date.now() < at) return this.armExpiry();
      this.revoke(`the API key expired at ${new Date(at).toISOString()}`);
    }, Math.min(Math.max(0, at - Date.now()), MAX_TIMER_MS));
    this.expiryTimer.unref();
  }

  // ---- sending ----
  private sendRaw(bytes: Uint8Array): void {
    if (this.closed) return;
    this.write(bytes);
  }
  send(frame: Frame): void {
    this.sendRaw(encodeFrame(frame));
  }

  /** The client said in Hello that it writes request heads as bytes (HttpHead.raw). */
  private rawHeads = false;

  openStream(stream: TunnelStream, head: StreamHead): boolean {
    if (this.closed || this.streams.size >= MAX_STREAMS_PER_CONNECTION) return false;
    const sid = this.nextSid++;
    stream.sid = sid;
    this.streams.set(sid, stream);
    // A client that writes heads as bytes gets them so (src/protocol/raw-head.ts).
    if (this.rawHeads && head.kind === 'http' && head.raw === undefined) this.sendRaw(rawStreamOpenFrame(sid, stream.tunnel.id, head));
    else this.send([F.StreamOpen, sid, stream.tunnel.id, head]);
    return true;
  }
  sendData(sid: number, bytes: Uint8Array): void {
    for (let off = 0; off < bytes.byteLength; off += MAX_DATA_BYTES) {
      const part = off === 0 && bytes.byteLength <= MAX_DATA_BYTES ? bytes : bytes.subarray(off, off + MAX_DATA_BYTES);
      this.sendRaw(dataFrame(sid, part));
    }
  }
  sendEnd(sid: number): void {
    this.send([F.End, sid]);
  }
  sendReset(sid: number, code: ResetCode): void {
    this.send([F.Reset, sid, code]);
  }
  sendCredit(sid: number, bytes: number): void {
    this.send([F.Credit, sid, bytes]);
  }
  sendClosed(tunnelId: string, why: Refusal): void {
    this.send([F.Closed, tunnelId, why]);
    // A revoke's API answer follows (main thread, other socket): the client hears first.
    this.ws.flush();
  }
  forget(sid: number): void {
    this.streams.delete(sid);
  }
  /** Open streams (GET /readyz?detail=1). */
  get streamCount(): number {
    return this.streams.size;
  }

  violated(sid: number, why: string): void {
    this.host.log.warn({ ip: this.ip, sid, why }, 'tunnel client broke the protocol on a stream: stream reset');
  }

  /**
   * A handler threw on something the peer sent (a bug of ours that validation missed): this
   * connection ends, logged with the error; the shard and every other connection go on.
   */
  fault(err: unknown): void {
    this.host.log.error({ err, ip: this.ip }, 'control connection handler failed: closing the connection');
    if (this.closed) return;
    try {
      this.fatal({ code: 'internal', message: 'the server failed to handle a frame', permanent: false }, WS_INTERNAL_ERROR);
    } catch {
      // The socket is the broken part: the close handler (or the heartbeat) ends the rest.
      this.closed = true;
    }
  }

  /** The live stream `sid`; a never-opened id ends the connection (late frames of a finished one are normal). */
  private stream(sid: number): TunnelStream | undefined {
    const s = this.streams.get(sid);
    if (!s && (sid === 0 || sid >= this.nextSid)) {
      this.fatal({ code: 'bad-request', message: `stream ${sid} was never opened`, permanent: false }, WS_PROTOCOL_ERROR);
    }
    return s;
  }

  // ---- receiving ----
  /** One frame. Whatever it drives (streams, visitors, the mesh) runs inside this call: an
   * exception ends this connection, never the shard (uncaught, it would crash the worker). */
  receive(message: Buffer, more?: Buffer[]): void {
    try {
      if (more) this.onPieces(message, more);
      else this.onMessage(message);
    } catch (err) {
      this.fault(err);
    }
  }

  /**
   * A message that came across socket reads (WsConnection splitPayloads): a Data frame's payload
   * goes on in the pieces it arrived in, with no copy; anything else is joined and read whole.
   */
  private onPieces(first: Buffer, more: Buffer[]): void {
    let total = first.byteLength;
    for (const m of more) total += m.byteLength;
    // A payload trickled in many small reads is joined: each piece costs a parse call.
    const d = this.helloDone && !this.closed && more.length <= MAX_DATA_PIECES ? dataHeadOf(first) : null;
    if (d === null || d.headBytes + d.payloadBytes !== total) return this.onMessage(Buffer.concat([first, ...more], total));
    this.lastSeenMs = Date.now();
    const s = this.stream(d.sid);
    if (!s) return;
    if (first.byteLength > d.headBytes) s.onData(first.subarray(d.headBytes));
    for (const m of more) s.onData(m);
  }

  onMessage(message: Buffer): void {
    // What arrived in the same read as the frame that ended us may still be delivered.
    if (this.closed) return;
    const now = Date.now();
    this.lastSeenMs = now;
    let frame: Frame;
    try {
      frame = decodeFrame(message);
    } catch (err) {
      this.host.log.warn({ ip: this.ip, err: (err as Error).message }, 'malformed control frame: closing the connection');
      this.fatal({ code: 'bad-request', message: (err as FrameError).message, permanent: false }, WS_PROTOCOL_ERROR);
      return;
    }
    if (!this.helloDone && frame[0] !== F.Hello) {
      this.fatal({ code: 'bad-request', message: 'the first frame must be a hello', permanent: true }, WS_PROTOCOL_ERROR);
      return;
    }
    const type = frame[0];
    if ((type === F.Ping || type === F.Open || type === F.Close) && !this.answerBudget.take(now)) {
      this.host.log.warn({ ip: this.ip, user: this.principal.userId }, 'control connection sends Ping, Open and Close frames too fast: closing it');
      const message = `more than ${ANSWERED_FRAMES_BURST} Ping, Open and Close frames at once (${ANSWERED_FRAMES_PER_S}/s on average)`;
      this.fatal({ code: 'bad-request', message, permanent: false }, WS_POLICY);
      return;
    }
    switch (frame[0]) {
      case F.Hello:
        this.rawHeads = frame[1].rawHeads === true;
        return this.onHello(frame[1].v);
      case F.Open:
        return void this.onOpen(frame[1], frame[2]).catch((err: unknown) => this.fault(err));
      case F.Close: {
        const t = this.tunnels.get(frame[1]);
        if (!t) return;
        this.tunnels.delete(t.id);
        if (t.streams.size === 0) return this.host.ended(t, t.close(null));
        // Its streams in flight finish first, and no new one reaches it: a pool member (or a
        // client) that leaves cuts no visitor's request. Bounded by LEAVE_TIMEOUT_MS.
        this.leaving.add(t);
        this.host.leaving(t);
        const finish = (): void => {
          clearTimeout(timer);
          this.leaving.delete(t);
          if (!t.closed) this.host.ended(t, t.close(null));
        };
        const timer = setTimeout(finish, LEAVE_TIMEOUT_MS);
        timer.unref();
        t.onIdle = finish;
        return;
      }
      case F.Data:
        return this.stream(frame[1])?.onData(frame[2]);
      case F.End:
        return this.stream(frame[1])?.onEnd();
      case F.Reset:
        return this.stream(frame[1])?.onReset(frame[2]);
      case F.Credit:
        return this.stream(frame[1])?.onCredit(frame[2]);
      case F.Ping:
        return this.send([F.Pong, frame[1]]);
      case F.Pong:
        return;
      case F.Welcome:
      case F.Opened:
      case F.Refused:
      case F.Closed:
      case F.StreamOpen:
      case F.Fatal:
      case F.GoAway:
      case F.Ticket:
        this.fatal({ code: 'bad-request', message: `frame type ${frame[0]} is server-to-client only`, permanent: false }, WS_PROTOCOL_ERROR);
        return;
      default:
        return assertNever(frame);
    }
  }

  private onHello(v: number): void {
    if (this.helloDone) {
      this.fatal({ code: 'bad-request', message: 'a second hello on one connection', permanent: false }, WS_PROTOCOL_ERROR);
      return;
    }
    if (v !== PROTOCOL_VERSION) {
      const what = v < PROTOCOL_VERSION ? 'upgrade the burrow client' : 'upgrade burrowd (the server)';
      this.fatal({ code: 'version', message: `protocol version ${v} is not supported (server speaks ${PROTOCOL_VERSION}): ${what}`, permanent: true }, WS_POLICY);
      return;
    }
    this.helloDone = true;
    clearTimeout(this.helloTimer);
    // Several shards: say which one this is, so the client can open lanes to the others.
    const { workers } = this.host.ctx.config;
    const shard = workers > 1 ? { shard: this.host.ctx.index, shards: workers } : {};
    // A cluster: the other nodes, so the client keeps a connection on one of them too.
    const cluster = this.host.nodes?.() ?? null;
    this.send([F.Welcome, { v: PROTOCOL_VERSION, heartbeatMs: this.host.ctx.config.heartbeatIntervalMs, version: SERVER_VERSION, ...shard, ...(this.resumeTicket ? { resume: this.resumeTicket } : {}), ...(cluster ?? {}) }]);
  }

  private async onOpen(reqId: number, req: OpenRequest): Promise<void> {
    // Admission is asynchronous: Opens still being admitted count, or a burst overshoots.
    if (this.tunnels.size + this.admitting >= MAX_TUNNELS_PER_CONNECTION) {
      const message = `limit reached: at most ${MAX_TUNNELS_PER_CONNECTION} tunnels per connection (open or being admitted)`;
      this.send([F.Refused, reqId, { code: 'bad-request', message, permanent: true }]);
      return;
    }
    this.admitting++;
    try {
      const opened = await this.host.open(this, req);
      if (this.closed) {
        // The connection ended while the registry admitted the tunnel: onClosed ran before
        // adopt(), so nothing else would end it (the registry and a TCP port would keep it).
        const t = this.tunnels.get(opened.id);
        if (t) {
          this.tunnels.delete(t.id);
          this.host.ended(t, t.close(null));
        }
        return;
      }
      this.send([F.Opened, reqId, opened]);
      // A lane serves a tunnel the user already holds a connection for: not counted.
      if (typeof req.lane === 'string') this.uncount();
    } catch (err) {
      if (!(err instanceof ApiError) || err.code === 'internal') this.host.log.error({ err, ip: this.ip }, 'tunnel registration failed');
      if (this.closed) return;
      this.send([F.Refused, reqId, refusalOf(err)]);
    } finally {
      this.admitting--;
    }
  }

  /** Registers a tunnel admitted for this connection (called by the shard after admission). */
  adopt(actor: TunnelActor): void {
    this.tunnels.set(actor.id, actor);
  }

  /** Drop a tunnel from this connection after the shard closed it (delete, takeover). */
  drop(actor: TunnelActor): void {
    if (this.tunnels.get(actor.id) === actor) this.tunnels.delete(actor.id);
  }

  ping(nowMs: number, timeoutMs: number): void {
    if (nowMs - this.lastSeenMs > timeoutMs) {
      this.host.log.info({ ip: this.ip }, 'control connection silent: closing it');
      this.closed = true;
      this.ws.destroy();
      return;
    }
    this.send([F.Ping, nowMs]);
  }

  /** The key or its user lost the right (revoked, expired, deactivated): end for good. */
  revoke(reason: string): void {
    this.fatal({ code: 'unauthorized', message: reason, permanent: true }, WS_POLICY);
  }

  /** Ends the connection after telling the client why. */
  fatal(why: Refusal, code = WS_NORMAL): void {
    if (this.closed) return;
    this.send([F.Fatal, why]);
    this.closed = true;
    this.ws.close(code, truncateUtf8(why.message, 120));
  }

  private fail(reason: string): void {
    if (this.closed) return;
    this.host.log.warn({ ip: this.ip, reason }, 'closing control connection');
    this.closed = true;
    this.ws.destroy();
  }

  private uncount(): void {
    if (!this.counted) return;
    this.counted = false;
    this.host.ctx.main.tell({ type: 'control-disconnect', userId: this.principal.userId });
  }

  /** The socket is gone: end every tunnel (clients reconnect). */
  onClosed(): void {
    this.closed = true;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.uncount();
    clearTimeout(this.helloTimer);
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    // Each tunnel is reported ended even if another one's teardown throws: the registry
    // must not keep a tunnel of a closed connection.
    for (const t of [...this.tunnels.values(), ...this.leaving]) {
      try {
        if (!t.closed) this.host.ended(t, t.close(null));
      } catch (err) {
        this.host.log.error({ err, ip: this.ip, id: t.id }, 'tunnel teardown failed');
      }
    }
    this.tunnels.clear();
    this.leaving.clear();
    this.streams.clear();
  }

  /** Shutdown: tell the client to come back later, then close. */
  goAway(): void {
    this.fatal({ code: 'unavailable', message: 'the server is shutting down', permanent: false }, WS_GOING_AWAY);
  }
}

/** The budget of one control connection's answered frames (its protocol and its WebSocket's Pings). */
export function answeredFramesBudget(): TokenBucket {
  return new TokenBucket(ANSWERED_FRAMES_BURST, ANSWERED_FRAMES_PER_S);
}

export function refusalOf(err: unknown): Refusal {
  if (err instanceof ApiError && err.code !== 'internal') {
    const transient = err.code === 'unavailable';
    const code = (['unauthorized', 'forbidden', 'conflict', 'bad-request', 'not-found', 'unavailable'] as const).find((c) => c === err.code) ?? 'internal';
    // A Retry-After in seconds (a rate limit) travels as retryAfterMs: the client waits it out
    // instead of asking again within its usual second.
    const retryAfterS = transient ? Number(err.headers?.['retry-after']) : NaN;
    const retryAfterMs = Number.isInteger(retryAfterS) && retryAfterS >= 0 ? Math.min(retryAfterS * 1000, MAX_RETRY_AFTER_MS) : undefined;
    return { code, message: err.detail, permanent: !transient, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) };
  }
  return { code: 'internal', message: 'the server failed to register the tunnel', permanent: false };
}

/** RFC 6455 §4.2.2: the accept value proves the server read this handshake. */

/** A close reason fits the close frame (123 bytes): cut on a character boundary. */
function truncateUtf8(s: string, maxBytes: number): string {
  let out = s.slice(0, maxBytes);
  while (Buffer.byteLength(out) > maxBytes) out = out.slice(0, -1);
  return out;
}

/** True when the request is the tunnel control WebSocket's handshake (any non-tunnel Host). */
export function isControlRequest(head: RequestHead): boolean {
  if (!head.upgrade) return false;
  const q = head.target.indexOf('?');
  return (q < 0 ? head.target : head.target.slice(0, q)) === '/tunnel/v1/connect';
}

/** The close codes of a WebSocket that failed (ws-connection.ts closes with them). */
const WS_ERRORS = new Set<number>([WS_CLOSE.ProtocolError, WS_CLOSE.InvalidPayload, WS_CLOSE.Policy, WS_CLOSE.TooBig]);

/**
 * The 101 and the ControlConnection on an admitted handshake's socket. A function of its own,
 * so the listeners it leaves on the connection close over these values only, not over the
 * handshake's scope (its request head, its Authorization header, the FrontConnection).
 */
function openControl(host: ControlHost, socket: Socket, rest: Buffer, key: string, principal: Principal, ip: string, tickets: TicketMinter | null, refresh: boolean): void {
  const accept = websocketAccept(key);
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  const budget = answeredFramesBudget();
  const ws = new WsConnection(socket, rest, MAX_FRAME_BYTES, 'server', { pauseReadsOverBytes: STALLED_UNREAD_BYTES, answerBudget: budget, splitPayloads: true });
  const first = tickets?.() ?? null;
  const control = new ControlConnection(ws, host, principal, ip, first?.ticket ?? null, budget);
  host.connections.add(control);
  const mine = host.connectionsByUser.get(principal.userId) ?? new Set<ControlConnection>();
  host.connectionsByUser.set(principal.userId, mine.add(control));
  const refresher = tickets && first && refresh ? refreshTickets(control, tickets, first.untilMs) : null;
  ws.on('message', (m, more) => control.receive(m, more));
  ws.on('close', (code, reason) => {
    refresher?.stop();
    // Closed by the WebSocket layer itself (a frame it refused, too many Pings): say why.
    if (!control.isClosed && WS_ERRORS.has(code)) host.log.warn({ ip, user: principal.userId, code, reason }, 'closing control connection');
    host.connections.delete(control);
    mine.delete(control);
    if (mine.size === 0 && host.connectionsByUser.get(principal.userId) === mine) host.connectionsByUser.delete(principal.userId);
    try {
      control.onClosed();
    } catch (err) {
      host.log.error({ err }, 'control connection teardown failed');
    }
  });
  socket.resume();
}

/**
 * A fresh ticket in a Ticket frame once half of the last one's life is gone: a connection that
 * outlives its Welcome's ticket (a day) would otherwise come back after a restart with an
 * expired one, and wait for an argon2 verification with every other client. A ticket already
 * bound by its key's expiry is not renewed (the connection ends then anyway).
 */
function refreshTickets(control: ControlConnection, tickets: TicketMinter, firstUntilMs: number): { stop(): void } {
  let timer: NodeJS.Timeout | null = null;
  const arm = (untilMs: number): void => {
    timer = setTimeout(() => {
      const next = tickets();
      if (control.isClosed || Math.floor(next.untilMs / 1000) <= Math.floor(untilMs / 1000)) return;
      control.send([F.Ticket, { resume: next.ticket }]);
      arm(next.untilMs);
    }, Math.min(Math.max(1_000, (untilMs - Date.now()) / 2), MAX_TIMER_MS));
    timer.unref();
  };
  arm(firstUntilMs);
  return { stop: () => timer && clearTimeout(timer) };
}

/**
 * The handshake of a control connection: checked, then the key authenticated (401/403/429
 * answered as problem+json before any upgrade), then 101 and a ControlConnection on the socket.
 */
/** Pieces a Data payload may come in and go on as they are (a 256 KiB frame over 64 KiB reads is 5). */
const MAX_DATA_PIECES = 16;

export function acceptControl(host: ControlHost, conn: FrontConnection, head: RequestHead, res: VisitorResponse): Exchange {
  let gone = false;
  const refuse = (code: ProblemCode, detail: string, headers: Record<string, string> = {}): void => {
    if (gone) return;
    res.closeAfter();
    res.problem(code, detail, { extra: { headers } });
  };
  return {
    requestBody() {},
    requestEnd() {},
    abort() {
      gone = true;
    },
    upgraded(rest: Buffer) {
      conn.detach();
      const socket = conn.socket;
      socket.pause();
      const left = (): void => {
        gone = true;
      };
      socket.once('close', left);
      const key = headerOf(head.headers, 'sec-websocket-key') ?? '';
      if (head.method !== 'GET' || (headerOf(head.headers, 'upgrade') ?? '').toLowerCase() !== 'websocket') {
        return refuse('bad-request', 'the control connection is a WebSocket: GET with Upgrade: websocket');
      }
      if (headerOf(head.headers, 'sec-websocket-version') !== '13') return refuse('bad-request', 'only WebSocket version 13 is spoken here', { 'sec-websocket-version': '13' });
      if (!/^[A-Za-z0-9+/]{22}==$/.test(key)) return refuse('bad-request', 'Sec-WebSocket-Key must be 16 bytes in base64');
      const ip = conn.clientOf(head).ip;
      if (host.draining?.()) return refuse('unavailable', 'the server is shutting down; connect again shortly', { 'retry-after': '1' });
      const authorization = headerOf(head.headers, 'authorization') ?? '';
      const ticket = headerOf(head.headers, RESUME_HEADER) ?? undefined;
      // A client that takes Ticket frames says so; an older one would close on one.
      const refresh = headerOf(head.headers, TICKET_REFRESH_HEADER) === '1';
      // Before any key lookup: shedding must cost less than the work it spares. A key that is
      // cached, already being verified or resumed, or an address that is blocked (429 at
      // once), costs next to nothing and is never shed. A shed counts as a failed
      // authentication of its address, as main's full argon2 queue does: a flood that only
      // ever gets 503 still reaches --auth-failure-limit and 429.
      const shed = (): ApiError => {
        host.ctx.main.tell({ type: 'auth-failure', ip });
        return new ApiError('unavailable', 'too many clients are connecting at once; retry shortly', undefined, { 'retry-after': '1' });
      };
      const cheap = host.ctx.authIsCheap(authorization || undefined, ip, ticket);
      const slot = cheap ? null : host.handshakes.tryEnter(addressGroup(ip));
      if (!cheap && slot === null) {
        const err = shed();
        return refuse(err.code, err.detail, err.headers);
      }
      // Once the key's row is read: a real key's class has places a flood of guesses cannot take.
      const admit = slot === null ? undefined : (known: boolean): void => {
        if (!slot.verify(known)) throw shed();
      };
      // A revoke that lands while the key is being verified, or while main grants the seat,
      // finds no connection to end yet, and the verification may have read the row before it:
      // start again (a fresh read) then. From the last check to the connection's registration
      // nothing but microtasks runs, and a revoke arrives as a message: it cannot slip between.
      const admitted = async (): Promise<Principal> => {
        for (let attempt = 0; attempt < 3; attempt++) {
          const seen = host.revocations();
          const principal = await host.ctx.authenticate(authorization || undefined, ip, ticket, admit);
          if (host.revocations() !== seen) continue;
          if (!scopeAllows('tunnels', principal.scopes)) throw new ApiError('forbidden', 'this key lacks the "tunnels" scope');
          const seat = await host.ctx.main.ask({ type: 'control-connect', userId: principal.userId }, ADMIT_TIMEOUT_MS);
          if (!seat.ok) {
            throw new ApiError('too-many-requests', `limit reached: at most ${seat.limit} control connections per user (max-connections-per-user); close another burrow client first`, undefined, { 'retry-after': '10' });
          }
          if (gone || socket.destroyed) {
            host.ctx.main.tell({ type: 'control-disconnect', userId: principal.userId });
            throw new ApiError('unavailable', 'the client left during the handshake');
          }
          if (host.revocations() === seen) return principal;
          host.ctx.main.tell({ type: 'control-disconnect', userId: principal.userId });
        }
        throw new ApiError('unavailable', 'keys are being revoked on this server right now; try again');
      };
      admitted().finally(() => slot?.leave()).then(
        (principal) => {
          if (host.draining?.()) {
            host.ctx.main.tell({ type: 'control-disconnect', userId: principal.userId });
            return refuse('unavailable', 'the server is shutting down; connect again shortly', { 'retry-after': '1' });
          }
          // From here the WebSocket owns the socket's end: the handshake's listeners, head and
          // FrontConnection would otherwise stay reachable for the connection's whole life.
          socket.off('close', left);
          conn.release();
          openControl(host, socket, rest, key, principal, ip, host.ctx.resumeTickets(authorization, principal), refresh);
        },
        (err: unknown) => {
          // An 'internal' ApiError carries another thread's exception text: logged, not shown.
          if (err instanceof ApiError && err.code !== 'internal') {
            return refuse(err.code, err.detail, err.code === 'unauthorized' ? { 'www-authenticate': 'Bearer', ...err.headers } : err.headers);
          }
          host.log.error({ err }, 'control connection authentication failed');
          refuse('unavailable', 'authentication is unavailable');
        },
      );
    },
  };
}
