import type { MessagePort } from 'node:worker_threads';
import type net from 'node:net';
import type { ShardContext } from './shard-context.js';
import type { ShardCounts, TunnelAdmitted, TunnelLaneAdmitted, TunnelMainToShard, TunnelRoute, StatsDelta } from '../protocol/tunnel-messages.js';
import { F, HEARTBEAT_MISSES, type HttpHead, type OpenRequest, type Opened, type RefusalCode } from '../protocol/frames.js';
import { ApiError, assertNever, unavailableError } from '../errors.js';
import { TunnelActor } from './tunnel.js';
import { ControlConnection, type ControlHost } from './control.js';
import { serveVisitor, TunnelVisitor } from './ingress.js';
import { Mesh } from './mesh.js';
import { DISCARD, FrontConnection, headerOf, type Exchange } from './front-connection.js';
import type { RequestHead } from '../protocol/http1-parser.js';
import type { VisitorResponse } from './visitor-response.js';
import { bindTcpPort, checkTcpRequest, serveTcp } from './tcp.js';
import type { Downstream, Upstream } from './stream.js';
import { VisitorLimit } from './visitor-limit.js';
import { AccessGate, admitHttpVisitor, hashAccess } from './access.js';
import { accessRulesProblem } from '../protocol/access.js';
import { countHttpAnswer } from './metrics.js';

// The tunnel data plane of one shard worker:
//
//   control WS ─▶ ControlConnection ─Open─▶ registry (main, tunnel-admit) ─▶ TunnelActor here
//   public HTTP (Host <id>.<domain>) ─▶ dispatch ─▶ local TunnelActor (owned, or the client's
//                                       lane here), else Mesh ─▶ owner shard
//   every STATS_REPORT_MS: counter deltas of this shard's tunnels ─▶ main (tunnel-stats)
//
// `routes` mirrors the registry's id → shard map (tunnel-route broadcasts), so routing a
// visitor costs one Map lookup and no round trip. A lane (frames.ts) is a TunnelActor here for
// a tunnel owned elsewhere, carried by another control connection of the same client; it
// lives while the route names its session (`routeSessions`), so it ends with its tunnel.

/** What the shard worker calls into the tunnel data plane. */
export interface ShardTunnels {
  /** The tunnel id of a Host header, or null when it is not public tunnel traffic. */
  tunnelOf(host: string): string | null;
  /** Serves a visitor request for tunnel `id` (access rules, limits, then the stream). */
  serve(conn: FrontConnection, head: RequestHead, res: VisitorResponse, id: string): Exchange;
  /** What control connections (edge/control.ts) need from this shard. */
  control: ControlHost;
  onMain(msg: TunnelMainToShard): unknown;
  /** A MessagePort to another shard (the mesh); re-sent when that shard restarts. */
  onPeer(shard: number, port: MessagePort): void;
  /** Key revoked / user deactivated: end those control connections now (permanent Fatal). */
  endConnections(keyIds: readonly string[], userIds: readonly string[], reason: string): void;
  /**
   * Shutdown: refuse new visitors, control connections, Opens and TCP connections; tell every
   * client (GoAway); close each control connection once its streams ended and this shard's
   * visitors are served, or when `timeoutMs` ran out.
   */
  drain(timeoutMs: number): Promise<void>;
}

/** Deltas leave a shard at most this often (≤ 250 ms: counters stay near-live without a message per chunk). */
export const STATS_REPORT_MS = 250;
const ADMIT_TIMEOUT_MS = 10_000;
/** setTimeout's longest wait (2^31-1 ms); an expiry further away re-arms. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** How often a drain looks for control connections whose streams all ended. */
const DRAIN_POLL_MS = 50;
const SHUTTING_DOWN = 'the server is shutting down; try again shortly';

