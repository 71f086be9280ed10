import {
  F, PROTOCOL_VERSION, HEARTBEAT_INTERVAL_MS, HEARTBEAT_MISSES,
  type Frame, type Opened, type OpenRequest, type Refusal, type Welcome,
} from '../protocol/frames.js';
import { Link, type StreamOpener } from './link.js';
import { settled } from './settle.js';
import type { WsClient } from '../protocol/ws-client.js';

// One control connection of a client, whatever it is for: the main connection (tunnel-client.ts),
// a lane on another shard (lanes.ts) or the sibling on another node (node-sibling.ts). Each is
// the same protocol: its Link (streams, heartbeats answered), Hello → Welcome, a Ping every
// heartbeat interval (Welcome's) and dropped when the server is silent for HEARTBEAT_MISSES of
// them, Opens and their Opened/Refused answers, the tunnels it serves and the key each joined
// with (Closed drops one), Fatal, GoAway and Ticket. What differs is the owner's policy
// (ConnectionOwner): which Opens to send, what a Welcome or a refusal means, when to give up.

/** The server's heartbeat interval, from Welcome, is taken within these bounds. */
const MIN_HEARTBEAT_MS = 100;
const MAX_HEARTBEAT_MS = 10_000;

/**
 * What a connection's owner decides. Each handler gets the connection first, so one owner object
 * serves all its connections (no closure per connection). `asked` is what the owner gave `open`.
 */
export interface ConnectionOwner<T> {
  readonly openStream: StreamOpener;
  welcome?(c: ClientConnection<T>, w: Welcome): void;
  opened?(c: ClientConnection<T>, asked: T, o: Opened): void;
  refused?(c: ClientConnection<T>, asked: T, r: Refusal): void;
  /** The server ended tunnel `id` on this connection (no longer among `joined`). */
  closed(c: ClientConnection<T>, id: string, r: Refusal): void;
  /** The whole connection is refused or ended (the socket closes next). */
  fatal(c: ClientConnection<T>, r: Refusal): void;
  /** The server drains (absent: nothing to do, the connection closes once its streams end). */
  goAway?(c: ClientConnection<T>, timeoutMs: number): void;
  /** A fresh resumption ticket (absent: the connection did not ask for them, and one is a protocol error). */
  ticket?(c: ClientConnection<T>, resume: string): void;
  /** The connection ended (closed by either side, dropped as silent, or destroyed). */
  lost(c: ClientConnection<T>, code: number, reason: string): void;
}

/** What a policy of joined connections (lanes, the sibling) needs from its TunnelClient besides connecting. */
export interface JoinHost {
  openStream: StreamOpener;
  /** Streams of `link` are over: all of them (its connection is lost), or those of tunnel `id`. */
  dropStreams(link: Link, id?: string): void;
}

/** A tunnel a connection joins by key: its id, and the lane or member key it presents. */
export interface JoinKey {
  id: string;
  key: string;
}

export class ClientConnection<T> {
  readonly link: Link;
  /** tunnel ids served on this connection, and the key each joined with (a first registration: none) */
  readonly joined = new Map<string, string | null>();
  /** the server's Welcome; null before it */
  welcomed: Welcome | null = null;
  /** Opens awaiting Opened/Refused: request id → what was asked, its tunnel id and key */
  private readonly pending = new Map<number, { asked: T; id: string | null; key: string | null }>();
  private nextReq = 1;
  private heartbeat: NodeJS.Timeout | null = null;
  /** `welcome()` waiting for Welcome */
  private waiting: ((w: Welcome | null) => void) | null = null;

  /** Sends Hello at once; `role` names the connection in its agent ("lane", "sibling"; the main one none). */
  constructor(
    ws: WsClient,
    role: string | null,
    private readonly owner: ConnectionOwner<T>,
  ) {
    this.link = new Link(ws);
    ws.on('message', (m) => this.onMessage(m));
    ws.on('close', (code, reason) => this.onClose(code, reason));
    this.beat(HEARTBEAT_INTERVAL_MS);
    this.link.send([F.Hello, { v: PROTOCOL_VERSION, agent: clientAgent(role), rawHeads: true }]);
  }

  get isClosed(): boolean {
    return this.link.ws.isClosed;
  }

  /** The server's Welcome once it came; null when the connection ended or `timeoutMs` passed first. */
  welcome(timeoutMs: number): Promise<Welcome | null> {
    if (this.welcomed || this.isClosed) return Promise.resolve(this.welcomed);
    this.waiting?.(null);
    return new Promise((resolve) => {
      const timer = setTimeout(() => done(null), timeoutMs);
      const done = (w: Welcome | null): void => {
        clearTimeout(timer);
        if (this.waiting === done) this.waiting = null;
        resolve(w);
      };
      this.waiting = done;
    });
  }

