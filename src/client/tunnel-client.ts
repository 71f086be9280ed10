import { EventEmitter } from 'node:events';
import {
  F, MAX_FRAME_BYTES, RESPONSE_HEAD_TIMEOUT_MS, RESUME_HEADER, TICKET_REFRESH_HEADER,
  type HttpHead, type Opened, type OpenRequest, type Refusal, type TcpHead, type Welcome,
} from '../protocol/frames.js';
import type { AccessRules } from '../protocol/access.js';
import { guardedExchange, type TunnelObserver } from './observer.js';
import { verificationProblem } from './tls-verify.js';
import { WsClient, WsRefused } from '../protocol/ws-client.js';
import { printable } from './terminal-text.js';
import { describeLocalError } from './local-error.js';
import { isJsonType, isProxyUnavailable, notBurrowdMessage } from './not-burrowd.js';
import { hostPort, withHostHeader, type LocalTarget } from './local-target.js';
import { withFields } from '../protocol/raw-head.js';
import { RawHttpStream, TcpStream, type ClientStream } from './streams.js';
import { LocalPool } from './local-pool.js';
import { H2LocalStream, H2Sessions } from './h2-local.js';
import type { Link } from './link.js';
import { ClientConnection, clientAgent, type ConnectionOwner } from './joined-connection.js';
import { LaneSet } from './lanes.js';
import { NodeSibling } from './node-sibling.js';
import { settled } from './settle.js';

export type { AccessRules } from '../protocol/access.js';

// The client half of the tunnel protocol (used by `burrow http|tcp`, src/cli/).
//
//   TunnelClient ──control WebSocket (ws-client.ts, a ClientConnection: joined-connection.ts)──▶ burrowd
//     Hello → Welcome → Open → Opened{id,url}
//     StreamOpen(http) → the request as bytes on a pooled connection (local-pool.ts) → the answer's bytes as Data, End
//     StreamOpen(tcp)  → net.connect to the local service → Data/End both ways
//   connection lost / heartbeat silent → reconnect after a full-jitter backoff capped at 1 s
//   (a server's Retry-After, with jitter, instead when it names one; at once after GoAway),
//   re-registering the same id; a permanent refusal (bad key, id taken, deleted) ends it.
//   Several tunnels (`burrow start`): one Open each on the one connection; StreamOpen names the
//   tunnel, whose local service and pools serve the stream; one tunnel refused for good is
//   reported (`tunnel-failed`) while the others run on, and the client ends with the last one.
//   On a server of several shards, lanes (lanes.ts) add a connection per other shard once a
//   tunnel has visitors; streams (streams.ts) answer on the connection they came on (link.ts).

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
  /** Open lanes on a server of several shards (lanes.ts); default true. */
  lanes?: boolean;
  /** Join (or start) a pool of clients serving this id (one tunnel; `tunnels` entries say it each). */
  pool?: boolean;
  /** In a cluster, keep a second connection on another node (node-sibling.ts); default true. */
  siblings?: boolean;
  /** A resumption ticket kept from an earlier run (the CLI's context file): the first handshake spares the key's verification. */
  resumeTicket?: string | null;
}

/** One tunnel of a client: what it asks the server for, and where its streams go. */
export type TunnelOptions = Required<Pick<TunnelClientOptions, 'type' | 'local'>> & Pick<TunnelClientOptions, 'name' | 'id' | 'teamId' | 'remotePort' | 'access' | 'localLabel' | 'observer' | 'pool' | 'responseTimeoutMs'>;

export class TunnelRefused extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly permanent: boolean,
    /** the tunnel it concerns (its name), when not the whole connection */
    readonly tunnel?: string,
    /** The server's Retry-After (seconds), when it named one. */
    readonly retryAfterS: number | null = null,
  ) {
    // The server's words (or a peer's that pretends to be one): printed as they come, so made harmless here.
    super(printable(message));
    this.name = 'TunnelRefused';
  }
}