export function installTunnels(ctx: ShardContext): ShardTunnels {
  const suffix = `.${ctx.config.domain}`;
  const log = ctx.log.child({ part: 'tunnels' });
  const tunnels = new Map<string, TunnelActor>();
  const routes = new Map<string, number>();
  /** The session each route belongs to: a lane of any other session is stale. */
  const routeSessions = new Map<string, string>();
  const dirty = new Set<TunnelActor>();
  const connections = new Set<ControlConnection>();
  const markDirty = (t: TunnelActor): void => void dirty.add(t);
  let revocations = 0;
  let pendingAdmissions = 0;
  const visitors = new VisitorLimit(ctx.config.visitorConcurrency);
  /** TCP tunnels' listeners: a drain stops accepting while open connections go on. */
  const tcpListeners = new Map<TunnelActor, net.Server>();
  let draining = false;
  /** Access gates (edge/access.ts): of this shard's tunnels, and of every routed one (the
   *  route carries them), so a visitor is checked wherever it lands. Null entries: no rules. */
  const localGates = new Map<TunnelActor, AccessGate | null>();
  const routeGates = new Map<string, AccessGate | null>();
  /** The gate of whichever tunnel would serve `id` from here (openAnywhere's order). */
  const gateFor = (id: string): AccessGate | null => {
    const t = tunnels.get(id);
    return t ? (localGates.get(t) ?? null) : (routeGates.get(id) ?? null);
  };
  /** Expiry timers of this shard's tunnels (--expires). */
  const expiries = new Map<TunnelActor, NodeJS.Timeout>();
  const forgetTunnel = (t: TunnelActor): void => {
    localGates.delete(t);
    clearTimeout(expiries.get(t));
    expiries.delete(t);
  };

  const openLocal = (tunnelId: string, head: HttpHead, down: Downstream): Upstream | null => {
    const t = tunnels.get(tunnelId);
    if (!t || t.spec.type !== 'http') return null;
    // A draining owner takes no new stream (one routed here by a shard that did not drain yet).
    const s = draining ? null : t.openStream(head, down);
    if (!s) {
      down.reset('busy');
      return { data() {}, end() {}, reset() {}, credit() {} };
    }
    return s;
  };
  const mesh = new Mesh(log, openLocal);

  const report = (t: TunnelActor, last: StatsDelta | null): void => {
    dirty.delete(t);
    // A lane's end is not its tunnel's: only its last counters go to the session.
    if (t.spec.lane) {
      if (last) ctx.main.tell({ type: 'tunnel-stats', deltas: [last] });
      return;
    }
    ctx.main.tell({ type: 'tunnel-down', id: t.id, sessionId: t.spec.sessionId, last });
  };

  /** A lane of tunnel `id` on this connection: serves the visitors that reach this shard. */
  const openLane = async (conn: ControlConnection, id: string, key: string): Promise<Opened> => {
    let admitted: TunnelLaneAdmitted;
    pendingAdmissions++;
    try {
      admitted = await ctx.main.ask<TunnelLaneAdmitted>({ type: 'tunnel-lane', id, userId: conn.principal.userId, key }, ADMIT_TIMEOUT_MS);
    } finally {
      pendingAdmissions--;
    }
    if (conn.isClosed) throw new ApiError('unavailable', 'the control connection closed while the lane was being admitted');
    // The route is the registration's truth here: a lane admitted just before its tunnel ended
    // or was taken over must not serve the id (a later route for it would find nothing to close).
    if (routeSessions.get(id) !== admitted.sessionId) throw new ApiError('unavailable', `tunnel "${id}" ended or moved while its lane was admitted`);
    if (tunnels.has(id)) throw new ApiError('conflict', `tunnel "${id}" already has a lane on this shard`);
    const actor = new TunnelActor(
      { id, type: 'http', userId: conn.principal.userId, teamId: admitted.teamId, sessionId: admitted.sessionId, url: admitted.url, remotePort: null, lane: true },
      conn,
      markDirty,
    );
    localGates.set(actor, AccessGate.of(admitted.access));
    tunnels.set(id, actor);
    conn.adopt(actor);
    log.debug({ id, user: conn.principal.userId }, 'tunnel lane opened');
    return { id, url: admitted.url, remotePort: null };
  };

  /** The route of `id` changed or went: a lane of another session closes (the client re-joins). */
  const closeStaleLane = (id: string): void => {
    const t = tunnels.get(id);
    if (t?.spec.lane && routeSessions.get(id) !== t.spec.sessionId) closeLocal(id, 'the tunnel ended or moved', false, t.spec.sessionId, 'unavailable');
  };

  const host: ControlHost = {
    ctx,
    log,
    connections,
    revocations: () => revocations,
    draining: () => draining,
    async open(conn: ControlConnection, req: OpenRequest) {
      if (draining) throw unavailableError(SHUTTING_DOWN);
      if (typeof req.lane === 'string' && typeof req.id === 'string') return openLane(conn, req.id, req.lane);
      const accessProblem = req.access ? accessRulesProblem(req.access, req.type) : null;
      if (accessProblem) throw new ApiError('bad-request', accessProblem);
      // Hashed now: the password goes no further than this function.
      const access = hashAccess(req.access);
      const gone = (): ApiError => new ApiError('unavailable', 'the control connection closed while the tunnel was being admitted');
      // TCP: the user's port quota is claimed from the registry before binding, so concurrent
      // Opens (any connection, any shard) cannot bind more than --max-tcp-ports-per-user.
      let claim: number | null = null;
      let tcp: Awaited<ReturnType<typeof bindTcpPort>> | null = null;
      if (req.type === 'tcp') {
        checkTcpRequest(ctx.config.tcpPortRange, req.remotePort ?? null);
        claim = (await ctx.main.ask<{ claim: number }>({ type: 'tunnel-port-claim', userId: conn.principal.userId, id: req.id ?? null }, ADMIT_TIMEOUT_MS)).claim;
        try {
          if (conn.isClosed) throw gone();
          tcp = await bindTcpPort(ctx.config.host, ctx.config.tcpPortRange, req.remotePort ?? null);
          if (conn.isClosed) throw gone();
        } catch (err) {
          tcp?.close();
          ctx.main.tell({ type: 'tunnel-port-release', claim });
          throw err;
        }
      }
      const port = tcp ? (tcp.address() as { port: number }).port : null;
      let admitted: TunnelAdmitted;
      pendingAdmissions++;
      try {
        admitted = await ctx.main.ask<TunnelAdmitted>(
          {
            type: 'tunnel-admit',
            userId: conn.principal.userId,
            keyId: conn.principal.keyId,
            tunnelType: req.type,
            id: req.id ?? null,
            teamId: req.teamId ?? null,
            remotePort: port,
            clientIp: conn.ip,
            access,
            claim,
            local: req.local ?? null,
          },
          ADMIT_TIMEOUT_MS,
        );
      } catch (err) {
        tcp?.close();
        throw err;
      } finally {
        pendingAdmissions--;
      }
      if (conn.isClosed) {
        // The client left (or was revoked) during admission: undo it, or the id stays routed
        // to nobody (503s), the port stays bound and the session open.
        tcp?.close();
        ctx.main.tell({ type: 'tunnel-down', id: admitted.id, sessionId: admitted.sessionId, last: null });
        throw gone();
      }
      // A takeover on this same shard: the registry's tunnel-close for the old one came first.
      const actor = new TunnelActor(
        { id: admitted.id, type: req.type, userId: conn.principal.userId, teamId: admitted.teamId, sessionId: admitted.sessionId, url: admitted.url, remotePort: port, lane: false },
        conn,
        markDirty,
      );
      const gate = AccessGate.of(access);
      localGates.set(actor, gate);
      tunnels.set(actor.id, actor);
      conn.adopt(actor);
      if (access?.expiresAt != null) expireAt(actor, access.expiresAt);
      if (tcp) {
        serveTcp(tcp, actor, gate);
        tcpListeners.set(actor, tcp);
      }
      log.info({ id: actor.id, type: req.type, user: conn.principal.userId }, 'tunnel registered');
      return { id: admitted.id, url: admitted.url, remotePort: port, ...(admitted.tookOver ? { tookOver: true } : {}), ...(admitted.laneKey ? { laneKey: admitted.laneKey } : {}) };
    },
    ended(actor: TunnelActor, last: StatsDelta | null) {
      if (tunnels.get(actor.id) === actor) tunnels.delete(actor.id);
      forgetTunnel(actor);
      tcpListeners.delete(actor);
      report(actor, last);
    },
  };

  const statsTimer = setInterval(() => {
    if (dirty.size === 0) return;
    const deltas: StatsDelta[] = [];
    for (const t of dirty) {
      const d = t.takeDelta();
      if (d) deltas.push(d);
    }
    dirty.clear();
    if (deltas.length) ctx.main.tell({ type: 'tunnel-stats', deltas });
  }, STATS_REPORT_MS);
  statsTimer.unref();

  const heartbeatMs = ctx.config.heartbeatIntervalMs;
  const heartbeatTimer = setInterval(() => {
    const now = Date.now();
    for (const c of connections) c.ping(now, heartbeatMs * HEARTBEAT_MISSES);
  }, heartbeatMs);
  heartbeatTimer.unref();

  // Learn where live tunnels are (a restarted shard starts empty).
  ctx.main
    .ask<TunnelRoute[]>({ type: 'tunnel-routes' }, ADMIT_TIMEOUT_MS)
    .then((list) => {
      for (const r of list) {
        if (routes.has(r.id)) continue;
        routes.set(r.id, r.shard);
        routeSessions.set(r.id, r.sessionId);
        routeGates.set(r.id, AccessGate.of(r.access));
      }
    })
    .catch((err: unknown) => log.warn({ err }, 'could not load tunnel routes'));

  const closeLocal = (tunnelId: string, reason: string, permanent: boolean, sessionId?: string, given?: RefusalCode): boolean => {
    const t = tunnels.get(tunnelId);
    if (!t || (sessionId !== undefined && t.spec.sessionId !== sessionId)) return false;
    tunnels.delete(tunnelId);
    tcpListeners.delete(t);
    forgetTunnel(t);
    const code = given ?? (reason.startsWith('taken over') ? 'taken-over' : permanent ? 'deleted' : 'unavailable');
    const last = t.close({ code, message: reason, permanent });
    for (const c of connections) c.drop(t);
    report(t, last);
    return true;
  };

  /** Ends `actor` at `at` (epoch ms); setTimeout takes at most ~24.8 days, so longer waits re-arm. */
  const expireAt = (actor: TunnelActor, at: number): void => {
    const wait = Math.min(Math.max(at - Date.now(), 0), MAX_TIMER_MS);
    const timer = setTimeout(() => {
      if (Date.now() < at) return expireAt(actor, at);
      log.info({ id: actor.id }, 'tunnel expired');
      closeLocal(actor.id, `the tunnel expired at ${new Date(at).toISOString()}`, true, actor.spec.sessionId, 'expired');
    }, wait);
    timer.unref();
    expiries.set(actor, timer);
  };

  /** The tunnel id of a Host header, or null when it is not public tunnel traffic. */
  const tunnelOf = (host: string): string | null => {
    const colon = host.lastIndexOf(':');
    const name = (colon > 0 && !host.endsWith(']') ? host.slice(0, colon) : host).toLowerCase();
    if (!name.endsWith(suffix) || name.length <= suffix.length) return null;
    const id = name.slice(0, -suffix.length);
    return id.includes('.') ? null : id;
  };
  const openAnywhere = (tunnelId: string, head: HttpHead, visitor: TunnelVisitor): Upstream | null => {
    const local = openLocal(tunnelId, head, visitor);
    if (local) return local;
    const shard = routes.get(tunnelId);
    if (shard === undefined || shard === ctx.index) return null;
    return mesh.open(shard, tunnelId, head, visitor);
  };

  return {
    tunnelOf,
    control: host,
    serve(conn, head, res, id) {
      const html = FrontConnection.wantsHtml(head);
      if (draining) {
        // A visitor request while draining: 503, and the connection closes (no keep-alive).
        res.closeAfter();
        countHttpAnswer(503);
        const err = unavailableError(SHUTTING_DOWN);
        res.problem('unavailable', SHUTTING_DOWN, { extra: err, html });
        return DISCARD;
      }
      const client = conn.clientOf(head);
      const admission = admitHttpVisitor(gateFor(id), client.ip, headerOf(head.headers, 'authorization') ?? '');
      if (admission.verdict === 'refused') {
        if (head.upgrade) res.closeAfter();
        res.problem(admission.code, admission.detail, { extra: { headers: admission.headers } });
        return DISCARD;
      }
      if (!visitors.admit(client.ip)) {
        if (head.upgrade) res.closeAfter();
        countHttpAnswer(429);
        res.problem('too-many-requests', `more than ${visitors.max} concurrent requests from ${client.ip} through this server; retry when some finish`, {
          extra: { headers: { 'retry-after': '1' } },
          html,
        });
        return DISCARD;
      }
      const colon = head.host!.lastIndexOf(':');
      const publicHost = colon > 0 && !head.host!.endsWith(']') ? head.host!.slice(0, colon) : head.host!;
      const visitor = new TunnelVisitor(conn, res, head, html, publicHost);
      serveVisitor(visitor, head, client, id, openAnywhere, admission.verdict === 'drop-authorization');
      // After the hand-over: the mesh may have replaced onDone, and a 404 is over already.
      visitors.track(client.ip, visitor);
      return visitor;
    },
    onMain(msg) {
      switch (msg.type) {
        case 'tunnel-close':
          return { closed: closeLocal(msg.tunnelId, msg.reason, msg.permanent, msg.sessionId, msg.code) };
        case 'tunnel-route':
          if (msg.shard === null) {
            routes.delete(msg.id);
            routeSessions.delete(msg.id);
            routeGates.delete(msg.id);
          } else {
            routes.set(msg.id, msg.shard);
            if (msg.sessionId !== undefined) routeSessions.set(msg.id, msg.sessionId);
            routeGates.set(msg.id, AccessGate.of(msg.access ?? null));
          }
          closeStaleLane(msg.id);
          return undefined;
        case 'tunnel-counts': {
          let streams = 0;
          for (const c of connections) streams += c.streamCount;
          const counts: ShardCounts = {
            shard: ctx.index,
            tunnels: tunnels.size,
            lanes: [...tunnels.values()].filter((t) => t.spec.lane).length,
            routes: routes.size,
            control_connections: connections.size,
            streams,
            mesh_streams: mesh.streamCount,
            pending_admissions: pendingAdmissions,
            heap_used_bytes: process.memoryUsage().heapUsed,
          };
          return counts;
        }
        default:
          return assertNever(msg);
      }
    },
    onPeer(shard, port) {
      mesh.attach(shard, port);
    },
    endConnections(keyIds, userIds, reason) {
      revocations++;
      const keys = new Set(keyIds);
      const users = new Set(userIds);
      for (const c of [...connections]) {
        if (!keys.has(c.principal.keyId) && !users.has(c.principal.userId)) continue;
        log.info({ ip: c.ip, user: c.principal.userId, key: c.principal.keyId, reason }, 'ending control connection');
        // Synchronous: the Fatal is written and the tunnels are down (tunnel-down sent) before
        // this shard acknowledges the invalidation, so before the API call answers.
        c.revoke(reason);
      }
    },
    async drain(timeoutMs) {
      draining = true;
      for (const tcp of tcpListeners.values()) tcp.close();
      for (const c of connections) c.send([F.GoAway, { timeoutMs }]);
      const until = Date.now() + timeoutMs;
      const idle = (c: ControlConnection): boolean => [...c.tunnels.values()].every((t) => t.streams.size === 0);
      const closeConnection = (c: ControlConnection): void => {
        for (const t of [...c.tunnels.values()]) closeLocal(t.id, 'the server is shutting down', false);
        c.goAway();
        connections.delete(c);
      };
      // Heartbeats go on meanwhile: a long request must not look like a dead connection.
      for (;;) {
        for (const c of [...connections]) if (idle(c)) closeConnection(c);
        if ((connections.size === 0 && visitors.inflight === 0) || Date.now() >= until) break;
        await new Promise((r) => setTimeout(r, DRAIN_POLL_MS));
      }
      if (connections.size > 0 || visitors.inflight > 0) log.warn({ connections: connections.size, visitors: visitors.inflight }, 'shutdown timeout: cutting open tunnel streams');
      for (const t of [...tunnels.values()]) closeLocal(t.id, 'the server is shutting down', false);
      for (const c of [...connections]) closeConnection(c);
      clearInterval(heartbeatTimer);
      clearInterval(statsTimer);
    },
  };
}
