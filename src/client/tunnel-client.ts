import { EventEmitter } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { Readable } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import {
  F, PROTOCOL_VERSION, MAX_FRAME_BYTES, MAX_DATA_BYTES, HEARTBEAT_INTERVAL_MS, HEARTBEAT_MISSES,
  RESPONSE_HEAD_TIMEOUT_MS, FrameError, decodeFrame, encodeFrame, dataFrameHead,
  type Frame, type HttpHead, type OpenRequest, type Refusal, type ResetCode, type TcpHead,
} from '../protocol/frames.js';
import { CreditMeter, SendWindow, StreamEnds, type Source } from '../protocol/flow-control.js';
import { responseHeaders } from '../protocol/http-headers.js';
import type { AccessRules } from '../protocol/access.js';
import { guardedExchange, type ExchangeObserver, type TunnelObserver } from './observer.js';
import { verificationProblem } from './tls-verify.js';
import { WsClient, WsRefused } from './ws-client.js';
import { describeLocalError } from './local-error.js';
import { connectOptions, hostPort, localOrigin, withHostHeader, type LocalTarget } from './local-target.js';

export type { AccessRules } from '../protocol/access.js';

// The client half of the tunnel protocol (used by `burrow http|tcp`, src/cli/).
//
//   TunnelClient ──control WebSocket (ws-client.ts)──▶ burrowd
//     Hello → Welcome → Open → Opened{id,url}
//     StreamOpen(http) → http.request to the local service (keep-alive agent) → Response/Data/End
//     StreamOpen(tcp)  → net.connect to the local service → Data/End both ways
//   connection lost / heartbeat silent → reconnect with capped exponential backoff + jitter,
//   re-registering the same id; a permanent refusal (bad key, id taken, deleted) ends it.
//   Several tunnels (`burrow start`): one Open each on the one connection; StreamOpen names the
//   tunnel, whose local service and pools serve the stream; one tunnel refused for good is
//   reported (`tunnel-failed`) while the others run on, and the client ends with the last one.

export interface TunnelClientOptions {
  /** http(s)://host:port of burrowd */
  server: string;
  token: string;
  /** Several tunnels over this one control connection; without it, the fields below are the one tunnel. */
  tunnels?: TunnelOptions[];
  /** names the tunnel in events (a burrow.yml entry's name); default: its type */
  name?: string;
  type?: 'http' | 'tcp';
  /** the local service; `localhost` means both loopback addresses (see local-target.ts) */
  local?: LocalTarget;
  id?: string;
  teamId?: string;
  remotePort?: number;
  /** Access rules the server enforces (basic auth, IP lists, expiry): protocol/access.ts. */
  access?: AccessRules;
  /** The local service as listings show it ("http://localhost:3000"); informational. */
  localLabel?: string;
  /** How long the local service may take to send a response head before the visitor gets 504. */
  responseTimeoutMs?: number;
  /** Told about every HTTP exchange of this tunnel (the request inspector, src/client/inspector/). */
  observer?: TunnelObserver;
  /** PEM certificates to verify an https:// server with (default: the system's CAs). */
  ca?: string[];
}

/** One tunnel of a client: what it asks the server for, and where its streams go. */
export type TunnelOptions = Required<Pick<TunnelClientOptions, 'type' | 'local'>> & Pick<TunnelClientOptions, 'name' | 'id' | 'teamId' | 'remotePort' | 'access' | 'localLabel' | 'observer'>;

export class TunnelRefused extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly permanent: boolean,
    /** the tunnel it concerns (its name), when not the whole connection */
    readonly tunnel?: string,
  ) {
    super(message);
    this.name = 'TunnelRefused';
  }
}

const CONNECT_TIMEOUT_MS = 10_000;
const BACKOFF_FIRST_MS = 250;
const BACKOFF_MAX_MS = 30_000;
const AGENT = `burrow-client/${PROTOCOL_VERSION}`;
/** Connections to the local service at most; further requests wait in the pool (streams are capped per tunnel). */
const MAX_LOCAL_CONNECTIONS = 256;
// Requests with a body take a second, uncapped pool: a visitor that stalls its upload holds its
// local connection until the body ends, and 256 such visitors made every GET of the tunnel queue
// behind them for seconds. Bodiless requests, which never stall on the visitor, keep the capped
// pool to themselves. (The edge bounds streams per connection and requests per visitor IP.)