const CONNECT_TIMEOUT_MS = 10_000;
const CONNECT_PATH = '/tunnel/v1/connect';
const BACKOFF_FIRST_MS = 250;
/** The longest wait between attempts (README "Reconnecting"), unless the server's Retry-After says more. */
const BACKOFF_MAX_MS = 1_000;
const AGENT = clientAgent();
/** Connections to the local service at most; further requests wait in the pool (streams are capped per tunnel). */
const MAX_LOCAL_CONNECTIONS = 256;
/** How long a pool member that stops waits for its open streams to finish (the server sends it no new one). */
export const POOL_LEAVE_MS = 10_000;
// Requests with a body take a second, uncapped pool: a visitor that stalls its upload holds its
// local connection until the body ends, and 256 such visitors made every GET of the tunnel queue
// behind them for seconds. Bodiless requests, which never stall on the visitor, keep the capped
// pool to themselves. (The edge bounds streams per connection and requests per visitor IP.)

/** Maps a refused upgrade's HTTP status to a refusal. */
function refusalOfStatus(status: number, body: string, retryAfterS: number | null, contentType: string | null): TunnelRefused {
  if (body !== '' && !isJsonType(contentType)) {
    const message = notBurrowdMessage(status, contentType, 'GET', CONNECT_PATH);
    return isProxyUnavailable(status) ? new TunnelRefused('unavailable', message, false, undefined, retryAfterS) : new TunnelRefused('not-burrowd', message, true);
  }
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
  if (status === 429) return new TunnelRefused('too-many-requests', msg, false, undefined, retryAfterS);
  return new TunnelRefused('unavailable', msg, false, undefined, retryAfterS);
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
  /** A new resumption ticket (Welcome's, or a refresh): worth keeping for the next run. */
  ticket: [string];
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
  /** what this registration's lanes present (Opened.laneKey); null: no lanes */
  laneKey: string | null = null;
  /** cluster: what this client's other connections present to serve the tunnel too (Opened.memberKey); kept across reconnects */
  memberKey: string | null = null;
  /** refused or closed for good */
  failed: TunnelRefused | null = null;
  /** opened or failed at least once (start() waits for every tunnel) */
  answered = false;
  open = 0;
  attempt = 0;
  retryTimer: NodeJS.Timeout | null = null;
  readonly name: string;
  readonly pool: LocalPool;
  /** An HTTP/2 local service (h2c:// or h2://): its session, instead of the pool's connections. */
  readonly h2: H2Sessions | null;

  /** host:port of the local service, as messages name it */
  get localAddr(): string {
    return hostPort(this.opts.local);
  }

  constructor(readonly opts: TunnelOptions) {
    this.name = opts.name ?? opts.type;
    this.pool = new LocalPool(opts.local, MAX_LOCAL_CONNECTIONS);
    this.h2 = opts.local.h2 ? new H2Sessions(opts.local) : null;
  }

  openRequest(): OpenRequest {
    return {
      type: this.opts.type,
      id: this.registered?.id ?? this.opts.id ?? null,
      teamId: this.opts.teamId ?? null,
      remotePort: this.registered?.remotePort ?? this.opts.remotePort ?? null,
      access: this.opts.access ?? null,
      ...(this.opts.localLabel ? { local: this.opts.localLabel } : {}),
      ...(this.opts.pool ? { pool: true } : {}),
    };
  }

  /** The Open of this tunnel on the main connection: after a reconnect, it joins its client's live registration (kept by its other connection). */
  mainOpen(): OpenRequest {
    return { ...this.openRequest(), ...(this.memberKey && this.registered ? { member: this.memberKey } : {}) };
  }

  destroy(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.pool.close();
    this.h2?.close();
  }
}

/**
 * Full jitter: a uniform wait in [0, min(1 s, 250 ms × 2^(attempt-1))]. The cap is what brings
 * a client back within 1 s of the server being ready, whatever the outage's length; the
 * spread keeps a restarted server's clients from arriving in one instant (the server sheds
 * the excess with a 503 + Retry-After: edge/handshake-gate.ts).
 */
function backoffMs(attempt: number): number {
  return Math.round(Math.random() * Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** (attempt - 1)));
}

