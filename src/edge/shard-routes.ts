import type { RouteMember, TunnelRoute } from '../protocol/tunnel-messages.js';
import { AccessGate } from './access.js';
import type { TunnelActor } from './tunnel.js';

// RouteTable: where a shard looks a tunnel id up, without asking anyone.
//
//   tunnel-route broadcasts (main) ─▶ route(): id → its members (on a shard of this node, or on
//                                     another node), their sessions, the access gate
//   this shard's TunnelActors ──────▶ add() / remove(): members and lanes here, with their gates
//   a visitor for <id> ─────────────▶ pick(): one member per client, the nearest (this shard, this
//                                     node, another node), then the client with the fewest
//                                     streams in flight from here; gateFor(id)
//
// A tunnel has one member (one control connection) unless it is a pool (several clients) or its
// client keeps connections on two nodes of a cluster. The route is the registration's truth
// here: a lane (a TunnelActor here for a member elsewhere) lives while the route names its
// session, so staleLanes() finds the lanes a route change has ended.

/** What the table needs of a tunnel (TunnelActor; tests use plain objects). */
export interface RoutedTunnel {
  readonly id: string;
  readonly spec: { readonly lane: boolean; readonly sessionId: string };
  /** streams open on it now (the pick's load); absent: 0 */
  readonly streams?: { readonly size: number };
  /** closing (its streams are being ended): no new one is sent to it */
  readonly closed?: boolean;
}

/** A tunnel-route broadcast: `shard` null and no `node` when the tunnel is gone. */
export interface RouteUpdate {
  id: string;
  shard: number | null;
  /** cluster: the --node-url of the node whose client holds the tunnel */
  node?: string;
  sessionId?: string;
  access?: TunnelRoute['access'];
  /** every member (absent: the one of shard/node and sessionId) */
  members?: RouteMember[];
}

/** Where a visitor's stream goes. */
export type Target<T> =
  | { kind: 'here'; tunnel: T; client: string }
  | { kind: 'shard'; shard: number; session: string; client: string }
  | { kind: 'node'; url: string; session: string; client: string };

interface Route {
  members: RouteMember[];
  gate: AccessGate | null;
  /** several clients serve it (a pool): worked out once per route, read on every request */
  pooled: boolean;
}

/** A client whose local service refused a stream is skipped this long, doubling, until it answers again. */
const SKIP_FIRST_MS = 1_000;
const SKIP_MAX_MS = 10_000;
/** A node whose link failed is avoided this long (longer than its lease: a dead one is gone by then). */
const NODE_DOWN_MS = 5_000;

export class RouteTable<T extends RoutedTunnel = TunnelActor> {
  /** this shard's tunnels (members here, and lanes of members elsewhere), by id */
  private readonly tunnels = new Map<string, T[]>();
  /** tunnels whose client closed them while streams were open: no visitor of this shard is sent
   *  to them, but a stream another shard or node routed here before it heard still is */
  private readonly leaving = new Map<string, T[]>();
  /** Access gates (edge/access.ts) of this shard's tunnels, null: no rules. */
  private readonly localGates = new Map<T, AccessGate | null>();
  /** the registry's routes, as broadcast */
  private readonly routes = new Map<string, Route>();
  /** streams this shard has in flight to a member elsewhere, by session (the pick's load) */
  private readonly inflight = new Map<string, number>();
  /** clients skipped until then (ms), and how long the last skip was */
  private readonly skipped = new Map<string, { until: number; ms: number }>();
  /** nodes whose link failed, avoided until then (ms): their members are the last choice */
  private readonly downNodes = new Map<string, number>();
  private turn = 0;

  // ── this shard's tunnels ──

  /** The least busy tunnel of `id` on this shard (one that is leaving only when no other is here). */
  local(id: string): T | undefined {
    const list = this.tunnels.get(id) ?? this.leaving.get(id);
    if (!list) return undefined;
    // The hot path (every visitor request): no allocation; a closing tunnel is never chosen.
    let best: T | undefined;
    for (const t of list) if (!t.closed && (best === undefined || (t.streams?.size ?? 0) < (best.streams?.size ?? 0))) best = t;
    return best;
  }

  /** This shard's tunnel of `id` serving session `sessionId`. */
  localOf(id: string, sessionId: string): T | undefined {
    return this.tunnels.get(id)?.find((t) => t.spec.sessionId === sessionId);
  }

