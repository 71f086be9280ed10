import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import { closeOrphanedSessions, pruneClosedSessions } from '../db/sessions.js';
import { keyLabel } from '../db/api-keys.js';
import { getMembership, getTeam, memberTeamIdByName } from '../db/teams.js';
import { getUser } from '../db/users.js';
import { deleteReservation, listReservations, putReservation, recentHolders } from '../db/tunnel-reservations.js';
import type { Reservation } from '../api/schemas.js';
import type { Config } from '../config.js';
import type { HandlerAnswer, TunnelInfo, Principal } from '../protocol/messages.js';
import type {
  ControlAdmitted,
  DataPlaneCounts,
  ShardCounts,
  StatsDelta,
  TunnelAdmitted,
  TunnelLaneAdmitted,
  TunnelMainToShard,
  TunnelMainToShardReplies,
  TunnelRoute,
  TunnelShardToMain,
  TunnelShardToMainReplies,
} from '../protocol/tunnel-messages.js';
import { randomTunnelId, tunnelIdProblem, type RefusalCode } from '../protocol/frames.js';
import { accessView, type AccessWire } from '../protocol/access.js';
import { ApiError, assertNever } from '../errors.js';
import { StatsActor } from './stats.js';
import { claimTunnel, clusterTunnel, clusterTunnels, releaseTunnel, sessionTotals, type ClusterTunnelRow } from '../db/cluster.js';
import { AWAIT_GONE_MS, type ClusterEvent, type ClusterNode } from '../cluster/node.js';

// RegistryActor (main thread): the single owner of "which live tunnel has which id, on
// which shard". Runs on main's event loop, so each message is handled to completion
// before the next: admission is race-free without locks (the one await, the team check,
// is followed by a fresh conflict check).
//
//   shard ──tunnel-admit──▶ admit: id rules, team membership, conflict / same-user takeover
//                           ──▶ StatsActor.open(session) ──▶ tunnel-route to every shard
//   shard ──tunnel-down───▶ StatsActor.close(session, final counters) ──▶ tunnel-route null
//   shard ──tunnel-lane───▶ the lane key of a live http tunnel checked; its lanes end with the
//           route (a tunnel-route of another session, or null, closes them on their shards)
//   API   ──tunnels-close─▶ owning shard: tunnel-close (permanent: the client must not return)
//   API   ──tunnel-reserve / tunnel-release─▶ the reserved ids (database, then this copy)
//   Who may take an id: a live tunnel's owner (takeover); else, when an admin reserved it, that
//   user or that team's members; else, within --id-grace of its last tunnel ending, the user
//   who held it (so a dropped connection does not hand the id, its webhooks and cookies, to
//   whoever asks first); else anyone.
//   shard ──tunnel-port-claim─▶ one of the user's --max-tcp-ports-per-user, held until
//           tunnel-admit spends it or tunnel-port-release returns it (counted before the bind,
//           so concurrent Opens cannot overshoot, on one shard or several)
//
// In a cluster (--node-url) `tunnels` holds this node's tunnels only. The database's
// cluster_tunnels is the cluster's registry: an admission claims the id there (its primary key
// decides a race between nodes), an end releases it, and each change is a notification every
// node applies (clusterEvent) by reading that id's row again; `remote` is this node's copy of
// the other nodes' rows, broadcast to the shards as routes naming the node's URL. reconcile()
// compares both with the database every few seconds, so a lost notification heals.

/** How the registry reaches shard `shard` (main.ts: the ShardSupervisor; tests: fakes). */
export interface ShardDirectory {
  tell(shard: number, msg: TunnelMainToShard): void;
  /** The reply type follows from `msg.type` (TunnelMainToShardReplies). */
  ask<T extends keyof TunnelMainToShardReplies>(shard: number, msg: TunnelMainToShard & { type: T }, timeoutMs: number): Promise<TunnelMainToShardReplies[T]>;
}

interface PortClaim {
  userId: string;
  shard: number;
}

interface Entry {
  info: Omit<TunnelInfo, 'uptime_secs' | 'stats' | 'access'>;
  /** access rules, credentials hashed: sent with the route so every shard checks visitors */
  access: AccessWire | null;
  /** the control connection's key: a takeover by another key of the user says which one */
  keyId: string;
  shard: number;
  sessionId: string;
  /** http on several shards: what a lane of this registration presents (Opened.laneKey) */
  laneKey: string | null;
  registeredAtMs: number;
}

const CLOSE_TIMEOUT_MS = 5_000;
/** --session-retention: how often closed sessions past it are deleted, and how many per statement. */
const PRUNE_INTERVAL_MS = 10 * 60_000;
const PRUNE_BATCH = 1_000;
const RATE_WINDOW_MS = 60_000;
const COUNTS_TIMEOUT_MS = 2_000;
const ROUTE_ACK_TIMEOUT_MS = 2_000;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The user who last held an id, and until when (ms) it stays theirs (--id-grace). */
interface Hold {
  userId: string;
  untilMs: number;
}