/** Maps a refused upgrade's HTTP status to a refusal. */
function refusalOfStatus(status: number, body: string): TunnelRefused {
  let detail = body;
  try {
    detail = (JSON.parse(body) as { detail?: string }).detail ?? body;
  } catch {
    /* not problem+json */
  }
  const msg = detail || `the server answered HTTP ${status}`;
  if (status === 401) return new TunnelRefused('unauthorized', msg, true);
  if (status === 403) return new TunnelRefused('forbidden', msg, true);
  if (status === 404) return new TunnelRefused('not-found', `${msg} (is this a burrowd server?)`, true);
  if (status === 429) return new TunnelRefused('too-many-requests', msg, false);
  return new TunnelRefused('unavailable', msg, false);
}

interface Sender {
  send(frame: Frame): void;
  sendData(sid: number, bytes: Uint8Array): void;
}

/**
 * One stream on the client: a visitor's HTTP request or TCP connection toward the local
 * service. Flow control and the end/reset bookkeeping are protocol/flow-control.ts's: the
 * SendWindow pauses the local source (pauseSource/resumeSource), the CreditMeter returns
 * credit for bytes the local service took, StreamEnds finishes the stream once.
 * local = local service → visitor (our End), peer = visitor → local service (the server's End).
 */
abstract class ClientStream implements Source {
  /** Response / TCP bytes we may still send before the server returns credit. */
  protected readonly window = new SendWindow(this);
  protected readonly meter = new CreditMeter((n) => {
    if (!this.ends.done) this.out.send([F.Credit, this.sid, n]);
  });
  protected readonly ends = new StreamEnds(() => this.finished());
  bytesIn = 0;
  bytesOut = 0;
  readonly startedMs = Date.now();
  /** The observer's view of this HTTP exchange (null: nobody observes; it copies ≤ 64 KiB a body). */
  capture: ExchangeObserver | null = null;
  /** The local service gave no answer: its error, or null for a timeout (see local-error.ts). */
  localFailure: { err: Error | null } | null = null;

  constructor(
    readonly sid: number,
    protected readonly out: Sender,
    protected readonly onFinish: (s: ClientStream) => void,
  ) {}

  get done(): boolean {
    return this.ends.done;
  }

  /** Bytes from the server toward the local service. */
  abstract onData(bytes: Buffer): void;
  /** Ends the local service's input (request body end, TCP FIN). */
  protected abstract endDestination(): void;
  /** Tears down the local side's sockets and requests. */
  protected abstract destroy(): void;
  abstract pause(): void;
  abstract resume(): void;

  onCredit(bytes: number): void {
    this.window.grant(bytes);
  }

  /** The server's End: the visitor finished sending. */
  onEnd(): void {
    if (this.ends.endPeer() !== 'ok') return;
    this.endDestination();
    this.ends.settle();
  }

  onReset(code: ResetCode): void {
    this.capture?.fail(code);
    if (!this.ends.finish()) return;
    this.destroy();
  }

  /** The connection is gone: drop everything without reporting (the owner clears its map). */
  abort(): void {
    this.capture?.fail('connection-lost');
    this.ends.finish(false);
    this.destroy();
  }

  /** Bytes from the local service toward the visitor. */
  protected forward(chunk: Buffer): void {
    if (this.ends.done) return;
    this.bytesOut += chunk.length;
    this.capture?.responseBody(chunk);
    this.out.sendData(this.sid, chunk);
    this.window.spend(chunk.length);
  }

  /** The local service finished sending. */
  protected localEnded(): void {
    if (!this.ends.endLocal()) return;
    this.out.send([F.End, this.sid]);
    this.ends.settle();
  }

  protected reset(code: ResetCode): void {
    if (this.ends.done) return;
    this.capture?.fail(code);
    this.out.send([F.Reset, this.sid, code]);
    this.ends.finish();
  }

  protected finished(): void {
    this.capture?.end(); // after a fail, a no-op
    this.onFinish(this);
  }
}