  /** `t` is leaving (its client closed it with streams open): out of this shard's picks, still reachable by local(). */
  retire(t: T): void {
    this.remove(t);
    const list = this.leaving.get(t.id) ?? [];
    list.push(t);
    this.leaving.set(t.id, list);
  }

  add(t: T, gate: AccessGate | null): void {
    this.localGates.set(t, gate);
    const list = this.tunnels.get(t.id) ?? [];
    list.push(t);
    this.tunnels.set(t.id, list);
  }

  /** `t` ended: it and its gate leave the table (another tunnel of its id stays). */
  remove(t: T): void {
    for (const map of [this.tunnels, this.leaving]) {
      const list = map.get(t.id);
      const i = list ? list.indexOf(t) : -1;
      if (i < 0) continue;
      list!.splice(i, 1);
      if (list!.length === 0) map.delete(t.id);
    }
    if (!this.leaving.get(t.id)?.includes(t)) this.localGates.delete(t);
  }

  *localTunnels(): IterableIterator<T> {
    for (const list of this.tunnels.values()) yield* list;
    for (const list of this.leaving.values()) yield* list;
  }

  get localCount(): number {
    let n = 0;
    for (const list of this.tunnels.values()) n += list.length;
    return n;
  }

  get laneCount(): number {
    let n = 0;
    for (const t of this.localTunnels()) if (t.spec.lane) n++;
    return n;
  }

  // ── the registry's routes ──

  /** Applies a tunnel-route broadcast. */
  route(r: RouteUpdate): void {
    const members = r.members ?? this.single(r);
    if (members.length === 0) {
      this.routes.delete(r.id);
      return;
    }
    this.routes.set(r.id, { members, gate: AccessGate.of(r.access ?? null), pooled: new Set(members.map((m) => m.client)).size > 1 });
  }

  /** An old-form route: one member, whose session a later route may leave out (kept). */
  private single(r: RouteUpdate): RouteMember[] {
    if (r.shard === null && r.node === undefined) return [];
    const session = r.sessionId ?? this.routes.get(r.id)?.members[0]?.session;
    if (session === undefined) return [];
    return [{ session, client: session, ...(r.shard !== null ? { shard: r.shard } : { node: r.node! }) }];
  }

  /** The routes a starting shard asked for (tunnel-routes); a broadcast that came first wins. */
  load(list: readonly TunnelRoute[]): void {
    for (const r of list) {
      if (this.routes.has(r.id)) continue;
      this.route({ id: r.id, shard: r.node === undefined ? r.shard : null, ...(r.node !== undefined ? { node: r.node } : {}), sessionId: r.sessionId, access: r.access, ...(r.members ? { members: r.members } : {}) });
    }
  }

  /** The shard of this node holding a member of `id` (the first one named). */
  shardOf(id: string): number | undefined {
    return this.routes.get(id)?.members.find((m) => m.shard !== undefined)?.shard;
  }

  /** cluster: the URL of a node holding `id`, when only other nodes do */
  nodeOf(id: string): string | undefined {
    const members = this.routes.get(id)?.members;
    if (!members || members.some((m) => m.shard !== undefined)) return undefined;
    return members[0]?.node;
  }

  /** The first member's session (a single-member tunnel's only one). */
  sessionOf(id: string): string | undefined {
    return this.routes.get(id)?.members[0]?.session;
  }

  /** Whether the route names `session` among the members of `id`. */
  hasSession(id: string, session: string): boolean {
    return this.routes.get(id)?.members.some((m) => m.session === session) ?? false;
  }

  get routeCount(): number {
    return this.routes.size;
  }