  /** Open `req` (a registration, or a join with its lane or member key); its answer goes to the owner with `asked`. */
  open(asked: T, req: OpenRequest): void {
    const reqId = this.nextReq++;
    this.pending.set(reqId, { asked, id: req.id ?? null, key: req.lane ?? req.member ?? null });
    this.link.send([F.Open, reqId, req]);
  }

  /** An Open for each tunnel not joined with its key yet, nor asked for (a refused one is asked again). */
  join<J extends JoinKey & T>(tunnels: readonly J[], openOf: (t: J) => OpenRequest): void {
    const asked = new Set<string | null>();
    for (const p of this.pending.values()) asked.add(p.id);
    for (const t of tunnels) if (this.joined.get(t.id) !== t.key && !asked.has(t.id)) this.open(t, openOf(t));
  }

  /** Close for each joined tunnel (the server sends no new stream on them here); forgets them and the Opens asked. */
  leave(): void {
    for (const id of this.joined.keys()) this.link.send([F.Close, id]);
    this.joined.clear();
    this.pending.clear();
  }

  /** Resolves once the connection has no stream left, or ended, or `graceMs` passed. */
  drained(graceMs: number): Promise<void> {
    return settled(() => this.link.streams.size === 0 || this.isClosed, graceMs);
  }

  /** Sends a WebSocket close (what was sent before goes first); the heartbeat stops. */
  close(code: number, reason: string): void {
    this.stopBeat();
    this.link.ws.close(code, reason);
  }

  destroy(): void {
    this.link.ws.destroy();
  }

  /** Ping every `intervalMs`; a server silent for HEARTBEAT_MISSES intervals is a dead connection. */
  private beat(intervalMs: number): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    const link = this.link;
    this.heartbeat = setInterval(() => {
      const now = Date.now();
      if (now - link.lastSeenMs > intervalMs * HEARTBEAT_MISSES) return link.ws.destroy();
      link.send([F.Ping, now]);
    }, intervalMs);
    this.heartbeat.unref();
  }

  private stopBeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = null;
  }

  private onClose(code: number, reason: string): void {
    this.stopBeat();
    this.waiting?.(null);
    this.owner.lost(this, code, reason);
  }

  private onMessage(m: Buffer): void {
    const frame = this.link.receive(m, this.owner.openStream);
    if (frame) this.onControl(frame);
  }

  /** A frame the link left: the connection's own (streams and heartbeats were the link's). */
  private onControl(frame: Frame): void {
    const owner = this.owner;
    switch (frame[0]) {
      case F.Welcome: {
        const w = frame[1];
        this.welcomed = w;
        // The server's interval (burrowd --heartbeat-interval), within sane bounds.
        if (w.heartbeatMs >= MIN_HEARTBEAT_MS && w.heartbeatMs <= MAX_HEARTBEAT_MS) this.beat(w.heartbeatMs);
        owner.welcome?.(this, w);
        this.waiting?.(w);
        // Measure the latency now, not one heartbeat interval later.
        this.link.send([F.Ping, Date.now()]);
        return;
      }
      case F.Opened:
      case F.Refused: {
        const p = this.pending.get(frame[1]);
        if (!p) return; // not an Open of this connection (or one it gave up)
        this.pending.delete(frame[1]);
        if (frame[0] === F.Refused) return owner.refused?.(this, p.asked, frame[2]);
        this.joined.set(p.id ?? frame[2].id, p.key);
        return owner.opened?.(this, p.asked, frame[2]);
      }
      case F.Closed:
        this.joined.delete(frame[1]);
        return owner.closed(this, frame[1], frame[2]);
      case F.Fatal:
        return owner.fatal(this, frame[1]);
      case F.GoAway:
        return owner.goAway?.(this, frame[1].timeoutMs);
      case F.Ticket:
        if (owner.ticket) return owner.ticket(this, frame[1].resume);
        return this.close(1002, 'a Ticket frame is not expected on this connection');
      case F.Hello:
      case F.Open:
      case F.Close:
        return this.close(1002, `frame type ${frame[0]} is client-to-server only`);
      default:
        // Stream frames and heartbeats were handled by the link.
        return;
    }
  }
}

/** The User-Agent and Hello agent of the client's connections. */
export function clientAgent(role: string | null = null): string {
  return `burrow-client/${PROTOCOL_VERSION}${role ? ` ${role}` : ''}`;
}
