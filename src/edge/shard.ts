import type { MessagePort } from 'node:worker_threads';
import type net from 'node:net';
import type { ClusterLinks, ShardContext } from './shard-context.js';
import type { ShardCounts, TunnelAdmitted, TunnelMainToShard, TunnelMainToShardReplies, StatsDelta } from '../protocol/tunnel-messages.js';
import type { HandlerAnswer } from '../protocol/messages.js';
import { HEARTBEAT_MISSES, type HttpHead, type OpenRequest, type RefusalCode, type StreamHead } from '../protocol/frames.js';
import { ApiError, assertNever, unavailableError } from '../errors.js';
import { TunnelActor } from './tunnel.js';
import { ControlConnection, type ControlHost } from './control.js';
import { HandshakeGate, handshakeBound } from './handshake-gate.js';
import { serveVisitor, TunnelVisitor } from './ingress.js';
import { Mesh } from './mesh.js';
import { DISCARD, FrontConnection, headerOf, type Exchange } from './front-connection.js';
import type { RequestHead } from '../protocol/http1-parser.js';
import type { VisitorAnswer, VisitorConnection } from './visitor-port.js';
import { bindTcpPort, checkTcpRequest, relayTcp, serveTcp } from './tcp.js';
import type { Downstream, Upstream } from './stream.js';
import { VisitorLimit } from './visitor-limit.js';
import { AccessGate, admitHttpVisitor, hashAccess } from './access.js';
import { accessRulesProblem, type AccessWire } from '../protocol/access.js';
import { countHttpAnswer } from './metrics.js';
import { visitorBuffers } from './visitor-buffers.js';
import { RouteTable } from './shard-routes.js';
import { ShardLanes } from './shard-lanes.js';
import { ExpiryTimers } from './shard-expiry.js';
import { StatsReporter } from './shard-stats.js';
import { drainTunnels } from './shard-drain.js';
import type { PortLike } from '../actors/actor.js';

// The tunnel data plane of one shard worker:
//
//   control WS ─▶ ControlConnection ─Open─▶ registry (main, tunnel-admit) ─▶ TunnelActor here
//   public HTTP (Host <id>.<domain>) ─▶ dispatch ─▶ local TunnelActor (owned, or the client's
//                                       lane here), else Mesh ─▶ owner shard
//   every STATS_REPORT_MS: counter deltas of this shard's tunnels ─▶ main (tunnel-stats)
//
// installTunnels wires named parts, each in its own file and tested in-process:
//   RouteTable (shard-routes.ts)   this shard's tunnels and the registry's routes, with their
//                                  sessions and access gates: routing a visitor is a Map lookup
//   ShardLanes (shard-lanes.ts)    a client's lane here for a tunnel owned elsewhere; it lives
//                                  while the route names its session, so it ends with its tunnel
//   ExpiryTimers (shard-expiry.ts) --expires, re-armed past setTimeout's longest wait
//   StatsReporter (shard-stats.ts) dirty tunnels' deltas every STATS_REPORT_MS; tunnel-down
//   drainTunnels (shard-drain.ts)  shutdown: GoAway, close idle connections, cut at the timeout
// What stays here: admission (open), closing (closeLocal), serving visitors, main's messages.