  /**
   * Where a visitor of `id` arriving at shard `self` goes: for each client, its nearest member
   * (a tunnel here, else a member on another shard of this node, else, with `cluster`, on
   * another node); of those, the one with the fewest streams in flight from here, clients whose
   * local service refused lately last. Null: nothing serves `id` within reach.
   */
  pick(id: string, self: number, cluster: boolean): Target<T> | null {
    const route = this.routes.get(id);
    if (!route || route.members.length <= 1) {
      // One member (the common case): no grouping, no load to compare.
      const t = this.local(id);
      if (t) return { kind: 'here', tunnel: t, client: t.spec.sessionId };
      const m = route?.members[0];
      if (!m) return null;
      if (m.shard !== undefined) return m.shard === self ? null : { kind: 'shard', shard: m.shard, session: m.session, client: m.client };
      return cluster && m.node !== undefined ? { kind: 'node', url: m.node, session: m.session, client: m.client } : null;
    }
    const here = (this.tunnels.get(id) ?? []).filter((t) => !t.closed);
    const nearest = new Map<string, { target: Target<T>; rank: number; load: number }>();
    const offer = (client: string, target: Target<T>, rank: number, load: number): void => {
      const had = nearest.get(client);
      if (!had || rank < had.rank || (rank === had.rank && load < had.load)) nearest.set(client, { target, rank, load });
    };
    for (const m of route.members) {
      const t = here.find((x) => x.spec.sessionId === m.session);
      if (t) offer(m.client, { kind: 'here', tunnel: t, client: m.client }, 0, t.streams?.size ?? 0);
      else if (m.shard !== undefined && m.shard !== self) offer(m.client, { kind: 'shard', shard: m.shard, session: m.session, client: m.client }, 1, this.inflight.get(m.session) ?? 0);
      else if (cluster && m.node !== undefined) {
        const down = (this.downNodes.get(m.node) ?? 0) > Date.now();
        offer(m.client, { kind: 'node', url: m.node, session: m.session, client: m.client }, down ? 3 : 2, this.inflight.get(m.session) ?? 0);
      }
    }
    if (nearest.size === 0) {
      // Only a member that is leaving is within reach: it still serves.
      const t = this.local(id);
      return t ? { kind: 'here', tunnel: t, client: t.spec.sessionId } : null;
    }
    const now = Date.now();
    const reachable = [...nearest.entries()].filter(([, o]) => o.rank < 3);
    const options = reachable.length > 0 ? reachable : [...nearest.entries()];
    const healthy = options.filter(([client]) => (this.skipped.get(client)?.until ?? 0) <= now);
    const pool = healthy.length > 0 ? healthy : options;
    // Equal loads take turns, so an idle pool still spreads its visitors.
    const start = this.turn++ % pool.length;
    let best = pool[start]![1];
    for (let i = 1; i < pool.length; i++) {
      const o = pool[(start + i) % pool.length]![1];
      if (o.load < best.load) best = o;
    }
    return best.target;
  }

  /** Whether `id` has several clients (a pool): only then are loads and refusals kept. */
  pooled(id: string): boolean {
    return this.routes.get(id)?.pooled ?? false;
  }

  /** A stream to a member elsewhere began / ended (the pick's load). */
  began(session: string): void {
    this.inflight.set(session, (this.inflight.get(session) ?? 0) + 1);
  }

  ended(session: string): void {
    const n = (this.inflight.get(session) ?? 1) - 1;
    if (n > 0) this.inflight.set(session, n);
    else this.inflight.delete(session);
  }

  /** The client's local service refused a stream: skip it for a while (longer each time). */
  refused(client: string): void {
    const ms = Math.min(SKIP_MAX_MS, (this.skipped.get(client)?.ms ?? SKIP_FIRST_MS / 2) * 2);
    this.skipped.set(client, { until: Date.now() + ms, ms });
  }

  /** The link to node `url` failed: its members are the last choice for a while (a dead node's lease runs out meanwhile). */
  nodeDown(url: string): void {
    this.downNodes.set(url, Date.now() + NODE_DOWN_MS);
  }

  nodeUp(url: string): void {
    this.downNodes.delete(url);
  }

  /** The client answered: no longer skipped. */
  answered(client: string): void {
    this.skipped.delete(client);
  }

  /** The gate of whichever tunnel would serve `id` from here: this shard's (owned or lane) first, else the route's. */
  gateFor(id: string): AccessGate | null {
    const t = this.tunnels.get(id)?.[0];
    return t ? (this.localGates.get(t) ?? null) : (this.routes.get(id)?.gate ?? null);
  }

  /** Lanes of `id` here whose session the route no longer names (they must close). */
  staleLanes(id: string): T[] {
    return (this.tunnels.get(id) ?? []).filter((t) => t.spec.lane && !this.hasSession(id, t.spec.sessionId));
  }

  /** The first of staleLanes(id), or null. */
  staleLane(id: string): T | null {
    return this.staleLanes(id)[0] ?? null;
  }
}