class HttpStream extends ClientStream {
  private readonly req: http.ClientRequest;
  private res: http.IncomingMessage | null = null;
  private upgraded: net.Socket | null = null;
  private status = 0;
  private readonly headTimer: NodeJS.Timeout;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: HttpHead, local: LocalTarget, agent: http.Agent, timeoutMs: number) {
    super(sid, out, onFinish);
    this.req = (local.tls ? https : http).request({
      host: local.host, port: local.port, method: head.method, path: head.target, headers: head.headers, agent: head.upgrade ? false : agent, setHost: false, ...connectOptions(local),
    });
    this.req.on('socket', (s: net.Socket) => s.setNoDelay(true));
    this.headTimer = setTimeout(() => {
      this.localFailure ??= { err: null };
      this.reset('local-timeout');
      this.req.destroy();
    }, timeoutMs);
    this.req.on('error', (err) => {
      clearTimeout(this.headTimer);
      if (!this.res && !this.upgraded) this.localFailure ??= { err };
      this.reset(this.res || this.upgraded ? 'closing' : 'local-unreachable');
    });
    this.req.on('drain', () => this.meter.drained());
    this.req.on('response', (res) => this.onResponse(res));
    this.req.on('upgrade', (res, socket: net.Socket, rest: Buffer) => this.onUpgrade(res, socket, rest));
    // A request without a body (head.end) goes out whole now. An upgrade request has no
    // body either; the visitor's End comes only when it closes the upgraded connection.
    if (head.end && !head.upgrade) {
      this.ends.endPeer();
      this.req.end();
    } else if (head.upgrade) this.req.end();
  }

  private onResponse(res: http.IncomingMessage): void {
    clearTimeout(this.headTimer);
    if (this.done) return void res.destroy();
    this.res = res;
    this.status = res.statusCode ?? 502;
    const headers = responseHeaders(res.rawHeaders);
    this.capture?.response(this.status, headers);
    this.out.send([F.Response, this.sid, { status: this.status, headers }]);
    res.on('data', (chunk: Buffer) => this.forward(chunk));
    res.on('end', () => this.localEnded());
    res.on('error', () => this.reset('closing'));
  }

  /** 101: from now on raw bytes both ways (WebSocket or any other upgraded protocol). */
  private onUpgrade(res: http.IncomingMessage, socket: net.Socket, rest: Buffer): void {
    clearTimeout(this.headTimer);
    if (this.done) return void socket.destroy();
    socket.setNoDelay(true);
    this.upgraded = socket;
    this.status = 101;
    // The upgraded bytes (WebSocket frames) are no HTTP body: the capture ends with the 101.
    this.capture?.response(101, res.rawHeaders);
    this.capture?.end();
    this.capture = null;
    this.out.send([F.Response, this.sid, { status: 101, headers: res.rawHeaders }]);
    if (rest.length) this.forward(rest);
    socket.on('data', (chunk: Buffer) => this.forward(chunk));
    socket.on('drain', () => this.meter.drained());
    socket.on('end', () => this.localEnded());
    socket.on('error', () => this.reset('closing'));
    socket.on('close', () => this.reset('closing'));
  }

  onData(bytes: Buffer): void {
    if (this.done) return;
    this.bytesIn += bytes.length;
    if (!this.upgraded) this.capture?.requestBody(bytes);
    this.meter.wrote(bytes.length, (this.upgraded ?? this.req).write(bytes));
  }
  protected endDestination(): void {
    if (this.upgraded) this.upgraded.end();
    else if (!this.head.upgrade) this.req.end();
  }
  protected destroy(): void {
    clearTimeout(this.headTimer);
    this.upgraded?.destroy();
    this.res?.destroy();
    this.req.destroy();
  }
  pause(): void {
    (this.upgraded ?? this.res)?.pause();
  }
  resume(): void {
    (this.upgraded ?? this.res)?.resume();
  }
  get statusCode(): number {
    return this.status;
  }
  protected override finished(): void {
    clearTimeout(this.headTimer);
    super.finished();
  }
}

/**
 * A plain (non-upgrade) HTTP request on undici's Pool. Measured here against node:http with a
 * keep-alive Agent at 64 concurrent small requests: about 40% less client CPU per request, and
 * the single-threaded client is the busiest process on the tunnel's path.
 */
