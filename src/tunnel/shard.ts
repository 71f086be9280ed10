import type { MessagePort } from 'node:worker_threads';
import type { ShardContext } from '../workers/shard-context.js';
import type { HostDispatch } from '../http/uws.js';
import type { TunnelAdmitted, TunnelMainToShard, TunnelRoute, StatsDelta } from '../protocol/tunnel-messages.js';
import { HEARTBEAT_MISSES, type HttpHead, type OpenRequest } from '../protocol/frames.js';
import { assertNever } from '../errors.js';
import { TunnelActor } from '../actors/tunnel.js';
import { ControlConnection, installControlRoute, type ControlHost } from './control.js';
import { serveVisitor, type HttpVisitor } from './ingress.js';
import { Mesh } from './mesh.js';
import { installUpgradeRoute } from './upgrade.js';
import { bindTcpPort, serveTcp } from './tcp.js';
import type { Downstream, Upstream } from './stream.js';
import { VisitorLimit } from './visitor-limit.js';

// The tunnel data plane of one shard worker:
//
//   control WS ─▶ ControlConnection ─Open─▶ registry (main, tunnel-admit) ─▶ TunnelActor here
//   public HTTP (Host <id>.<domain>) ─▶ dispatch ─▶ local TunnelActor, or Mesh ─▶ owner shard
//   every STATS_REPORT_MS: counter deltas of this shard's tunnels ─▶ main (tunnel-stats)
//
// `routes` mirrors the registry's id → shard map (tunnel-route broadcasts), so routing a
// visitor costs one Map lookup and no round trip.

/** What the shard worker calls into the tunnel data plane. */
export interface ShardTunnels {
  /** Claims public traffic for <id>.<domain> before API routing. */
  dispatch: HostDispatch;
  onMain(msg: TunnelMainToShard): unknown;
  /** A MessagePort to another shard (the mesh); re-sent when that shard restarts. */
  onPeer(shard: number, port: MessagePort): void;
  /** Close every tunnel and control connection (shutdown). */
  drain(): Promise<void>;
}

/** Deltas leave a shard at most this often (design.md: ≤ 250 ms). */
export const STATS_REPORT_MS = 250;
const ADMIT_TIMEOUT_MS = 10_000;

export function installTunnels(ctx: ShardContext): ShardTunnels {
  const suffix = `.${ctx.config.domain}`;
  const log = ctx.log.child({ part: 'tunnels' });
  const tunnels = new Map<string, TunnelActor>();
  const routes = new Map<string, number>();
  const dirty = new Set<TunnelActor>();
  const connections = new Set<ControlConnection>();
  const markDirty = (t: TunnelActor): void => void dirty.add(t);
  const visitors = new VisitorLimit(ctx.config.visitorConcurrency);

  const openLocal = (tunnelId: string, head: HttpHead, down: Downstream): Upstream | null => {
    const t = tunnels.get(tunnelId);
    if (!t || t.spec.type !== 'http') return null;
    const s = t.openStream(head, down);
    if (!s) {
      down.reset('busy');
      return { data() {}, end() {}, reset() {}, credit() {} };
    }
    return s;
  };
  const mesh = new Mesh(log, openLocal);

  const report = (t: TunnelActor, last: StatsDelta | null): void => {
    dirty.delete(t);
    ctx.main.tell({ type: 'tunnel-down', id: t.id, sessionId: t.spec.sessionId, last });
  };

  const host: ControlHost = {
    ctx,
    log,
    connections,
    async open(conn: ControlConnection, req: OpenRequest) {
      const tcp = req.type === 'tcp' ? await bindTcpPort(ctx.config.host, ctx.config.tcpPortRange, req.remotePort ?? null) : null;
      const port = tcp ? (tcp.address() as { port: number }).port : null;
      let admitted: TunnelAdmitted;
      try {
        admitted = await ctx.main.ask<TunnelAdmitted>(
          {
            type: 'tunnel-admit',
            userId: conn.principal.userId,
            tunnelType: req.type,
            id: req.id ?? null,
            teamId: req.teamId ?? null,
            remotePort: port,
            clientIp: conn.ip,
          },
          ADMIT_TIMEOUT_MS,
        );
      } catch (err) {
        tcp?.close();
        throw err;
      }
      // A takeover on this same shard: the registry's tunnel-close for the old one came first.
      const actor = new TunnelActor(
        { id: admitted.id, type: req.type, userId: conn.principal.userId, teamId: req.teamId ?? null, sessionId: admitted.sessionId, url: admitted.url, remotePort: port },
        conn,
        markDirty,
      );
      tunnels.set(actor.id, actor);
      conn.adopt(actor);
      if (tcp) serveTcp(tcp, actor);
      log.info({ id: actor.id, type: req.type, user: conn.principal.userId }, 'tunnel registered');
      return { id: admitted.id, url: admitted.url, remotePort: port };
    },
    ended(actor: TunnelActor, last: StatsDelta | null) {
      if (tunnels.get(actor.id) === actor) tunnels.delete(actor.id);
      report(actor, last);
    },
  };
  installControlRoute(host);

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
      for (const r of list) if (!routes.has(r.id)) routes.set(r.id, r.shard);
    })
    .catch((err: unknown) => log.warn({ err }, 'could not load tunnel routes'));

  const closeLocal = (tunnelId: string, reason: string, permanent: boolean, sessionId?: string): boolean => {
    const t = tunnels.get(tunnelId);
    if (!t || (sessionId !== undefined && t.spec.sessionId !== sessionId)) return false;
    tunnels.delete(tunnelId);
    const code = reason.startsWith('taken over') ? 'taken-over' : permanent ? 'deleted' : 'unavailable';
    const last = t.close({ code, message: reason, permanent });
    for (const c of connections) c.drop(t);
    report(t, last);
    return true;
  };

  /** The tunnel id of a Host header, or null when it is not public tunnel traffic. */
  const tunnelOf = (host: string): string | null => {
    const colon = host.lastIndexOf(':');
    const name = (colon > 0 && !host.endsWith(']') ? host.slice(0, colon) : host).toLowerCase();
    if (!name.endsWith(suffix) || name.length <= suffix.length) return null;
    const id = name.slice(0, -suffix.length);
    return id.includes('.') ? null : id;
  };
  const openAnywhere = (tunnelId: string, head: HttpHead, visitor: HttpVisitor): Upstream | null => {
    const local = openLocal(tunnelId, head, visitor);
    if (local) return local;
    const shard = routes.get(tunnelId);
    if (shard === undefined || shard === ctx.index) return null;
    return mesh.open(shard, tunnelId, head, visitor);
  };
  installUpgradeRoute(ctx.app, tunnelOf, openAnywhere);

  return {
    dispatch: (res, req) => {
      const id = tunnelOf(req.getHeader('host'));
      if (id === null) return false;
      serveVisitor(res, req, id, openAnywhere, visitors);
      return true;
    },
    onMain(msg) {
      switch (msg.type) {
        case 'tunnel-close':
          closeLocal(msg.tunnelId, msg.reason, msg.permanent, msg.sessionId);
          return {};
        case 'tunnel-route':
          if (msg.shard === null) routes.delete(msg.id);
          else routes.set(msg.id, msg.shard);
          return undefined;
        default:
          return assertNever(msg);
      }
    },
    onPeer(shard, port) {
      mesh.attach(shard, port);
    },
    async drain() {
      clearInterval(heartbeatTimer);
      for (const t of [...tunnels.values()]) closeLocal(t.id, 'the server is shutting down', false);
      for (const c of [...connections]) c.goAway();
      clearInterval(statsTimer);
    },
  };
}