export class RegistryActor {
  private readonly tunnels = new Map<string, Entry>();
  private readonly holds = new Map<string, Hold>();
  private readonly reservations = new Map<string, Reservation>();
  /** Per user, when their recent Opens were admitted or refused (--max-registrations-per-minute). */
  private readonly opens = new Map<string, number[]>();
  private pruneTimer: NodeJS.Timeout | null = null;
  private readonly claims = new Map<number, PortClaim>();
  private nextClaim = 0;
  /** Bumped whenever memberships or users lose tunnels: an admission whose team check
   *  awaited across such a change is refused (transient: the client retries and re-checks). */
  private revocations = 0;
  readonly stats: StatsActor;
  /** --node-url: this node's membership (null: a single node, everything in memory) */
  private cluster: ClusterNode | null = null;
  /** cluster: live tunnels of other nodes, as the database lists them */
  private readonly remote = new Map<string, ClusterTunnelRow>();
  /** cluster: per id, the `touches` count when something last changed it here (a read of the
   *  database older than that is stale for this id and not applied) */
  private readonly touched = new Map<string, number>();
  private touches = 0;
  /** cluster: admissions of one id on this node take turns (each reads and writes its row) */
  private readonly idLocks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly log: Logger,
    private readonly shards: ShardDirectory,
    private readonly sql: Sql,
    private readonly config: Config,
  ) {
    this.stats = new StatsActor(log.child({ actor: 'stats' }), sql);
  }

  /** Start-up: sessions left open by a crash are closed at their last flush (in a cluster, the
   *  dead nodes' are the reaper's: other nodes' sessions are live). */
  async start(): Promise<void> {
    if (!this.config.nodeUrl) await closeOrphanedSessions(this.sql);
    // A restart drops every connection at once: the holds survive it (read from the sessions).
    if (this.config.idGraceSecs > 0) {
      for (const r of await recentHolders(this.sql, this.config.idGraceSecs)) {
        this.holds.set(r.tunnel_id, { userId: r.user_id, untilMs: r.disconnected_at.getTime() + this.config.idGraceSecs * 1000 });
      }
    }
    for (const r of await listReservations(this.sql)) this.reservations.set(r.id, r);
    this.stats.start();
    if (this.config.sessionRetentionSecs !== null) {
      void this.prune();
      this.pruneTimer = setInterval(() => void this.prune(), PRUNE_INTERVAL_MS).unref();
    }
  }

  /** Deletes closed sessions older than --session-retention, a batch at a time. */
  async prune(): Promise<number> {
    const keep = this.config.sessionRetentionSecs;
    if (keep === null) return 0;
    let total = 0;
    try {
      for (;;) {
        const n = await pruneClosedSessions(this.sql, keep, PRUNE_BATCH);
        total += n;
        if (n < PRUNE_BATCH) break;
      }
      if (total > 0) this.log.info({ deleted: total }, 'closed sessions past --session-retention deleted');
    } catch (err) {
      this.log.warn({ err }, 'pruning old sessions failed; next try later');
    }
    return total;
  }

  /** --max-registrations-per-minute: counts this Open, or refuses it (transient: the client backs off). */
  private countOpen(userId: string): void {
    const now = Date.now();
    const recent = (this.opens.get(userId) ?? []).filter((t) => t > now - RATE_WINDOW_MS);
    const max = this.config.maxRegistrationsPerMinute;
    if (recent.length >= max) {
      this.opens.set(userId, recent);
      const waitS = Math.ceil((recent[0]! + RATE_WINDOW_MS - now) / 1000);
      throw new ApiError('unavailable', `rate-limited: at most ${max} tunnel registrations per user per minute (max-registrations-per-minute); try again in ${waitS} s`, undefined, { 'retry-after': String(waitS) });
    }
    recent.push(now);
    this.opens.set(userId, recent);
  }

  /** Shutdown: every session ends; final flush of counters. */
  async stop(): Promise<void> {
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    this.tunnels.clear();
    await this.stats.stop();
  }

  /** The registry's mailbox: an ask's answer is its TunnelShardToMainReplies entry. */
  handle(fromShard: number, msg: TunnelShardToMain): HandlerAnswer<TunnelShardToMainReplies> {
    switch (msg.type) {
      case 'tunnels-list':
        return this.list(msg.principal, msg.teamIds);
      case 'tunnels-get':
        return this.get(msg.id);
      case 'tunnels-close':
        return this.close(msg.id, msg.reason);
      case 'tunnels-close-owner':
        return this.closeOwner(msg.userId, msg.teamId, msg.reason);
      case 'tunnels-close-member':
        return this.closeMember(msg.teamId, msg.userId, msg.reason);
      case 'tunnel-reservations':
        return [...this.reservations.values()].sort((a, b) => a.id.localeCompare(b.id));
      case 'tunnel-reserve':
        return this.reserve(msg.id, msg.userId, msg.teamId);
      case 'tunnel-release':
        return this.release(msg.id);
      case 'tunnel-port-claim':
        return { claim: this.claimPort(fromShard, msg.userId, msg.id) };
      case 'tunnel-port-release':
        this.claims.delete(msg.claim);
        return undefined;
      case 'tunnel-admit':
        return this.admit(fromShard, msg);
      case 'tunnel-lane':
        return this.lane(fromShard, msg.id, msg.userId, msg.key);
      case 'tunnel-down':
        this.down(msg.id, msg.sessionId, msg.last);
        return undefined;
      case 'tunnel-stats':
        for (const d of msg.deltas) this.stats.add(d);
        return undefined;
      case 'tunnel-routes':
        return [
          ...[...this.tunnels.entries()].map(([id, e]): TunnelRoute => ({ id, shard: e.shard, sessionId: e.sessionId, access: e.access })),
          ...[...this.remote.values()].map((r): TunnelRoute => ({ id: r.id, shard: -1, node: r.node_url, port: r.port, sessionId: r.session_id, access: r.access })),
        ];
      case 'data-plane-counts':
        return this.counts();
      case 'control-connect':
        return this.controlConnect(fromShard, msg.userId);
      case 'control-disconnect':
        this.controlDisconnect(fromShard, msg.userId);
        return undefined;
      default:
        return assertNever(msg);
    }
  }

  /** A live tunnel ends: its id stays its owner's for --id-grace (and leaves the cluster's registry). */
  private forget(id: string, e: Entry): void {
    this.tunnels.delete(id);
    this.hold(id, e.info.owner_id);
    if (this.cluster) {
      this.touch(id);
      releaseTunnel(this.sql, id, e.sessionId).catch((err: unknown) => this.log.warn({ err, id }, 'cluster: tunnel row not released; the reconcile retries'));
    }
  }

  private hold(id: string, userId: string): void {
    if (this.config.idGraceSecs > 0) this.holds.set(id, { userId, untilMs: Date.now() + this.config.idGraceSecs * 1000 });
  }

  /** Who else holds `id` against user `userId`, as a refusal, or null when they may take it. */
  private async claimProblem(id: string, userId: string): Promise<string | null> {
    const r = this.reservations.get(id);
    if (r) {
      if (r.user_id !== null) return r.user_id === userId ? null : `tunnel id "${id}" is reserved for another user`;
      if (r.team_id !== null && (await getMembership(this.sql, r.team_id, userId))) return null;
      return `tunnel id "${id}" is reserved for a team you are not in`;
    }
    const h = this.holds.get(id);
    if (!h) return null;
    if (h.untilMs <= Date.now()) {
      this.holds.delete(id);
      return null;
    }
    if (h.userId === userId) return null;
    return `tunnel id "${id}" is held for the user who last used it until ${new Date(h.untilMs).toISOString()} (id grace); an admin can release it`;
  }

  private async reserve(id: string, userId: string | null, teamId: string | null): Promise<Reservation> {
    const r = await this.reserveHere(id, userId, teamId);
    await this.cluster?.notify({ t: 'reservations' });
    return r;
  }

  private async reserveHere(id: string, userId: string | null, teamId: string | null): Promise<Reservation> {
    const problem = tunnelIdProblem(id, this.config.domain);
    if (problem) throw new ApiError('bad-request', problem);
    if ((userId === null) === (teamId === null)) throw new ApiError('bad-request', 'give exactly one of "user_id" and "team_id"');
    if (userId !== null && !(await getUser(this.sql, userId))) throw new ApiError('not-found', `no user ${userId}`);
    if (teamId !== null && !(await getTeam(this.sql, teamId))) throw new ApiError('not-found', `no team ${teamId}`);
    const r = await putReservation(this.sql, id, userId, teamId);
    this.reservations.set(id, r);
    return r;
  }

  private async release(id: string): Promise<Record<string, never>> {
    const hadHold = this.holds.delete(id);
    const hadReservation = this.reservations.delete(id);
    const deleted = await deleteReservation(this.sql, id);
    if (!hadHold && !hadReservation && !deleted) throw new ApiError('not-found', `tunnel id "${id}" is neither reserved nor held`);
    await this.cluster?.notify({ t: 'reservations' });
    return {};
  }

  /** Live tunnels by type (GET /metrics). */
  liveByType(): { http: number; tcp: number } {
    const n = { http: 0, tcp: 0 };
    for (const e of this.tunnels.values()) n[e.info.tunnel_type]++;
    return n;
  }

  /** Live objects here and on every running shard (a shard that does not answer is left out). */
  async counts(): Promise<DataPlaneCounts> {
    const asks = Array.from({ length: this.config.workers }, (_, i) =>
      this.shards.ask(i, { type: 'tunnel-counts' }, COUNTS_TIMEOUT_MS).catch(() => null),
    );
    const shards = (await Promise.all(asks)).filter((c): c is ShardCounts => c !== null);
    return { registry: { tunnels: this.tunnels.size, sessions: this.stats.size, heap_used_bytes: process.memoryUsage().heapUsed }, shards };
  }

  /** Control connections per shard and user (a dead shard's go with it). */
  private readonly controls = new Map<number, Map<string, number>>();

  private controlConnect(shard: number, userId: string): ControlAdmitted {
    const limit = this.config.maxConnectionsPerUser;
    let held = 0;
    for (const users of this.controls.values()) held += users.get(userId) ?? 0;
    if (held >= limit) return { ok: false, limit };
    const users = this.controls.get(shard) ?? new Map<string, number>();
    this.controls.set(shard, users);
    users.set(userId, (users.get(userId) ?? 0) + 1);
    return { ok: true, limit };
  }

  private controlDisconnect(shard: number, userId: string): void {
    const users = this.controls.get(shard);
    const n = (users?.get(userId) ?? 0) - 1;
    if (n > 0) users!.set(userId, n);
    else users?.delete(userId);
  }

  /** A shard died: its tunnels are gone; their sessions close with the last counters heard. */
  shardDown(shard: number): void {
    this.controls.delete(shard);
    for (const [claim, c] of this.claims) if (c.shard === shard) this.claims.delete(claim);
    for (const [id, e] of this.tunnels) {
      if (e.shard !== shard) continue;
      this.forget(id, e);
      this.stats.close(e.sessionId);
      this.broadcast({ type: 'tunnel-route', id, shard: null });
    }
  }

  /** broadcast, answered: a shard that does not answer in time (restarting) asks for every
   *  route when it starts, so waiting longer would only delay the client. */
  private async routeEverywhere(msg: Extract<TunnelMainToShard, { type: 'tunnel-route' }>): Promise<void> {
    const acks = Array.from({ length: this.config.workers }, (_, i) =>
      this.shards.ask(i, msg, ROUTE_ACK_TIMEOUT_MS).catch((err) => this.log.debug({ err, shard: i }, 'shard did not confirm a route')),
    );
    await Promise.all(acks);
  }

  private broadcast(msg: TunnelMainToShard): void {
    for (let i = 0; i < this.config.workers; i++) {
      try {
        this.shards.tell(i, msg);
      } catch (err) {
        this.log.debug({ err, shard: i }, 'shard not reachable for a route update');
      }
    }
  }

  private publicUrl(type: 'http' | 'tcp', id: string, port: number | null): string {
    const base = new URL(this.config.baseUrl);
    if (type === 'tcp') return `tcp://${base.hostname}:${port}`;
    return `${base.protocol}//${id}.${this.config.domain}${base.port ? `:${base.port}` : ''}`;
  }

  private claimPort(shard: number, userId: string, id: string | null): number {
    const max = this.config.maxTcpPortsPerUser;
    let held = 0;
    for (const e of this.tunnels.values()) if (e.info.owner_id === userId && e.info.tunnel_type === 'tcp' && e.info.id !== id) held++;
    for (const c of this.claims.values()) if (c.userId === userId) held++;
    if (held >= max) {
      throw new ApiError('forbidden', `limit reached: at most ${max} TCP ports per user (max-tcp-ports-per-user); you hold or are opening ${held}: close a TCP tunnel first`);
    }
    const claim = ++this.nextClaim;
    this.claims.set(claim, { userId, shard });
    return claim;
  }

  private async admit(shard: number, m: Extract<TunnelShardToMain, { type: 'tunnel-admit' }>): Promise<TunnelAdmitted> {
    try {
      if (!this.cluster || m.id === null) return await this.admitOnce(shard, m);
      return await this.oneAtATime(m.id, () => this.admitOnce(shard, m));
    } finally {
      // Spent either way; on success the entry now counts instead (set before this runs).
      if (m.claim !== null) this.claims.delete(m.claim);
    }
  }

  private async admitOnce(shard: number, m: Extract<TunnelShardToMain, { type: 'tunnel-admit' }>): Promise<TunnelAdmitted> {
    this.countOpen(m.userId);
    if (m.id !== null) {
      const problem = tunnelIdProblem(m.id, this.config.domain);
      if (problem) throw new ApiError('bad-request', problem);
    }
    let teamId = m.teamId;
    if (teamId !== null) {
      const before = this.revocations;
      if (!UUID_RE.test(teamId)) {
        // A team name (tunnels-only keys cannot list teams to find the id): only the user's own
        // teams are searched, so this reveals nothing about teams the user is not in.
        const named = await memberTeamIdByName(this.sql, m.userId, teamId);
        if (!named) throw new ApiError('not-found', `you are in no team named "${teamId}"`);
        teamId = named;
      } else if (!(await getMembership(this.sql, teamId, m.userId))) throw new ApiError('forbidden', `you are not a member of team ${teamId}`);
      // A removal or team deletion that closed tunnels while we read may have missed this one.
      if (this.revocations !== before) throw new ApiError('unavailable', `team ${teamId} changed while this tunnel was admitted; try again`);
    }
    // Another key of this user about to take a live id over: its name goes into the old client's
    // message, read now (before the fresh conflict check below; a race just leaves it unnamed).
    const holder = m.id === null ? undefined : this.tunnels.get(m.id);
    const newKey = holder && holder.info.owner_id === m.userId && holder.keyId !== m.keyId ? await keyLabel(this.sql, m.keyId).catch(() => null) : null;
    const claimProblem = m.id === null ? null : await this.claimProblem(m.id, m.userId);
    let id = m.id;
    if (id === null) {
      do id = randomTunnelId(randomBytes);
      while (this.tunnels.has(id) || this.holds.has(id) || this.reservations.has(id) || tunnelIdProblem(id, this.config.domain));
    }
    const old = this.tunnels.get(id);
    if (old && old.info.owner_id !== m.userId) throw new ApiError('conflict', `tunnel id "${id}" is in use by another user`);
    // A live tunnel of this user takes over regardless (it holds the id now); otherwise the
    // reservation and the grace hold decide.
    const remote = this.remote.get(id);
    if (!old && claimProblem !== null && !(remote && remote.user_id === m.userId)) throw new ApiError('conflict', claimProblem);
    const sessionId = randomUUID();
    const url = this.publicUrl(m.tunnelType, id, m.remotePort);
    if (this.cluster) await this.claimInCluster(id, sessionId, url, teamId, m);
    else if (!old) {
      // A takeover replaces a tunnel of the user's; anything else adds one.
      const max = this.config.maxTunnelsPerUser;
      let held = 0;
      for (const e of this.tunnels.values()) if (e.info.owner_id === m.userId) held++;
      if (held >= max) throw new ApiError('forbidden', `limit reached: at most ${max} live tunnels per user (max-tunnels-per-user); you hold ${held}: close one first`);
    }
    if (old) {
      // Same user: a reconnect whose old connection is stale (or a second client). The new
      // registration wins; the old one is told so and must not come back.
      // Its session closes when that shard reports tunnel-down with the final counters.
      this.tunnels.delete(id);
      const reason = takeoverReason(old.keyId === m.keyId, newKey);
      // A shard that no longer holds it (or is gone) sends no tunnel-down: close the session here.
      this.shards
        .ask(old.shard, { type: 'tunnel-close', tunnelId: id, reason, permanent: true, sessionId: old.sessionId, code: 'taken-over' }, CLOSE_TIMEOUT_MS)
        .then(
          (r) => !r.closed && this.stats.close(old.sessionId),
          () => this.stats.close(old.sessionId),
        );
    }
    // TCP visitors arrive at the owner's own listener: lanes would carry nothing.
    const laneKey = m.tunnelType === 'http' && this.config.workers > 1 ? randomBytes(18).toString('base64url') : null;
    this.tunnels.set(id, {
      info: { id, owner_id: m.userId, team_id: teamId, remote_port: m.remotePort, tunnel_type: m.tunnelType, url, local_target: m.local },
      access: m.access,
      keyId: m.keyId,
      shard,
      sessionId,
      laneKey,
      registeredAtMs: Date.now(),
    });
    this.stats.open({ id: sessionId, userId: m.userId, tunnelId: id, tunnelType: m.tunnelType, teamId, clientIp: m.clientIp, nodeId: this.cluster?.id ?? null });
    // Every shard knows the route before the client hears Opened and prints its URL: a visitor
    // who uses it at once may land on any shard, and must not get 404 there.
    await this.routeEverywhere({ type: 'tunnel-route', id, shard, sessionId, access: m.access });
    return { id, sessionId, url, teamId, tookOver: old !== undefined || remote?.user_id === m.userId, ...(laneKey ? { laneKey } : {}) };
  }

  /**
   * A lane of live http tunnel `id` on shard `fromShard`. Another user's tunnel answers exactly
   * like a missing one; the key is compared in constant time. Nothing is recorded: the lane
   * lives while the route names this session (the shard checks it against its routes).
   */
  private lane(fromShard: number, id: string, userId: string, key: string): TunnelLaneAdmitted {
    const e = this.tunnels.get(id);
    if (!e || e.info.owner_id !== userId || e.laneKey === null) throw new ApiError('not-found', `no live http tunnel "${id}" of yours takes lanes`);
    const given = Buffer.from(key);
    const expected = Buffer.from(e.laneKey);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new ApiError('forbidden', `wrong lane key for tunnel "${id}"`);
    if (e.shard === fromShard) throw new ApiError('conflict', `tunnel "${id}" is served by this shard itself: a lane here would carry nothing`);
    return { sessionId: e.sessionId, url: e.info.url, teamId: e.info.team_id, access: e.access };
  }

  private down(id: string, sessionId: string, last: StatsDelta | null): void {
    if (last) this.stats.add(last);
    this.stats.close(sessionId);
    const e = this.tunnels.get(id);
    if (e && e.sessionId === sessionId) {
      this.forget(id, e);
      this.broadcast({ type: 'tunnel-route', id, shard: null });
    }
  }

  private view(e: Entry): TunnelInfo {
    return { ...e.info, uptime_secs: Math.floor((Date.now() - e.registeredAtMs) / 1000), stats: this.stats.totals(e.sessionId), access: accessView(e.access) };
  }

  /** The whole cluster's tunnels: this node's with live counters, the others' as last flushed (≤ 1 s old). */
  private async list(p: Principal, teamIds: string[]): Promise<TunnelInfo[]> {
    const teams = new Set(teamIds);
    const visible = (owner: string, team: string | null): boolean => p.role === 'admin' || owner === p.userId || (team !== null && teams.has(team));
    const out: TunnelInfo[] = [];
    for (const e of this.tunnels.values()) if (visible(e.info.owner_id, e.info.team_id)) out.push(this.view(e));
    const remote = [...this.remote.values()].filter((r) => visible(r.user_id, r.team_id));
    if (remote.length > 0) {
      const totals = await sessionTotals(this.sql, remote.map((r) => r.session_id));
      for (const r of remote) out.push(remoteView(r, totals.get(r.session_id)));
    }
    return out.sort((a, b) => a.id.localeCompare(b.id));
  }

  private async get(id: string): Promise<TunnelInfo | null> {
    const e = this.tunnels.get(id);
    if (e) return this.view(e);
    const r = this.remote.get(id);
    if (!r) return null;
    return remoteView(r, (await sessionTotals(this.sql, [r.session_id])).get(r.session_id));
  }

  private async close(id: string, reason: string, code?: RefusalCode): Promise<Record<string, never>> {
    const e = this.tunnels.get(id);
    const r = e ? undefined : this.remote.get(id);
    if (r && this.cluster) {
      // Its node ends it on this notification; the API answers once its row is gone.
      await this.cluster.notify({ t: 'close', id, session: r.session_id, reason });
      if (!(await this.cluster.awaitGone({ sessionIds: [r.session_id] }))) throw new ApiError('unavailable', `the node holding tunnel "${id}" did not confirm the close; it ends within ${Math.ceil(AWAIT_GONE_MS / 1000)} s`);
      return {};
    }
    if (!e) throw new ApiError('not-found', `no live tunnel "${id}"`);
    // The entry goes when the shard reports tunnel-down (with the final counters).
    await this.shards.ask(e.shard, { type: 'tunnel-close', tunnelId: id, reason, permanent: true, sessionId: e.sessionId, code }, CLOSE_TIMEOUT_MS);
    const still = this.tunnels.get(id);
    if (still === e) {
      this.forget(id, e);
      this.stats.close(e.sessionId);
      this.broadcast({ type: 'tunnel-route', id, shard: null });
    }
    return {};
  }

  /** Ends a user's (deactivated) or a team's (deleted) tunnels; in a cluster, answers once every
   *  node ended its own (each heard the change from the database: clusterEvent). */
  private async closeOwner(userId: string | null, teamId: string | null, reason: string): Promise<number> {
    this.revocations++;
    const victims = [...this.tunnels.entries()].filter(
      ([, e]) => (userId !== null && e.info.owner_id === userId) || (teamId !== null && e.info.team_id === teamId),
    );
    const remote = [...this.remote.values()].filter((r) => (userId !== null && r.user_id === userId) || (teamId !== null && r.team_id === teamId)).length;
    await Promise.all(victims.map(([id]) => this.close(id, reason).catch((err) => this.log.warn({ err, id }, 'closing tunnel failed'))));
    await this.cluster?.awaitGone({ userIds: userId === null ? [] : [userId], teamIds: teamId === null ? [] : [teamId] });
    return victims.length + remote;
  }

  private async closeMember(teamId: string, userId: string, reason: string, here = false): Promise<number> {
    this.revocations++;
    const victims = [...this.tunnels.entries()].filter(([, e]) => e.info.owner_id === userId && e.info.team_id === teamId);
    const remote = here ? 0 : [...this.remote.values()].filter((r) => r.user_id === userId && r.team_id === teamId).length;
    await Promise.all(victims.map(([id]) => this.close(id, reason, 'forbidden').catch((err) => this.log.warn({ err, id }, 'closing tunnel failed'))));
    if (!here) await this.cluster?.awaitGone({ member: { teamId, userId } });
    return victims.length + remote;
  }

  // ── cluster (--node-url) ──

  joinCluster(node: ClusterNode): void {
    this.cluster = node;
  }

  private touch(id: string): number {
    const mark = ++this.touches;
    this.touched.set(id, mark);
    return mark;
  }

  /** Runs admissions of one id one after another (each reads, then writes, its row). */
  private async oneAtATime<T>(id: string, work: () => Promise<T>): Promise<T> {
    const before = this.idLocks.get(id) ?? Promise.resolve();
    const mine = before.then(work, work);
    const settled = mine.catch(() => undefined);
    this.idLocks.set(id, settled);
    try {
      return await mine;
    } finally {
      if (this.idLocks.get(id) === settled) this.idLocks.delete(id);
    }
  }

  /** Claims `id` in the cluster's registry for this admission, or refuses it as the database decides. */
  private async claimInCluster(id: string, sessionId: string, url: string, teamId: string | null, m: Extract<TunnelShardToMain, { type: 'tunnel-admit' }>): Promise<void> {
    if (!this.cluster!.healthy) throw new ApiError('unavailable', 'this node lost the cluster database and admits no tunnel until it is back; try again (another node may serve you)');
    this.touch(id);
    const claim = { id, nodeId: this.cluster!.id, sessionId, userId: m.userId, keyId: m.keyId, teamId, tunnelType: m.tunnelType, port: m.remotePort, url, local: m.local, access: m.access, maxPerUser: this.config.maxTunnelsPerUser };
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await claimTunnel(this.sql, claim);
        if (r.ok) {
          this.remote.delete(id);
          this.touch(id);
          return;
        }
        if (r.holder === 'other-user') throw new ApiError('conflict', `tunnel id "${id}" is in use by another user`);
        if (r.holder === 'port') throw new ApiError('conflict', `port ${m.remotePort} is in use by a tunnel on another node; ask for another port`);
        throw new ApiError('forbidden', `limit reached: at most ${this.config.maxTunnelsPerUser} live tunnels per user (max-tunnels-per-user); you hold ${r.held}: close one first`);
      } catch (err) {
        // Two first claims of one id on two nodes: the primary key let one in; read again to answer as it decided.
        if ((err as { code?: string }).code === '23505' && attempt < 2) continue;
        throw err;
      }
    }
  }

  /** A notification from the database (src/cluster/node.ts); key and user changes are main's. */
  clusterEvent(e: Exclude<ClusterEvent, { t: 'key' } | { t: 'user' }>): void {
    switch (e.t) {
      case 'route':
        void this.refreshRoute(e.id);
        return;
      case 'node':
        if (e.up) return;
        for (const [id, r] of this.remote) if (r.node_id === e.id) this.applyRow(id, undefined);
        return;
      case 'close': {
        const here = this.tunnels.get(e.id);
        if (here && here.sessionId === e.session) void this.close(e.id, e.reason).catch((err: unknown) => this.log.warn({ err, id: e.id }, 'cluster: close asked by another node failed'));
        return;
      }
      case 'member':
        void this.closeMember(e.team, e.user, 'removed from the team', true);
        return;
      case 'reservations':
        void listReservations(this.sql).then(
          (list) => {
            this.reservations.clear();
            for (const r of list) this.reservations.set(r.id, r);
          },
          (err: unknown) => this.log.warn({ err }, 'cluster: reservations not reloaded'),
        );
        return;
      default:
        return assertNever(e);
    }
  }

  private async refreshRoute(id: string): Promise<void> {
    const mark = this.touch(id);
    let row: ClusterTunnelRow | undefined;
    try {
      row = await clusterTunnel(this.sql, id);
    } catch (err) {
      this.log.debug({ err, id }, 'cluster: route not read; the reconcile catches up');
      return;
    }
    if (this.touched.get(id) === mark) this.applyRow(id, row);
  }

  /** The database says `row` holds `id` now (undefined: nobody): this node follows. */
  private applyRow(id: string, row: ClusterTunnelRow | undefined): void {
    const me = this.cluster!.id;
    const here = this.tunnels.get(id);
    if (here && row?.session_id !== here.sessionId) {
      // Taken over on another node (the same user), or our row is gone (this node was declared dead).
      const takenOver = row !== undefined;
      this.tunnels.delete(id);
      this.shards
        .ask(here.shard, { type: 'tunnel-close', tunnelId: id, reason: takenOver ? 'taken over by another connection of the same user, on another node' : 'this node lost its place in the cluster; connect again', permanent: takenOver, sessionId: here.sessionId, code: takenOver ? 'taken-over' : 'unavailable' }, CLOSE_TIMEOUT_MS)
        .then(
          (r) => !r.closed && this.stats.close(here.sessionId),
          () => this.stats.close(here.sessionId),
        );
      this.hold(id, here.info.owner_id);
      if (!row) this.broadcast({ type: 'tunnel-route', id, shard: null });
    }
    if (row && row.node_id !== me) {
      this.remote.set(id, row);
      this.holds.delete(id);
      this.broadcast({ type: 'tunnel-route', id, shard: null, node: row.node_url, port: row.port, sessionId: row.session_id, access: row.access });
      return;
    }
    const gone = this.remote.get(id);
    if (gone && !row) {
      this.remote.delete(id);
      this.hold(id, gone.user_id);
      this.broadcast({ type: 'tunnel-route', id, shard: null });
    } else if (gone) this.remote.delete(id);
  }

  /** Compares this node's tunnels and routes with the database; each id that differs follows it. */
  async reconcile(): Promise<void> {
    if (!this.cluster) return;
    const start = this.touches;
    let rows: ClusterTunnelRow[];
    try {
      rows = await clusterTunnels(this.sql);
    } catch (err) {
      this.log.debug({ err }, 'cluster: reconcile could not read the registry');
      return;
    }
    const stale = (id: string): boolean => (this.touched.get(id) ?? 0) > start;
    const listed = new Map(rows.map((r) => [r.id, r]));
    const me = this.cluster.id;
    for (const r of rows) {
      if (stale(r.id)) continue;
      if (r.node_id === me) {
        // Ours in the database, not here: a release that failed (the database was away).
        if (this.tunnels.get(r.id)?.sessionId !== r.session_id) releaseTunnel(this.sql, r.id, r.session_id).catch(() => undefined);
        continue;
      }
      const known = this.remote.get(r.id);
      if (!known || known.session_id !== r.session_id || known.node_id !== r.node_id) this.applyRow(r.id, r);
    }
    for (const id of [...this.remote.keys(), ...this.tunnels.keys()]) if (!listed.has(id) && !stale(id)) this.applyRow(id, undefined);
    for (const [id, mark] of this.touched) if (mark <= start) this.touched.delete(id);
  }

  /** The lease is lost: no tunnel here may outlive it (a revocation may be unheard). Clients reconnect. */
  fence(): void {
    for (const [id, e] of [...this.tunnels]) {
      this.tunnels.delete(id);
      this.shards
        .ask(e.shard, { type: 'tunnel-close', tunnelId: id, reason: 'this node lost the cluster database; connect again', permanent: false, sessionId: e.sessionId, code: 'unavailable' }, CLOSE_TIMEOUT_MS)
        .then(
          (r) => !r.closed && this.stats.close(e.sessionId),
          () => this.stats.close(e.sessionId),
        );
      this.broadcast({ type: 'tunnel-route', id, shard: null });
    }
  }
}

/** A tunnel of another node as the API lists it (its counters as that node last flushed them). */
function remoteView(r: ClusterTunnelRow, totals: TunnelInfo['stats'] | undefined): TunnelInfo {
  return {
    id: r.id,
    owner_id: r.user_id,
    team_id: r.team_id,
    remote_port: r.port,
    tunnel_type: r.tunnel_type,
    url: r.url,
    local_target: r.local_target,
    uptime_secs: Math.max(0, Math.floor((Date.now() - r.registered_at.getTime()) / 1000)),
    stats: totals ?? { bytes_in: 0, bytes_out: 0, requests: 0 },
    access: accessView(r.access),
  };
}

/**
 * What the client that lost its tunnel to a takeover is told. Another key of the same user is
 * named (name and public prefix) and never called "your key": the person reading may not be the
 * one who started the other client.
 */
export function takeoverReason(sameKey: boolean, newKey: { name: string; key_prefix: string } | null): string {
  if (sameKey) return 'taken over by another connection using this same key';
  if (newKey) return `taken over by another connection of the same user, with the key "${newKey.name}" (${newKey.key_prefix})`;
  return 'taken over by another connection of the same user, with another key';
}