class PoolHttpStream extends ClientStream {
  private status = 0;
  private resumeSocket: (() => void) | null = null;
  private abortRequest: ((err?: Error) => void) | null = null;
  private readonly body: Readable | null;
  private readonly headTimer: NodeJS.Timeout;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: HttpHead, pool: Pool, timeoutMs: number) {
    super(sid, out, onFinish);
    if (head.end) this.ends.endPeer();
    // Request bodies stream through a Readable: what it buffered is accepted when undici pulls (read()).
    this.body = head.end ? null : new Readable({ read: () => this.meter.drained() });
    this.headTimer = setTimeout(() => {
      this.localFailure ??= { err: null };
      this.reset('local-timeout');
      this.abortRequest?.();
    }, timeoutMs);
    pool.dispatch(
      { path: head.target, method: head.method, headers: head.headers, body: this.body, headersTimeout: 0, bodyTimeout: 0 },
      {
        onConnect: (abort: (err?: Error) => void) => {
          this.abortRequest = abort;
          if (this.done) abort();
        },
        onHeaders: (status: number, raw: Buffer[], resume: () => void) => {
          if (status < 200) return true; // 1xx interim answers are not relayed
          clearTimeout(this.headTimer);
          if (this.done) return false;
          this.status = status;
          this.resumeSocket = resume;
          const headers = responseHeaders(raw.map((b) => b.toString('latin1')));
          this.capture?.response(status, headers);
          this.out.send([F.Response, this.sid, { status, headers }]);
          return true;
        },
        onData: (chunk: Buffer) => {
          this.forward(chunk);
          return !this.window.paused && !this.done;
        },
        onComplete: () => this.localEnded(),
        onError: (err: Error) => {
          clearTimeout(this.headTimer);
          if (!this.status && !this.done) this.localFailure ??= { err };
          this.reset(this.status ? 'closing' : 'local-unreachable');
        },
      } as unknown as Dispatcher.DispatchHandler,
    );
  }

  onData(bytes: Buffer): void {
    if (this.done || !this.body) return;
    this.bytesIn += bytes.length;
    this.capture?.requestBody(bytes);
    this.meter.wrote(bytes.length, this.body.push(bytes));
  }
  protected endDestination(): void {
    this.body?.push(null);
  }
  protected destroy(): void {
    clearTimeout(this.headTimer);
    this.abortRequest?.();
    this.body?.destroy();
  }
  pause(): void {
    // onData's return value pauses the socket; nothing else to do.
  }
  resume(): void {
    this.resumeSocket?.();
  }
  get statusCode(): number {
    return this.status;
  }
  protected override finished(): void {
    clearTimeout(this.headTimer);
    super.finished();
  }
}

/** undici refuses an Expect header (100-continue); such requests take the node:http path. */
function poolCanCarry(head: HttpHead): boolean {
  if (head.upgrade) return false;
  for (let i = 0; i < head.headers.length; i += 2) if (head.headers[i]!.toLowerCase() === 'expect') return false;
  return true;
}

class TcpStream extends ClientStream {
  private readonly sock: net.Socket;
  private connected = false;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: TcpHead, local: LocalTarget) {
    super(sid, out, onFinish);
    this.sock = net.connect({ host: local.host, port: local.port, noDelay: true, allowHalfOpen: true, lookup: connectOptions(local).lookup });
    this.sock.on('connect', () => (this.connected = true));
    this.sock.on('data', (chunk: Buffer) => this.forward(chunk));
    this.sock.on('drain', () => this.meter.drained());
    this.sock.on('end', () => this.localEnded());
    this.sock.on('error', (err) => {
      if (!this.connected && !this.done) this.localFailure ??= { err };
      this.reset(this.connected ? 'closing' : 'local-unreachable');
    });
    // Both directions ended normally: the stream is already done and this is a no-op.
    this.sock.on('close', () => this.reset('closing'));
  }
  onData(bytes: Buffer): void {
    if (this.done) return;
    this.bytesIn += bytes.length;
    this.meter.wrote(bytes.length, this.sock.write(bytes));
  }
  protected endDestination(): void {
    this.sock.end();
  }
  protected destroy(): void {
    this.sock.destroy();
  }
  pause(): void {
    this.sock.pause();
  }
  resume(): void {
    this.sock.resume();
  }
}