/** What the shard worker calls into the tunnel data plane. */
export interface ShardTunnels {
  /** The tunnel id of a Host header, or null when it is not public tunnel traffic. */
  tunnelOf(host: string): string | null;
  /** Serves a visitor request for tunnel `id` (access rules, limits, then the stream). */
  serve(conn: VisitorConnection, head: RequestHead, res: VisitorAnswer, id: string): Exchange;
  /** What control connections (edge/control.ts) need from this shard. */
  control: ControlHost;
  /** main's data-plane messages; an ask's answer is its TunnelMainToShardReplies entry. */
  onMain(msg: TunnelMainToShard): HandlerAnswer<TunnelMainToShardReplies>;
  /** --node-url: links to and from the other nodes of the cluster; null on a single node. */
  links: ClusterLinks | null;
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

export { STATS_REPORT_MS } from './shard-stats.js';
const ADMIT_TIMEOUT_MS = 10_000;
/** A TCP port this node follows that could not be bound is tried again this often. */
const FOLLOW_RETRY_MS = 250;
const SHUTTING_DOWN = 'the server is shutting down; try again shortly';

export function installTunnels(ctx: ShardContext): ShardTunnels {
  const suffix = `.${ctx.config.domain}`;
  const log = ctx.log.child({ part: 'tunnels' });
  /** this shard's tunnels and lanes, and the registry's routes, with their access gates */
  const routes = new RouteTable<TunnelActor>();
  const stats = new StatsReporter<TunnelActor>((msg) => ctx.main.tell(msg));
  /** Expiry timers of this shard's tunnels (--expires). */
  const expiries = new ExpiryTimers<TunnelActor>();
  const connections = new Set<ControlConnection>();
  let revocations = 0;
  let pendingAdmissions = 0;
  /** An admission asked of the registry, counted while it waits (tunnel-counts). */
  const admitting = async <T>(ask: Promise<T>): Promise<T> => {
    pendingAdmissions++;
    try {
      return await ask;
    } finally {
      pendingAdmissions--;
    }
  };
  const visitors = new VisitorLimit(ctx.config.visitorConcurrency);
  /** TCP tunnels' listeners: a drain stops accepting while open connections go on. */
  const tcpListeners = new Map<TunnelActor, net.Server>();
  let draining = false;
  /** `t` is over here: its gate, expiry timer and listener entry go. */
  const forgetTunnel = (t: TunnelActor): void => {
    routes.remove(t);
    expiries.cancel(t);
    tcpListeners.delete(t);
  };

  /** A stream on `t` (or the tunnel of `tunnelId` here): a draining shard refuses it ('busy'). */
  const openOn = (t: TunnelActor | undefined, head: StreamHead, down: Downstream): Upstream | null => {
    // A TCP stream comes only from a link (this node's TCP visitors arrive at the owner's listener).
    if (!t || t.spec.type !== head.kind) return null;
    // A draining owner takes no new stream (one routed here by a shard that did not drain yet).
    const s = draining ? null : t.openStream(head, down);
    if (!s) {
      down.reset('busy');
      return { data() {}, end() {}, reset() {}, credit() {} };
    }
    return s;
  };
  const openLocal = (tunnelId: string, head: StreamHead, down: Downstream): Upstream | null => openOn(routes.local(tunnelId), head, down);
  const mesh = new Mesh(log, openLocal);

  const closeLocal = (tunnelId: string, reason: string, permanent: boolean, sessionId?: string, given?: RefusalCode): boolean => {
    const t = sessionId === undefined ? routes.local(tunnelId) : routes.localOf(tunnelId, sessionId);
    if (!t) return false;
    closeActor(t, reason, permanent, given);
    return true;
  };
  const closeActor = (t: TunnelActor, reason: string, permanent: boolean, given?: RefusalCode): void => {
    if (t.closed) return;
    forgetTunnel(t);
    const code = given ?? (reason.startsWith('taken over') ? 'taken-over' : permanent ? 'deleted' : 'unavailable');
    const last = t.close({ code, message: reason, permanent });
    for (const c of connections) c.drop(t);
    stats.ended(t, last);
  };

  const lanes = new ShardLanes({
    log,
    routes,
    admit: (msg) => admitting(ctx.main.ask(msg, ADMIT_TIMEOUT_MS)),
    markDirty: stats.markDirty,
    closeLocal,
    closeActor,
  });

  /** Ends `actor` at `at` (epoch ms), permanently (the client prints that it expired). */
  const expireAt = (actor: TunnelActor, at: number): void =>
    expiries.arm(actor, at, () => {
      log.info({ id: actor.id }, 'tunnel expired');
      closeLocal(actor.id, `the tunnel expired at ${new Date(at).toISOString()}`, true, actor.spec.sessionId, 'expired');
    });

  const host: ControlHost = {
    ctx,
    log,
    connections,
    connectionsByUser: new Map(),
    revocations: () => revocations,
    draining: () => draining,
    handshakes: new HandshakeGate(handshakeBound(ctx.config.workers)),
    nodes: () => (ctx.config.nodeUrl === null ? null : { node: ctx.config.nodeUrl, nodes: peerNodes.filter((u) => u !== ctx.config.nodeUrl) }),
    async open(conn: ControlConnection, req: OpenRequest) {
      if (draining) throw unavailableError(SHUTTING_DOWN);
      if (typeof req.lane === 'string' && typeof req.id === 'string') return lanes.open(conn, req.id, req.lane);
      const accessProblem = req.access ? accessRulesProblem(req.access, req.type) : null;
      if (accessProblem) throw new ApiError('bad-request', accessProblem);
      // Hashed now: the password goes no further than this function.
      const access = hashAccess(req.access, ctx.accessTagKey);
      const gone = (): ApiError => new ApiError('unavailable', 'the control connection closed while the tunnel was being admitted');
      // TCP: the user's port quota is claimed from the registry before binding, so concurrent
      // Opens (any connection, any shard) cannot bind more than --max-tcp-ports-per-user.
      let claim: number | null = null;
      let tcp: Awaited<ReturnType<typeof bindTcpPort>> | null = null;
      // A member joining its client's registration (cluster) binds nothing: the registration has
      // its port, and this node's listener of it (followRemoteTcp) serves the member.
      if (req.type === 'tcp' && typeof req.member !== 'string') {
        checkTcpRequest(ctx.config.tcpPortRange, req.remotePort ?? null);
        claim = (await ctx.main.ask({ type: 'tunnel-port-claim', userId: conn.principal.userId, id: req.id ?? null }, ADMIT_TIMEOUT_MS)).claim;
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
      const bound = tcp ? (tcp.address() as { port: number }).port : null;
      let admitted: TunnelAdmitted;
      try {
        admitted = await admitting(
          ctx.main.ask(
            {
              type: 'tunnel-admit',
              userId: conn.principal.userId,
              keyId: conn.principal.keyId,
              tunnelType: req.type,
              id: req.id ?? null,
              teamId: req.teamId ?? null,
              remotePort: bound,
              clientIp: conn.ip,
              access,
              claim,
              local: req.local ?? null,
              pool: req.pool === true,
              member: req.member ?? null,
            },
            ADMIT_TIMEOUT_MS,
          ),
        );
      } catch (err) {
        tcp?.close();
        throw err;
      }
      if (conn.isClosed) {
        // The client left (or was revoked) during admission: undo it, or the id stays routed
        // to nobody (503s), the port stays bound and the session open.
        tcp?.close();
        ctx.main.tell({ type: 'tunnel-down', id: admitted.id, sessionId: admitted.sessionId, last: null });
        throw gone();
      }
      const port = bound ?? admitted.remotePort;
      // A takeover on this same shard: the registry's tunnel-close for the old one came first.
      const actor = new TunnelActor(
        { id: admitted.id, type: req.type, userId: conn.principal.userId, teamId: admitted.teamId, sessionId: admitted.sessionId, url: admitted.url, remotePort: port, lane: false },
        conn,
        stats.markDirty,
      );
      // A pool's (or a joined client's) rules are its registration's, not this Open's.
      const gate = AccessGate.of(admitted.access);
      routes.add(actor, gate);
      conn.adopt(actor);
      // A pool admits a member whose --expires is within a minute of its own: each ends at the earlier.
      const ends = [admitted.access?.expiresAt, access?.expiresAt].filter((x): x is number => typeof x === 'number');
      if (ends.length > 0) expireAt(actor, Math.min(...ends));
      if (tcp) {
        serveTcp(tcp, actor, gate);
        tcpListeners.set(actor, tcp);
      }
      log.info({ id: actor.id, type: req.type, user: conn.principal.userId }, 'tunnel registered');
      return {
        id: admitted.id,
        url: admitted.url,
        remotePort: port,
        ...(admitted.tookOver ? { tookOver: true } : {}),
        ...(admitted.laneKey ? { laneKey: admitted.laneKey } : {}),
        ...(admitted.memberKey ? { memberKey: admitted.memberKey } : {}),
      };
    },
    ended(actor: TunnelActor, last: StatsDelta | null) {
      forgetTunnel(actor);
      stats.ended(actor, last);
    },
    leaving(actor: TunnelActor) {
      routes.retire(actor);
      tcpListeners.get(actor)?.close();
      // Out of every route now (its session stays open for the streams' counters): a lane is no member.
      if (!actor.spec.lane) ctx.main.tell({ type: 'tunnel-leave', id: actor.id, sessionId: actor.spec.sessionId });
    },
  };

  const heartbeatMs = ctx.config.heartbeatIntervalMs;
  const heartbeatTimer = setInterval(() => {
    const now = Date.now();
    for (const c of connections) c.ping(now, heartbeatMs * HEARTBEAT_MISSES);
  }, heartbeatMs);
  heartbeatTimer.unref();

  // Learn where live tunnels are (a restarted shard starts empty).
  ctx.main
    .ask({ type: 'tunnel-routes' }, ADMIT_TIMEOUT_MS)
    .then(({ routes: list, nodes }) => {
      routes.load(list);
      for (const r of list) followRemoteTcp(r.id, r.portHeld !== true, r.port, r.access);
      if (nodes) peerNodes = nodes;
    })
    .catch((err: unknown) => log.warn({ err }, 'could not load tunnel routes'));

  /** The tunnel id of a Host header, or null when it is not public tunnel traffic. */
  const tunnelOf = (host: string): string | null => {
    const colon = host.lastIndexOf(':');
    const name = (colon > 0 && !host.endsWith(']') ? host.slice(0, colon) : host).toLowerCase();
    if (!name.endsWith(suffix) || name.length <= suffix.length) return null;
    const id = name.slice(0, -suffix.length);
    return id.includes('.') ? null : id;
  };
  /**
   * A visitor's stream on tunnel `tunnelId`, wherever routes.pick sends it: here (a member or a
   * lane), another shard (the mesh), or, with `cluster`, another node (a link). For a pool, the
   * stream's load and a refusal by the client's local service are noted for the next pick.
   */
  const openStream = (tunnelId: string, head: StreamHead, down: Downstream & { onDone: (() => void) | null }, cluster: boolean): Upstream | null => {
    const target = routes.pick(tunnelId, ctx.index, cluster);
    if (!target) return null;
    const pooled = routes.pooled(tunnelId);
    if (pooled) watchRefusals(target.client, down);
    if (target.kind === 'here') return openOn(target.tunnel, head, down);
    const up = target.kind === 'shard' ? mesh.open(target.shard, tunnelId, head, down) : (links?.open(target.url, tunnelId, head, down) ?? null);
    if (up && pooled) {
      // In flight from here until the carrier's done (it set onDone as it opened the stream).
      const session = target.session;
      routes.began(session);
      const done = down.onDone;
      down.onDone = () => {
        routes.ended(session);
        done?.();
      };
    }
    return up;
  };
  /** A pooled stream: a refusal by the client's local service skips that client a while; an answer ends the skip. */
  const watchRefusals = (client: string, down: Downstream): void => {
    const reset = down.reset.bind(down);
    const response = down.response.bind(down);
    down.reset = (code, vanished) => {
      if (code === 'local-unreachable') routes.refused(client);
      reset(code, vanished);
    };
    down.response = (head) => {
      routes.answered(client);
      response(head);
    };
  };
  /** A stream on a tunnel of this node: what a link from another node opens (never a second hop). */
  const openOnNode = (tunnelId: string, head: StreamHead, down: Downstream & { onDone: (() => void) | null }): Upstream | null => openStream(tunnelId, head, down, false);
  /** cluster: the live nodes' URLs, as main last sent them (Welcome names them to clients) */
  let peerNodes: string[] = [];
  /** cluster: listeners of TCP tunnels held on other nodes (every node answers on the port), by id */
  const remoteTcp = new Map<string, { port: number; close: () => void }>();
  /** A TCP tunnel answers on its port on every node: where no member here bound it (members
   *  elsewhere only, or members that joined their client's registration), one shard of this node
   *  (port mod shards) listens and relays each connection to the nearest member. */
  const followRemoteTcp = (id: string, unheld: boolean, port: number | null | undefined, access: AccessWire | null | undefined, retries = 0): void => {
    const held = remoteTcp.get(id);
    const wanted = unheld && typeof port === 'number' && port % ctx.config.workers === ctx.index;
    if (held && (!wanted || held.port !== port)) {
      remoteTcp.delete(id);
      held.close();
    }
    if (!wanted || remoteTcp.has(id) || !links || draining) return;
    const entry = { port: port!, close: () => undefined as void };
    remoteTcp.set(id, entry);
    bindTcpPort(ctx.config.host, { min: port!, max: port! }, port!).then(
      (server) => {
        if (remoteTcp.get(id) !== entry) return void server.close();
        // Each connection goes to the nearest member now (a client on two nodes has two).
        entry.close = relayTcp(server, (head, visitor) => openStream(id, head, visitor, true), AccessGate.of(access ?? null));
      },
      (err: unknown) => {
        if (remoteTcp.get(id) !== entry) return;
        if (retries === 0) log.warn({ err: (err as Error).message, id, port }, 'cluster: the port of a TCP tunnel cannot be bound here; trying again');
        // A member's own listener of it may still be closing (its member left): again while no route changed it.
        setTimeout(() => {
          if (remoteTcp.get(id) !== entry) return;
          remoteTcp.delete(id);
          followRemoteTcp(id, true, port, access, retries + 1);
        }, FOLLOW_RETRY_MS).unref();
      },
    );
  };

  // A link's stream is served on this node only: a route that moved on meanwhile gets no-tunnel, never a second hop.
  const links = ctx.clusterLinks?.(log, openOnNode, (url, up) => (up ? routes.nodeUp(url) : routes.nodeDown(url))) ?? null;
  const openAnywhere = (tunnelId: string, head: HttpHead, visitor: TunnelVisitor): Upstream | null => openStream(tunnelId, head, visitor, links !== null);

  return {
    tunnelOf,
    links,
    control: host,
    serve(conn, head, res, id) {
      if (draining) {
        // A visitor request while draining: 503, and the connection closes (no keep-alive).
        res.closeAfter();
        countHttpAnswer(503, head.protocol);
        const err = unavailableError(SHUTTING_DOWN);
        res.problem('unavailable', SHUTTING_DOWN, { extra: err, html: FrontConnection.wantsHtml(head) });
        return DISCARD;
      }
      const client = conn.clientOf(head);
      const gate = routes.gateFor(id);
      const admission = admitHttpVisitor(gate, client.ip, gate?.basicAuth ? (headerOf(head.headers, 'authorization') ?? '') : '', head.protocol);
      if (admission.verdict === 'refused') {
        if (head.upgrade) res.closeAfter();
        res.problem(admission.code, admission.detail, { extra: { headers: admission.headers } });
        return DISCARD;
      }
      const limitKey = visitors.admit(client.ip);
      if (limitKey === null) {
        if (head.upgrade) res.closeAfter();
        countHttpAnswer(429, head.protocol);
        res.problem('too-many-requests', `more than ${visitors.max} concurrent requests from ${client.ip} through this server; retry when some finish`, {
          extra: { headers: { 'retry-after': '1' } },
          html: FrontConnection.wantsHtml(head),
        });
        return DISCARD;
      }
      const colon = head.host!.lastIndexOf(':');
      const publicHost = colon > 0 && !head.host!.endsWith(']') ? head.host!.slice(0, colon) : head.host!;
      const visitor = new TunnelVisitor(conn, res, head, publicHost);
      serveVisitor(visitor, head, client, id, openAnywhere, admission.verdict === 'drop-authorization');
      // After the hand-over: a 404 is over already.
      visitors.hold(visitor, limitKey);
      return visitor;
    },
    onMain(msg) {
      switch (msg.type) {
        case 'tunnel-close':
          return { closed: closeLocal(msg.tunnelId, msg.reason, msg.permanent, msg.sessionId, msg.code) };
        case 'tunnel-route':
          routes.route(msg);
          lanes.closeStale(msg.id);
          followRemoteTcp(msg.id, msg.portHeld !== true, msg.port, msg.access);
          return undefined;
        case 'tunnel-counts': {
          let streams = 0;
          for (const c of connections) streams += c.streamCount;
          const counts: ShardCounts = {
            shard: ctx.index,
            tunnels: routes.localCount,
            lanes: routes.laneCount,
            routes: routes.routeCount,
            control_connections: connections.size,
            streams,
            mesh_streams: mesh.streamCount,
            link_streams: links?.streamCount ?? 0,
            pending_admissions: pendingAdmissions,
            heap_used_bytes: process.memoryUsage().heapUsed,
            visitor_buffered_bytes: visitorBuffers.total,
          };
          return counts;
        }
        case 'cluster-nodes':
          peerNodes = msg.nodes;
          return null;
        default:
          return assertNever(msg);
      }
    },
    onPeer(shard, port) {
      mesh.attach(shard, port as unknown as PortLike);
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
      await drainTunnels({ log, connections, tcpListeners: tcpListeners.values(), visitors, tunnels: () => routes.localTunnels(), closeLocal }, timeoutMs);
      clearInterval(heartbeatTimer);
      links?.closeAll();
      for (const t of remoteTcp.values()) t.close();
      remoteTcp.clear();
      stats.stop();
    },
  };
}
