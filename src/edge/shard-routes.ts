import type { TunnelRoute } from '../protocol/tunnel-messages.js';
import { AccessGate } from './access.js';
import type { TunnelActor } from './tunnel.js';

// RouteTable: where a shard looks a tunnel id up, without asking anyone.
//
//   tunnel-route broadcasts (main) ─▶ route(): id → owner shard, its session, its access gate
//   this shard's TunnelActors ──────▶ add() / remove(): owned tunnels and lanes, with their gates
//   a visitor for <id> ─────────────▶ local(id) ?? shardOf(id) (mesh); gateFor(id): same order
//
// The route is the registration's truth here: a lane (a TunnelActor here for a tunnel owned
// elsewhere) lives while the route names its session, so staleLane() finds the lane a route
// change (another session, or none) has ended.

/** What the table needs of a tunnel (TunnelActor; tests use plain objects). */
export interface RoutedTunnel {
  readonly id: string;
  readonly spec: { readonly lane: boolean; readonly sessionId: string };
}

/** A tunnel-route broadcast: `shard` null when the tunnel is gone (or on another node: `node`). */
export interface RouteUpdate {
  id: string;
  shard: number | null;
  /** cluster: the --node-url of the node whose client holds the tunnel */
  node?: string;
  sessionId?: string;
  access?: TunnelRoute['access'];
}

export class RouteTable<T extends RoutedTunnel = TunnelActor> {
  /** this shard's tunnels (owned, or lanes of tunnels owned elsewhere), by id */
  private readonly tunnels = new Map<string, T>();
  /** Access gates (edge/access.ts) of this shard's tunnels, null: no rules. */
  private readonly localGates = new Map<T, AccessGate | null>();
  /** the registry's id → shard map, as broadcast */
  private readonly routes = new Map<string, number>();
  /** cluster: tunnels held on other nodes, id → that node's URL */
  private readonly remote = new Map<string, string>();
  /** The session each route belongs to: a lane of any other session is stale. */
  private readonly routeSessions = new Map<string, string>();
  /** Gates of every routed tunnel (the route carries them): a visitor is checked wherever it lands. */
  private readonly routeGates = new Map<string, AccessGate | null>();

  // ── this shard's tunnels ──

  local(id: string): T | undefined {
    return this.tunnels.get(id);
  }

  add(t: T, gate: AccessGate | null): void {
    this.localGates.set(t, gate);
    this.tunnels.set(t.id, t);
  }

  /** `t` ended: it leaves the table if it still holds its id (a takeover may have replaced it); its gate goes either way. */
  remove(t: T): void {
    if (this.tunnels.get(t.id) === t) this.tunnels.delete(t.id);
    this.localGates.delete(t);
  }

  localTunnels(): IterableIterator<T> {
    return this.tunnels.values();
  }

  get localCount(): number {
    return this.tunnels.size;
  }

  get laneCount(): number {
    let n = 0;
    for (const t of this.tunnels.values()) if (t.spec.lane) n++;
    return n;
  }

  // ── the registry's routes ──

  /** Applies a tunnel-route broadcast. */
  route(r: RouteUpdate): void {
    if (r.shard === null) {
      this.routes.delete(r.id);
      if (r.node === undefined) {
        this.remote.delete(r.id);
        this.routeSessions.delete(r.id);
        this.routeGates.delete(r.id);
        return;
      }
      this.remote.set(r.id, r.node);
    } else {
      this.remote.delete(r.id);
      this.routes.set(r.id, r.shard);
    }
    if (r.sessionId !== undefined) this.routeSessions.set(r.id, r.sessionId);
    this.routeGates.set(r.id, AccessGate.of(r.access ?? null));
  }

  /** The routes a starting shard asked for (tunnel-routes); a broadcast that came first wins. */
  load(list: readonly TunnelRoute[]): void {
    for (const r of list) {
      if (this.routes.has(r.id) || this.remote.has(r.id)) continue;
      if (r.node !== undefined) this.remote.set(r.id, r.node);
      else this.routes.set(r.id, r.shard);
      this.routeSessions.set(r.id, r.sessionId);
      this.routeGates.set(r.id, AccessGate.of(r.access));
    }
  }

  shardOf(id: string): number | undefined {
    return this.routes.get(id);
  }

  /** cluster: the URL of the node holding `id`, when another node does */
  nodeOf(id: string): string | undefined {
    return this.remote.get(id);
  }

  sessionOf(id: string): string | undefined {
    return this.routeSessions.get(id);
  }

  get routeCount(): number {
    return this.routes.size + this.remote.size;
  }

  /** The gate of whichever tunnel would serve `id` from here: this shard's (owned or lane) first, else the route's. */
  gateFor(id: string): AccessGate | null {
    const t = this.tunnels.get(id);
    return t ? (this.localGates.get(t) ?? null) : (this.routeGates.get(id) ?? null);
  }

  /** A lane of `id` here whose session the route no longer names (it must close), or null. */
  staleLane(id: string): T | null {
    const t = this.tunnels.get(id);
    return t?.spec.lane && this.routeSessions.get(id) !== t.spec.sessionId ? t : null;
  }
}