export interface TunnelClientEvents {
  /** `tookOver`: this registration closed a live tunnel of the same user that held the id. */
  registered: [{ tunnel: string; id: string; url: string; tookOver: boolean }];
  /** `error`: why the local service gave no answer (the visitor got `status` 502 / 504 from the edge). */
  request: [{ tunnel: string; method: string; path: string; status: number; durationMs: number; bytesIn: number; bytesOut: number; error?: string }];
  connection: [{ tunnel: string; remote: string; durationMs: number; bytesIn: number; bytesOut: number; error?: string }];
  /** streams open on one tunnel (the count, the tunnel's name) */
  'open-streams': [number, string];
  reconnecting: [{ attempt: number; delayMs: number; reason: string }];
  /** One tunnel refused or closed for good; the others run on (`closed` follows when none is left). */
  'tunnel-failed': [{ tunnel: string; code: string; reason: string }];
  closed: [{ permanent: boolean; code: string; reason: string; tunnel?: string }];
  /** The server is shutting down: open streams finish, then the connection closes and we reconnect. */
  draining: [{ timeoutMs: number }];
}

/** How start() saw each tunnel: its URL, or why it was refused for good. */
export interface StartedTunnel {
  name: string;
  id?: string;
  url?: string;
  error?: TunnelRefused;
}

/** One tunnel's state across connections: its registration (kept to re-open the same id) and local pools. */
class Tunnel {
  /** what the server registered, kept across reconnects so the same id is asked for again */
  registered: { id: string; url: string; remotePort: number | null } | null = null;
  /** registered on the current connection */
  live = false;
  /** refused or closed for good */
  failed: TunnelRefused | null = null;
  /** opened or failed at least once (start() waits for every tunnel) */
  answered = false;
  open = 0;
  attempt = 0;
  retryTimer: NodeJS.Timeout | null = null;
  readonly name: string;
  readonly agent: http.Agent;
  readonly pool: Pool;
  readonly uploadPool: Pool;

  /** host:port of the local service, as messages name it */
  get localAddr(): string {
    return hostPort(this.opts.local);
  }

  constructor(readonly opts: TunnelOptions) {
    this.name = opts.name ?? opts.type;
    this.agent = new (opts.local.tls ? https : http).Agent({ keepAlive: true, maxFreeSockets: 64 });
    const connect = connectOptions(opts.local);
    this.pool = new Pool(localOrigin(opts.local), { connections: MAX_LOCAL_CONNECTIONS, pipelining: 1, connect });
    this.uploadPool = new Pool(localOrigin(opts.local), { connections: null, pipelining: 1, connect });
  }

  openRequest(): OpenRequest {
    return {
      type: this.opts.type,
      id: this.registered?.id ?? this.opts.id ?? null,
      teamId: this.opts.teamId ?? null,
      remotePort: this.registered?.remotePort ?? this.opts.remotePort ?? null,
      access: this.opts.access ?? null,
      ...(this.opts.localLabel ? { local: this.opts.localLabel } : {}),
    };
  }

  destroy(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.agent.destroy();
    void this.pool.destroy().catch(() => undefined);
    void this.uploadPool.destroy().catch(() => undefined);
  }
}

function backoffMs(attempt: number): number {
  const cap = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** (attempt - 1));
  return Math.round(cap / 2 + (Math.random() * cap) / 2);
}

export class TunnelClient extends EventEmitter<TunnelClientEvents> {
  private ws: WsClient | null = null;
  private readonly streams = new Map<number, ClientStream>();
  private readonly owner = new WeakMap<ClientStream, Tunnel>();
  private readonly tunnels: Tunnel[];
  /** Open requests awaiting Opened/Refused on the current connection. */
  private readonly pending = new Map<number, Tunnel>();
  private stopped = false;
  private attempt = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private lastSeenMs = 0;
  private nextReq = 1;
  private first: { resolve: (v: StartedTunnel[]) => void; reject: (e: Error) => void } | null = null;
  private readonly sender: Sender = {
    send: (frame) => this.send(frame),
    sendData: (sid, bytes) => {
      for (let off = 0; off < bytes.byteLength; off += MAX_DATA_BYTES) {
        const part = bytes.byteLength <= MAX_DATA_BYTES ? bytes : bytes.subarray(off, off + MAX_DATA_BYTES);
        // Head and payload as two writes: the payload (a Buffer the local socket handed us,
        // never reused) is not copied.
        this.ws?.sendParts(dataFrameHead(sid, part.byteLength), part);
      }
    },
  };

