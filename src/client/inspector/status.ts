import { EventEmitter } from 'node:events';
import type { TunnelClientEvents } from '../tunnel-client.js';
import { ExposeStats } from '../../cli/expose-stats.js';

// What the inspector's status page (`/status`, like ngrok's) and its header show about the run:
// the tunnels with their public URLs and the terminal's figures (ttl, opn, rt1, rt5, p50, p90),
// the server, the connection's state, its latency and the server's version. The CLI hands the inspector a StatusSource once its TunnelClient exists;
// `trackClient` makes one from the client's events.

export type ConnectionState = 'connecting' | 'online' | 'reconnecting' | 'closed';

export interface TunnelStatus {
  /** The burrow.yml entry's name (`burrow start`), or the tunnel's type (`burrow http`). */
  name: string;
  type: 'http' | 'tcp';
  /** The id the server gave it; null until registered. */
  id: string | null;
  /** The public URL; null until registered. */
  url: string | null;
  /** The local service, as the status screen shows it ("http://localhost:3000"). */
  local: string;
  /** Why it was refused or closed for good; null while it runs. */
  failed: string | null;
}

/** The terminal's figures for one tunnel (ngrok's): requests or connections, open, rates, percentiles. */
export interface TunnelFigures {
  /** requests (http) or connections (tcp) so far */
  ttl: number;
  /** streams open now */
  opn: number;
  /** arrivals per second over the last minute and five minutes */
  rt1: number;
  rt5: number;
  /** median and 90th percentile duration (ms) of the recent ones; null before the first */
  p50_ms: number | null;
  p90_ms: number | null;
}

/** The `GET /api/status` document; null where not known (yet). */
export interface StatusJson {
  version: string;
  server: { url: string; version: string | null; latency_ms: number | null };
  state: ConnectionState;
  state_detail: string | null;
  tunnels: (TunnelStatus & { figures: TunnelFigures })[];
}

export interface StatusSource {
  status(): Omit<StatusJson, 'version'>;
  /** Fires when a tunnel or the connection changed (latency changes with every heartbeat and is read when asked). */
  on(event: 'changed', listener: () => void): unknown;
  off(event: 'changed', listener: () => void): unknown;
}

/**
 * The parts of a TunnelClient the status reads. `latencyMs` (the last heartbeat's round trip)
 * and `serverVersion` are optional so that a client without them still tracks ("—" on the page).
 */
export interface StatusClient extends Pick<EventEmitter<TunnelClientEvents>, 'on'> {
  readonly latencyMs?: number | null;
  readonly serverVersion?: string | null;
}

class ClientStatus extends EventEmitter<{ changed: [] }> implements StatusSource {
  private state: ConnectionState = 'connecting';
  private detail: string | null = null;
  /** Per tunnel name: the same counters the terminal's status block shows. */
  private readonly stats = new Map<string, ExposeStats>();

  constructor(
    private readonly client: StatusClient,
    private readonly server: string,
    private readonly tunnels: TunnelStatus[],
  ) {
    super();
    const tunnel = (name: string) => this.tunnels.find((t) => t.name === name);
    client.on('registered', (r) => {
      const t = tunnel(r.tunnel);
      if (t) Object.assign(t, { id: r.id, url: r.url, failed: null });
      this.set('online', null);
    });
    client.on('reconnecting', (r) => this.set('reconnecting', `attempt ${r.attempt}: ${r.reason}`));
    client.on('tunnel-failed', (f) => {
      const t = tunnel(f.tunnel);
      if (t) t.failed = f.reason;
      this.emit('changed');
    });
    client.on('closed', (c) => this.set('closed', c.reason));
    const statsOf = (name: string) => this.stats.get(name) ?? this.stats.set(name, new ExposeStats()).get(name)!;
    client.on('request', (e) => statsOf(e.tunnel).addRequest(e));
    client.on('connection', (e) => statsOf(e.tunnel).addConnection(e));
    client.on('open-streams', (n, name) => void (statsOf(name).openStreams = n));
  }

  private figures(t: TunnelStatus, now: number): TunnelFigures {
    const s = this.stats.get(t.name) ?? new ExposeStats(now);
    return { ttl: t.type === 'http' ? s.requests : s.connections, opn: s.openStreams, rt1: s.rate(60, now), rt5: s.rate(300, now), p50_ms: s.percentile(50), p90_ms: s.percentile(90) };
  }

  private set(state: ConnectionState, detail: string | null): void {
    this.state = state;
    this.detail = detail;
    this.emit('changed');
  }

  status(): Omit<StatusJson, 'version'> {
    const now = Date.now();
    return {
      server: { url: this.server, version: this.client.serverVersion ?? null, latency_ms: this.client.latencyMs ?? null },
      state: this.state,
      state_detail: this.detail,
      tunnels: this.tunnels.map((t) => ({ ...t, figures: this.figures(t, now) })),
    };
  }
}

/** A StatusSource that follows `client` from now on (give it before the client starts). */
export function trackClient(client: StatusClient, server: string, tunnels: readonly { name: string; type: 'http' | 'tcp'; local: string }[]): StatusSource {
  return new ClientStatus(
    client,
    server,
    tunnels.map((t) => ({ name: t.name, type: t.type, local: t.local, id: null, url: null, failed: null })),
  );
}