/** A server's Retry-After, honoured with jitter: a uniform wait in its second half. */
function retryAfterMs(seconds: number): number {
  return Math.round(seconds * 1000 * (0.5 + Math.random() / 2));
}

export class TunnelClient extends EventEmitter<TunnelClientEvents> {
  /** The main connection: Opens, registrations, and the streams of visitors on its shard. */
  private conn: ClientConnection<Tunnel> | null = null;
  /** what the main connection's answers mean (mainOwner), one object for every reconnect */
  private readonly owner: ConnectionOwner<Tunnel>;
  private readonly lanes = new LaneSet({
    connect: () => this.dial(),
    laneTunnels: () => this.tunnels.filter((t) => t.live && t.laneKey && t.registered).map((t) => ({ id: t.registered!.id, key: t.laneKey! })),
    openStream: (link, sid, tunnelId, head) => this.openStream(link, sid, tunnelId, head),
    dropStreams: (link, id) => this.dropStreams(link, id),
  });
  /** cluster: the second connection, on another node (node-sibling.ts) */
  private readonly sibling = new NodeSibling({
    connectTo: (url) => this.dial(url),
    memberTunnels: () => this.tunnels.filter((t) => !t.failed && t.memberKey && t.registered).map((t) => ({ id: t.registered!.id, key: t.memberKey!, open: t.openRequest() })),
    openStream: (link, sid, tunnelId, head) => this.openStream(link, sid, tunnelId, head),
    dropStreams: (link, id) => this.dropStreams(link, id),
    dialable: (urls) => this.dialable(undefined, urls)[1] ?? [],
  });
  /** consecutive main-connection attempts that found no server: the next one tries another known node */
  private unreachable = 0;
  private readonly tunnels: Tunnel[];
  private stopped = false;
  private attempt = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private first: { resolve: (v: StartedTunnel[]) => void; reject: (e: Error) => void } | null = null;
  private welcomedVersion: string | null = null;
  private resumeTicket: string | null = null;
  /** The server said GoAway: the next reconnect is at once (the restarted server, or the next node). */
  private goingAway = false;

  constructor(private readonly opts: TunnelClientOptions) {
    super();
    const list = opts.tunnels ?? (opts.type && opts.local ? [{ name: opts.name, type: opts.type, local: opts.local, id: opts.id, teamId: opts.teamId, remotePort: opts.remotePort, access: opts.access, localLabel: opts.localLabel, observer: opts.observer, pool: opts.pool }] : []);
    if (list.length === 0) throw new TypeError('TunnelClient: give `tunnels`, or `type` and `local` for one tunnel');
    this.tunnels = list.map((t) => new Tunnel(t));
    this.resumeTicket = opts.resumeTicket ?? null;
    this.owner = this.mainOwner();
    if (new Set(this.tunnels.map((t) => t.name)).size !== this.tunnels.length) throw new TypeError('TunnelClient: tunnel names must differ');
  }

  /** The last heartbeat round trip to the server in ms; null while disconnected or before the first Pong. */
  get latencyMs(): number | null {
    return this.conn?.link.rttMs ?? null;
  }

  /** burrowd's version as its Welcome said (null before one, or from a server too old to say). */
  get serverVersion(): string | null {
    return this.welcomedVersion;
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
    const conn = this.conn;
    // Close for each tunnel registered on it: the server sends it no new stream.
    conn?.leave();
    const pooled = this.tunnels.some((t) => t.opts.pool);
    const sibling = this.sibling.stop(pooled ? POOL_LEAVE_MS : 0);
    if (conn && pooled) {
      // A pool member leaves gracefully: the server sends it no new stream after Close and the
      // open ones finish here (each answers on its own connection), bounded by POOL_LEAVE_MS.
      this.lanes.leave();
      await settled(() => this.tunnels.every((t) => t.open === 0), POOL_LEAVE_MS);
    }
    await sibling;
    this.conn = null;
    // close() flushes the Close frames, sends a WebSocket close and ends the socket.
    conn?.close(1000, 'client stopped');
    conn?.link.abortStreams();
    this.teardown();
    for (const t of this.tunnels) t.destroy();
    this.emit('closed', { permanent: true, code: 'stopped', reason: 'stopped by the client' });
  }