  constructor(private readonly opts: TunnelClientOptions) {
    super();
    const list = opts.tunnels ?? (opts.type && opts.local ? [{ name: opts.name, type: opts.type, local: opts.local, id: opts.id, teamId: opts.teamId, remotePort: opts.remotePort, access: opts.access, localLabel: opts.localLabel, observer: opts.observer }] : []);
    if (list.length === 0) throw new TypeError('TunnelClient: give `tunnels`, or `type` and `local` for one tunnel');
    this.tunnels = list.map((t) => new Tunnel(t));
    if (new Set(this.tunnels.map((t) => t.name)).size !== this.tunnels.length) throw new TypeError('TunnelClient: tunnel names must differ');
  }

  /** The first tunnel up (its id and URL); rejects when none could be. */
  async start(): Promise<{ id: string; url: string }> {
    const all = await this.startAll();
    const up = all.find((t) => t.url !== undefined);
    if (!up) throw all[0]!.error!;
    return { id: up.id!, url: up.url! };
  }

  /**
   * Connects and opens every tunnel; resolves once each is up or refused for good (see each
   * entry), rejects when the connection itself fails for good (or every tunnel was refused).
   */
  startAll(): Promise<StartedTunnel[]> {
    return new Promise((resolve, reject) => {
      this.first = { resolve, reject };
      void this.connect();
    });
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    const ws = this.ws;
    if (ws) for (const t of this.tunnels) if (t.live && t.registered) this.send([F.Close, t.registered.id]);
    this.ws = null;
    // close() flushes the Close frames, sends a WebSocket close and ends the socket.
    ws?.close(1000, 'client stopped');
    this.teardown();
    for (const t of this.tunnels) t.destroy();
    this.emit('closed', { permanent: true, code: 'stopped', reason: 'stopped by the client' });
  }

  private send(frame: Frame): void {
    this.ws?.send(encodeFrame(frame));
  }

  private wsUrl(): string {
    const u = new URL(this.opts.server);
    u.pathname = `${u.pathname.replace(/\/$/, '')}/tunnel/v1/connect`;
    return u.toString();
  }

  private async connect(): Promise<void> {
    let ws: WsClient;
    try {
      ws = await WsClient.connect(this.wsUrl(), { authorization: `Bearer ${this.opts.token}`, 'user-agent': AGENT }, MAX_FRAME_BYTES, CONNECT_TIMEOUT_MS, this.opts.ca);
    } catch (err) {
      if (this.stopped) return;
      // A certificate we do not trust will not become trusted by retrying: permanent.
      const untrusted = verificationProblem(err);
      const refusal =
        err instanceof WsRefused ? refusalOfStatus(err.status, err.body)
        : untrusted ? new TunnelRefused('tls', `${new URL(this.opts.server).host}: ${untrusted}`, true)
        : new TunnelRefused('unreachable', `cannot reach ${this.opts.server}: ${(err as Error).message}`, false);
      return this.lost(refusal);
    }
    if (this.stopped) return ws.destroy();
    this.ws = ws;
    this.lastSeenMs = Date.now();
    ws.on('message', (m) => this.onMessage(m));
    ws.on('close', (code, reason) => {
      if (this.ws !== ws) return;
      this.teardown();
      this.lost(new TunnelRefused('connection-lost', `control connection closed (${code}${reason ? `: ${reason}` : ''})`, false));
    });
    this.startHeartbeat(ws, HEARTBEAT_INTERVAL_MS);
    this.send([F.Hello, { v: PROTOCOL_VERSION, agent: AGENT }]);
    for (const t of this.tunnels) if (!t.failed) this.sendOpen(t);
  }

  private sendOpen(t: Tunnel): void {
    const reqId = this.nextReq++;
    this.pending.set(reqId, t);
    this.send([F.Open, reqId, t.openRequest()]);
  }

  /** Ping every `intervalMs`; a server silent for HEARTBEAT_MISSES intervals is a dead connection. */
  private startHeartbeat(ws: WsClient, intervalMs: number): void {
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = setInterval(() => {
      if (Date.now() - this.lastSeenMs > intervalMs * HEARTBEAT_MISSES) {
        ws.destroy();
        return;
      }
      this.send([F.Ping, Date.now()]);
    }, intervalMs);
    this.heartbeatTimer.unref();
  }

