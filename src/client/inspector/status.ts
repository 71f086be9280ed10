import { EventEmitter } from 'node:events';
import type { TunnelClientEvents } from '../tunnel-client.js';

// What the inspector's status page (`/status`, like ngrok's) and its header show about the run:
// the tunnels with their public URLs, the server, the connection's state, its latency and the
// server's version. The CLI hands the inspector a StatusSource once its TunnelClient exists;
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

/** The `GET /api/status` document; null where not known (yet). */
export interface StatusJson {
  version: string;
  server: { url: string; version: string | null; latency_ms: number | null };
  state: ConnectionState;
  state_detail: string | null;
  tunnels: TunnelStatus[];
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
  }

  private set(state: ConnectionState, detail: string | null): void {
    this.state = state;
    this.detail = detail;
    this.emit('changed');
  }

  status(): Omit<StatusJson, 'version'> {
    return {
      server: { url: this.server, version: this.client.serverVersion ?? null, latency_ms: this.client.latencyMs ?? null },
      state: this.state,
      state_detail: this.detail,
      tunnels: this.tunnels.map((t) => ({ ...t })),
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