  private wsUrl(server: string): string {
    const u = new URL(server);
    u.pathname = `${u.pathname.replace(/\/$/, '')}${CONNECT_PATH}`;
    return u.toString();
  }

  /** A new authenticated control WebSocket (the main connection, a lane, or the sibling at `server`). */
  private dial(server = this.opts.server, main = false): Promise<WsClient> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.opts.token}`, 'user-agent': AGENT };
    // The last Welcome's ticket: the server (restarted, or another shard) need not verify the key again.
    if (this.resumeTicket) headers[RESUME_HEADER] = this.resumeTicket;
    // The main connection lives long: it takes fresh tickets (Ticket frames) before Welcome's runs out.
    if (main) headers[TICKET_REFRESH_HEADER] = '1';
    return WsClient.connect(this.wsUrl(server), headers, MAX_FRAME_BYTES, CONNECT_TIMEOUT_MS, this.opts.ca);
  }

  /**
   * The nodes a Welcome names that this client may send its key to: over https only when the
   * server was given as https (a node named http:// would take the key in clear).
   */
  private dialable(node: string | undefined, nodes: string[] | undefined): [string | undefined, string[] | undefined] {
    if (new URL(this.opts.server).protocol !== 'https:') return [node, nodes];
    const safe = (u: string): boolean => u.startsWith('https://');
    return [node !== undefined && safe(node) ? node : undefined, nodes?.filter(safe)];
  }

  /** Where the main connection goes: the server, or, while it cannot be reached, the cluster's other nodes in turn. */
  private mainServer(): string {
    const others = this.sibling.known();
    if (this.unreachable === 0 || others.length === 0) return this.opts.server;
    const all = [this.opts.server, ...others];
    return all[this.unreachable % all.length]!;
  }

  private async connect(): Promise<void> {
    let ws: WsClient;
    const server = this.mainServer();
    try {
      ws = await this.dial(server, true);
      this.unreachable = 0;
    } catch (err) {
      if (this.stopped) return;
      if (!(err instanceof WsRefused)) this.unreachable++;
      // A certificate we do not trust will not become trusted by retrying: permanent.
      const untrusted = verificationProblem(err);
      const refusal =
        err instanceof WsRefused ? refusalOfStatus(err.status, err.body, err.retryAfterS, err.contentType)
        : untrusted ? new TunnelRefused('tls', `${new URL(this.opts.server).host}: ${untrusted}`, true)
        : new TunnelRefused('unreachable', `cannot connect to ${server} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, false);
      return this.lost(refusal);
    }
    if (this.stopped) return ws.destroy();
    this.conn = new ClientConnection(ws, null, this.owner);
    for (const t of this.tunnels) if (!t.failed) this.sendOpen(t);
  }

  private sendOpen(t: Tunnel): void {
    this.conn?.open(t, t.mainOpen());
  }

  /** Ends the current connection's state (streams die with it). */
  private teardown(): void {
    this.conn?.link.abortStreams();
    this.lanes.stop();
    for (const t of this.tunnels) {
      t.live = false;
      t.laneKey = null;
      if (t.retryTimer) clearTimeout(t.retryTimer);
      t.retryTimer = null;
      if (t.open) {
        t.open = 0;
        this.emit('open-streams', 0, t.name);
      }
    }
    const conn = this.conn;
    this.conn = null;
    conn?.destroy();
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
    const delayMs = this.goingAway ? 0 : why.retryAfterS !== null ? retryAfterMs(why.retryAfterS) : backoffMs(attempt);
    this.goingAway = false;
    this.emit('reconnecting', { attempt, delayMs, reason: why.message });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      void this.connect();
    }, delayMs);
  }

  private end(why: TunnelRefused): void {
    this.stopped = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    void this.sibling.stop();
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
    t.laneKey = null;
    t.answered = true;
    for (const link of [...(this.conn ? [this.conn.link] : []), ...this.lanes.links(), ...this.sibling.links()]) {
      for (const [sid, s] of link.streams) {
        if (s.owner !== t) continue;
        s.abort();
        link.streams.delete(sid);
      }
    }
    t.destroy();
    this.emit('tunnel-failed', { tunnel: t.name, code: why.code, reason: why.message });
    if (this.tunnels.every((x) => x.failed)) return this.end(why);
    this.checkStarted();
  }

  /** A Refused (to an Open) or Closed for tunnel `t`. */
  private tunnelRefused(t: Tunnel, r: Refusal): void {
    // Its other connection is gone too (or the registration ended): register it afresh.
    if (r.code === 'not-found' && t.memberKey) {
      t.memberKey = null;
      return this.sendOpen(t);
    }
    // An id this client held, refused after a reconnect, is not a final "taken": the server
    // keeps it for its last user (--id-grace), or an admin may free it; retry with backoff.
    const mine = r.code === 'conflict' && t.registered !== null;
    const err = new TunnelRefused(r.code, r.message, r.permanent && !mine, t.name, r.retryAfterMs === undefined ? null : r.retryAfterMs / 1000);
    if (err.permanent) return this.failTunnel(t, err);
    t.live = false;
    t.laneKey = null;
    // Nothing else up on this connection: start over with a new one, as a single tunnel always did.
    if (!this.tunnels.some((x) => x.live)) {
      this.teardown();
      return this.lost(err);
    }
    // Others are up: ask again for this one alone, later, on the same connection.
    if (t.retryTimer) return;
    t.retryTimer = setTimeout(
      () => {
        t.retryTimer = null;
        if (!t.failed && !t.live) this.sendOpen(t);
      },
      err.retryAfterS !== null ? retryAfterMs(err.retryAfterS) : backoffMs(++t.attempt),
    );
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

  private takeTicket(ticket: string | null): void {
    this.resumeTicket = ticket;
    if (ticket) this.emit('ticket', ticket);
  }

  /** The main connection's Welcome: the lanes and sibling it calls for, the server's version, a ticket. */
  private welcomed(w: Welcome): void {
    if (this.opts.lanes !== false) this.lanes.want(w.shard, w.shards);
    if (this.opts.siblings !== false) this.sibling.want(...this.dialable(w.node, w.nodes));
    this.welcomedVersion = w.version ?? null;
    this.takeTicket(w.resume ?? null);
  }

  /** Tunnel `t` is registered on the main connection (afresh, or joined with its member key). */
  private opened(t: Tunnel, o: Opened): void {
    t.registered = { id: o.id, url: printable(o.url), remotePort: o.remotePort ?? null };
    t.live = true;
    t.laneKey = o.laneKey ?? null;
    t.memberKey = o.memberKey ?? null;
    t.answered = true;
    t.attempt = 0;
    this.attempt = 0;
    this.emit('registered', { tunnel: t.name, id: o.id, url: t.registered.url, tookOver: o.tookOver === true });
    this.lanes.refresh();
    this.sibling.refresh();
    this.checkStarted();
  }

  /** The main connection's policy (its ClientConnection does the protocol): what each answer means to the tunnels. */
  private mainOwner(): ConnectionOwner<Tunnel> {
    return {
      openStream: this.openStream,
      welcome: (_c, w) => this.welcomed(w),
      opened: (_c, t, o) => this.opened(t, o),
      refused: (_c, t, r) => this.tunnelRefused(t, r),
      closed: (_c, id, r) => {
        const t = this.tunnels.find((x) => x.live && x.registered?.id === id);
        if (t) this.tunnelRefused(t, r);
      },
      fatal: (_c, r) => {
        this.teardown();
        this.lost(new TunnelRefused(r.code, r.message, r.permanent));
      },
      goAway: (_c, timeoutMs) => {
        // Nothing to stop (the server opens every stream): its Closed/Fatal follows once the
        // open streams ended, and we reconnect at once (a server still draining answers 503 +
        // Retry-After, honoured like any other).
        this.goingAway = true;
        this.emit('draining', { timeoutMs });
      },
      ticket: (_c, resume) => this.takeTicket(resume),
      lost: (c, code, reason) => {
        if (this.conn !== c) return;
        this.teardown();
        this.lost(new TunnelRefused('connection-lost', `control connection closed (${code}${reason ? `: ${reason}` : ''})`, false));
      },
    };
  }

  /** A lane or the sibling lost (or its tunnel `id` closed there): those streams are over; the counts follow. */
  private dropStreams(link: Link, id?: string): void {
    const touched = new Set<Tunnel>();
    for (const [sid, s] of link.streams) {
      const t = s.owner as Tunnel | null;
      if (id !== undefined && t?.registered?.id !== id) continue;
      s.abort();
      link.streams.delete(sid);
      if (!t) continue;
      t.open = Math.max(0, t.open - 1);
      touched.add(t);
    }
    for (const t of touched) this.emit('open-streams', t.open, t.name);
  }

  private readonly openStream = (link: Link, sid: number, tunnelId: string, head: HttpHead | TcpHead): void => {
    // Registered, if not on the main connection now: its other connection serves it meanwhile.
    const t = this.tunnels.find((x) => !x.failed && x.registered?.id === tunnelId && (x.live || link !== this.conn?.link));
    if (!t || head.kind !== t.opts.type) return link.send([F.Reset, sid, 'no-tunnel']);
    // Visitors arrive: from now on lanes are worth their connections.
    if (link === this.conn?.link && t.laneKey) this.lanes.wake();
    // An HTTP/2 local service (h2-local.ts) builds its request from the fields; a Host rewrite works on them too.
    if (head.kind === 'http' && (t.h2 || t.opts.local.hostHeader)) head = withFields(head);
    if (head.kind === 'http' && t.opts.local.hostHeader) head = { ...head, headers: withHostHeader(head.headers, t.opts.local) };
    // Per tunnel (--response-timeout, burrow.yml response_timeout), else the client's.
    const timeoutMs = t.opts.responseTimeoutMs ?? this.opts.responseTimeoutMs ?? RESPONSE_HEAD_TIMEOUT_MS;
    const s =
      head.kind === 'tcp'
        ? new TcpStream(sid, link.sender, this.streamFinished, head, t.opts.local)
        : t.h2
          ? new H2LocalStream(sid, link.sender, this.streamFinished, head, t.h2, timeoutMs)
          : new RawHttpStream(sid, link.sender, this.streamFinished, head, t.pool, timeoutMs);
    if (head.kind === 'http' && t.opts.observer) s.capture = guardedExchange(t.opts.observer, head, t.opts.local);
    s.owner = t;
    s.link = link;
    link.addStream(s, timeoutMs);
    t.open++;
    this.emit('open-streams', t.open, t.name);
  };

  /** A stream of any link is over (one function for all: no closure per request). */
  private readonly streamFinished = (s: ClientStream): void => {
    const t = s.owner as Tunnel;
    const link = s.link!;
    if (link.streams.get(s.sid) === s) link.streams.delete(s.sid);
    t.open = Math.max(0, t.open - 1);
    this.emit('open-streams', t.open, t.name);
    const durationMs = Date.now() - s.startedMs;
    const f = s.localFailure;
    const error = f ? describeLocalError(f.err, t.localAddr, t.opts.responseTimeoutMs ?? this.opts.responseTimeoutMs ?? RESPONSE_HEAD_TIMEOUT_MS) : undefined;
    if (s instanceof RawHttpStream || s instanceof H2LocalStream) {
      // No answer: the status the visitor got from the edge for it.
      const status = s.statusCode || (f ? (f.err === null ? 504 : 502) : 0);
      const e: TunnelClientEvents['request'][0] = { tunnel: t.name, method: s.head.method, path: s.head.target, status, durationMs, bytesIn: s.bytesIn, bytesOut: s.bytesOut };
      if (error !== undefined) e.error = error;
      this.emit('request', e);
    } else if (s instanceof TcpStream) {
      const e: TunnelClientEvents['connection'][0] = { tunnel: t.name, remote: s.head.remote, durationMs, bytesIn: s.bytesIn, bytesOut: s.bytesOut };
      if (error !== undefined) e.error = error;
      this.emit('connection', e);
    }
  };
}