  /** Ends the current connection's state (streams die with it). */
  private teardown(): void {
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
    for (const s of this.streams.values()) s.abort();
    this.streams.clear();
    this.pending.clear();
    for (const t of this.tunnels) {
      t.live = false;
      if (t.retryTimer) clearTimeout(t.retryTimer);
      t.retryTimer = null;
      if (t.open) {
        t.open = 0;
        this.emit('open-streams', 0, t.name);
      }
    }
    const ws = this.ws;
    this.ws = null;
    ws?.destroy();
  }

  /** The connection ended or was refused: give up (permanent) or try again later. */
  private lost(why: TunnelRefused): void {
    if (this.stopped) return;
    if (why.permanent || (this.first && !this.tunnels.some((t) => t.registered) && why.code === 'unreachable')) {
      return this.end(why);
    }
    // Lost around its expiry: reconnecting would only be refused (an expiry in the past).
    for (const t of this.tunnels) {
      const expiresAt = t.opts.access?.expiresAt;
      if (!t.failed && expiresAt != null && expiresAt <= Date.now() + BACKOFF_FIRST_MS) {
        this.failTunnel(t, new TunnelRefused('expired', `the tunnel expired at ${new Date(expiresAt).toISOString()}`, true, t.name));
      }
    }
    if (this.stopped) return; // the last tunnel expired
    // A Closed and a Fatal for the same going-away server must not schedule two attempts.
    if (this.reconnectTimer) return;
    const attempt = ++this.attempt;
    const delayMs = backoffMs(attempt);
    this.emit('reconnecting', { attempt, delayMs, reason: why.message });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      void this.connect();
    }, delayMs);
  }

  private end(why: TunnelRefused): void {
    this.stopped = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.teardown();
    for (const t of this.tunnels) t.destroy();
    if (this.first) {
      this.first.reject(why);
      this.first = null;
    }
    this.emit('closed', { permanent: why.permanent, code: why.code, reason: why.message, ...(why.tunnel === undefined ? {} : { tunnel: why.tunnel }) });
  }

  /** One tunnel is refused or closed for good: report it; the client ends with the last one. */
  private failTunnel(t: Tunnel, why: TunnelRefused): void {
    t.failed = why;
    t.live = false;
    t.answered = true;
    for (const [sid, s] of this.streams) {
      if (this.owner.get(s) !== t) continue;
      s.abort();
      this.streams.delete(sid);
    }
    t.destroy();
    this.emit('tunnel-failed', { tunnel: t.name, code: why.code, reason: why.message });
    if (this.tunnels.every((x) => x.failed)) return this.end(why);
    this.checkStarted();
  }

  /** A Refused (to an Open) or Closed for tunnel `t`. */
  private tunnelRefused(t: Tunnel, r: Refusal): void {
    const err = new TunnelRefused(r.code, r.message, r.permanent, t.name);
    if (r.permanent) return this.failTunnel(t, err);
    t.live = false;
    // Nothing else up on this connection: start over with a new one, as a single tunnel always did.
    if (!this.tunnels.some((x) => x.live)) {
      this.teardown();
      return this.lost(err);
    }
    // Others are up: ask again for this one alone, later, on the same connection.
    if (t.retryTimer) return;
    t.retryTimer = setTimeout(() => {
      t.retryTimer = null;
      if (this.ws && !t.failed && !t.live) this.sendOpen(t);
    }, backoffMs(++t.attempt));
  }

  private checkStarted(): void {
    if (!this.first || !this.tunnels.every((t) => t.answered)) return;
    this.first.resolve(
      this.tunnels.map((t) =>
        t.failed ? { name: t.name, error: t.failed } : { name: t.name, id: t.registered!.id, url: t.registered!.url },
      ),
    );
    this.first = null;
  }

  private onMessage(m: Buffer): void {
    this.lastSeenMs = Date.now();
    let frame: Frame;
    try {
      frame = decodeFrame(m);
    } catch (err) {
      this.ws?.close(1002, (err as FrameError).message);
      return;
    }
    switch (frame[0]) {
      case F.Welcome: {
        // The server's interval (burrowd --heartbeat-interval), within sane bounds.
        const ms = frame[1].heartbeatMs;
        if (this.ws && ms >= 100 && ms <= 10_000) this.startHeartbeat(this.ws, ms);
        return;
      }
      case F.Pong:
        return;
      case F.Ping:
        return this.send([F.Pong, frame[1]]);
      case F.Opened: {
        const t = this.pending.get(frame[1]);
        if (!t) return; // not an Open of this connection
        this.pending.delete(frame[1]);
        const o = frame[2];
        t.registered = { id: o.id, url: o.url, remotePort: o.remotePort ?? null };
        t.live = true;
        t.answered = true;
        t.attempt = 0;
        this.attempt = 0;
        this.emit('registered', { tunnel: t.name, id: o.id, url: o.url, tookOver: o.tookOver === true });
        this.checkStarted();
        return;
      }
      case F.Refused: {
        const t = this.pending.get(frame[1]);
        if (!t) return;
        this.pending.delete(frame[1]);
        return this.tunnelRefused(t, frame[2]);
      }
      case F.Closed: {
        const t = this.tunnels.find((x) => x.live && x.registered?.id === frame[1]);
        if (!t) return;
        return this.tunnelRefused(t, frame[2]);
      }
      case F.Fatal: {
        const err = new TunnelRefused(frame[1].code, frame[1].message, frame[1].permanent);
        this.teardown();
        return this.lost(err);
      }
      case F.StreamOpen:
        return this.openStream(frame[1], frame[2], frame[3]);
      case F.GoAway:
        // Nothing to stop (the server opens every stream): its Closed/Fatal follows once the
        // open streams ended, and the usual reconnect (backoff) finds the restarted server.
        this.emit('draining', { timeoutMs: frame[1].timeoutMs });
        return;
      case F.Data:
        return this.streams.get(frame[1])?.onData(frame[2] as Buffer);
      case F.End:
        return this.streams.get(frame[1])?.onEnd();
      case F.Reset:
        return this.streams.get(frame[1])?.onReset(frame[2]);
      case F.Credit:
        return this.streams.get(frame[1])?.onCredit(frame[2]);
      case F.Hello:
      case F.Open:
      case F.Close:
      case F.Response:
        this.ws?.close(1002, `frame type ${frame[0]} is client-to-server only`);
        return;
      default:
        return frame satisfies never;
    }
  }

  private openStream(sid: number, tunnelId: string, head: HttpHead | TcpHead): void {
    const t = this.tunnels.find((x) => x.live && x.registered?.id === tunnelId);
    if (!t || head.kind !== t.opts.type) return this.send([F.Reset, sid, 'no-tunnel']);
    if (head.kind === 'http' && t.opts.local.hostHeader) head = { ...head, headers: withHostHeader(head.headers, t.opts.local) };
    const onFinish = (s: ClientStream): void => {
      if (this.streams.get(s.sid) === s) this.streams.delete(s.sid);
      t.open = Math.max(0, t.open - 1);
      this.emit('open-streams', t.open, t.name);
      const durationMs = Date.now() - s.startedMs;
      const f = s.localFailure;
      const error = f ? { error: describeLocalError(f.err, t.localAddr, this.opts.responseTimeoutMs ?? RESPONSE_HEAD_TIMEOUT_MS) } : {};
      if (s instanceof HttpStream || s instanceof PoolHttpStream) {
        // No answer: the status the visitor got from the edge for it.
        const status = s.statusCode || (f ? (f.err === null ? 504 : 502) : 0);
        this.emit('request', { tunnel: t.name, method: s.head.method, path: s.head.target, status, durationMs, bytesIn: s.bytesIn, bytesOut: s.bytesOut, ...error });
      } else if (s instanceof TcpStream) {
        this.emit('connection', { tunnel: t.name, remote: s.head.remote, durationMs, bytesIn: s.bytesIn, bytesOut: s.bytesOut, ...error });
      }
    };
    const timeoutMs = this.opts.responseTimeoutMs ?? RESPONSE_HEAD_TIMEOUT_MS;
    const s =
      head.kind === 'http'
        ? poolCanCarry(head)
          ? new PoolHttpStream(sid, this.sender, onFinish, head, head.end ? t.pool : t.uploadPool, timeoutMs)
          : new HttpStream(sid, this.sender, onFinish, head, t.opts.local, t.agent, timeoutMs)
        : new TcpStream(sid, this.sender, onFinish, head, t.opts.local);
    if (head.kind === 'http' && t.opts.observer) s.capture = guardedExchange(t.opts.observer, head, `${t.opts.local.host}:${t.opts.local.port}`);
    this.streams.set(sid, s);
    this.owner.set(s, t);
    t.open++;
    this.emit('open-streams', t.open, t.name);
  }
}
