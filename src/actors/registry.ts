import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import { closeOrphanedSessions, pruneClosedSessions } from '../db/sessions.js';
import { keyLabel } from '../db/api-keys.js';
import { getMembership, getTeam, memberTeamIdByName } from '../db/teams.js';
import { getUser } from '../db/users.js';
import { deleteReservation, listReservations, putReservation, recentHolders } from '../db/tunnel-reservations.js';
import { IdHolds } from './id-holds.js';
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
  RouteMember,
  TunnelRoute,
  TunnelShardToMain,
  TunnelShardToMainReplies,
} from '../protocol/tunnel-messages.js';
import { randomTunnelId, tunnelIdProblem, type RefusalCode } from '../protocol/frames.js';
import { accessView, type AccessWire } from '../protocol/access.js';
import { addsClient, claimRefusalProblem, decideClaim, type ClaimRefusal } from '../protocol/admission.js';
import { ApiError, assertNever } from '../errors.js';
import { StatsActor } from './stats.js';
import { claimTunnel, clusterTunnel, clusterTunnels, releaseMember, sessionTotals, type ClusterTunnelRow, type TunnelClaim } from '../db/cluster.js';
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

const CLOSE_TIMEOUT_MS = 5_000;
/** --session-retention: how often closed sessions past it are deleted, and how many per statement. */
const PRUNE_INTERVAL_MS = 10 * 60_000;
const PRUNE_BATCH = 1_000;
const RATE_WINDOW_MS = 60_000;
const COUNTS_TIMEOUT_MS = 2_000;
const ROUTE_ACK_TIMEOUT_MS = 2_000;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** One control connection serving a registration (a pool has several clients; a client of a
 *  cluster has a connection on two nodes: each one a member, with a session of its own). */
interface Member {
  sessionId: string;
  shard: number;
  /** the control connection's key: a takeover by another key of the user says which one */
  keyId: string;
  userId: string;
  /** http on several shards: what a lane of this member presents (Opened.laneKey) */
  laneKey: string | null;
  /** the burrow client it belongs to (its connections on other nodes share it: Opened.memberKey) */
  client: string;
  registeredAtMs: number;
  /** tcp: this member bound the registration's port on its shard (a joining member binds none) */
  listens: boolean;
}

/** A live tunnel: its registration and this node's members of it. */
interface Entry {
  info: Omit<TunnelInfo, 'uptime_secs' | 'stats' | 'access' | 'pool' | 'connections'>;
  /** access rules, credentials hashed: sent with the route so every shard checks visitors */
  access: AccessWire | null;
  /** several clients may serve it (--pool) */
  pool: boolean;
  registeredAtMs: number;
  /** since when its owner has used the id (a reconnect within --id-grace carries it on): its hold's lifetime */
  usedSinceMs: number;
  members: Member[];
}

type Admit = Extract<TunnelShardToMain, { type: 'tunnel-admit' }>;

/** Route reads of distinct ids in flight at once (cluster route hints); past it, a reconcile. */
const MAX_ROUTE_READS = 64;

export class RegistryActor {
  private readonly tunnels = new Map<string, Entry>();
  private readonly holds: IdHolds;
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
  /** cluster: live tunnels with a member on another node, as the database lists them */
  private readonly remote = new Map<string, ClusterTunnelRow>();
  /** cluster: per id, the `touches` count when something last changed it here (a read of the
   *  database older than that is stale for this id and not applied) */
  private readonly touched = new Map<string, number>();
  private touches = 0;
  /** cluster: ids with a claim in flight (its row may be written before its member is here): reads of them wait for the next change */
  private readonly claiming = new Map<string, number>();
  /** admissions of one id take turns (each reads, awaits, then writes its registration) */
  private readonly idLocks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly log: Logger,
    private readonly shards: ShardDirectory,
    private readonly sql: Sql,
    private readonly config: Config,
  ) {
    this.stats = new StatsActor(log.child({ actor: 'stats' }), sql);
    this.holds = new IdHolds({ graceMs: config.idGraceSecs * 1000, minLifetimeMs: config.idGraceMinLifetimeSecs * 1000, maxPerUser: config.idGraceMaxPerUser });
  }

  /** Start-up: sessions left open by a crash are closed at their last flush (in a cluster, the
   *  dead nodes' are the reaper's: other nodes' sessions are live). */
  async start(): Promise<void> {
    await closeOrphanedSessions(this.sql, this.config.nodeUrl !== null);
    // A restart drops every connection at once: the holds survive it (read from the sessions).
    if (this.config.idGraceSecs > 0) {
      for (const r of await recentHolders(this.sql, this.config.idGraceSecs, this.config.idGraceMinLifetimeSecs, this.config.idGraceMaxPerUser)) {
        this.holds.restore(r.tunnel_id, { userId: r.user_id, sinceMs: r.connected_at.getTime(), untilMs: r.disconnected_at.getTime() + this.config.idGraceSecs * 1000 });
      }
      this.holds.start();
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
    this.holds.stop();
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
      case 'tunnel-leave':
        this.removeMember(msg.id, msg.sessionId, false);
        return undefined;
      case 'tunnel-stats':
        for (const d of msg.deltas) this.stats.add(d);
        return undefined;
      case 'tunnel-routes':
        return [...new Set([...this.tunnels.keys(), ...this.remote.keys()])].flatMap((id): TunnelRoute[] => {
          const r = this.routeOf(id);
          return r.members && r.members.length > 0 ? [{ id, shard: r.shard ?? -1, ...(r.node ? { node: r.node } : {}), port: r.port ?? null, portHeld: r.portHeld ?? false, sessionId: r.sessionId!, access: r.access ?? null, members: r.members }] : [];
        });
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

  /** Who else holds `id` against user `userId`, as a refusal, or null when they may take it. */
  private async claimProblem(id: string, userId: string): Promise<string | null> {
    const r = this.reservations.get(id);
    if (r) {
      if (r.user_id !== null) return r.user_id === userId ? null : `tunnel id "${id}" is reserved for another user`;
      if (r.team_id !== null && (await getMembership(this.sql, r.team_id, userId))) return null;
      return `tunnel id "${id}" is reserved for a team you are not in`;
    }
    const h = this.holds.get(id);
    if (!h || h.userId === userId) return null;
    return `tunnel id "${id}" is held for the user who last used it until ${new Date(h.untilMs).toISOString()} (id grace); an admin can release it`;
  }

  private async reserve(id: string, userId: string | null, teamId: string | null): Promise<Reservation> {
    const problem = tunnelIdProblem(id, this.config.domain);
    if (problem) throw new ApiError('bad-request', problem);
    if ((userId === null) === (teamId === null)) throw new ApiError('bad-request', 'give exactly one of "user_id" and "team_id"');
    if (userId !== null && !(await getUser(this.sql, userId))) throw new ApiError('not-found', `no user ${userId}`);
    if (teamId !== null && !(await getTeam(this.sql, teamId))) throw new ApiError('not-found', `no team ${teamId}`);
    const r = await putReservation(this.sql, id, userId, teamId);
    this.reservations.set(id, r);
    await this.cluster?.notify({ t: 'reservations' });
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

  /** Live tunnels by type (GET /metrics: this node's). */
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
    let sessions = 0;
    for (const e of this.tunnels.values()) sessions += e.members.length;
    return { registry: { tunnels: this.tunnels.size, sessions: Math.max(sessions, this.stats.size), heap_used_bytes: process.memoryUsage().heapUsed }, shards };
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

  /** A shard died: its members are gone; their sessions close with the last counters heard. */
  shardDown(shard: number): void {
    this.controls.delete(shard);
    for (const [claim, c] of this.claims) if (c.shard === shard) this.claims.delete(claim);
    for (const [id, e] of [...this.tunnels]) for (const m of e.members.filter((x) => x.shard === shard)) this.removeMember(id, m.sessionId);
  }

  // ── routes ──

  /** What every shard is told of `id`: its members here (by shard) and on other nodes (by URL). */
  private routeOf(id: string): Extract<TunnelMainToShard, { type: 'tunnel-route' }> {
    const e = this.tunnels.get(id);
    const r = this.remote.get(id);
    const me = this.cluster?.id;
    const members: RouteMember[] = (e?.members ?? []).map((m) => ({ session: m.sessionId, client: m.client, shard: m.shard }));
    for (const m of r?.members ?? []) if (m.node_id !== me) members.push({ session: m.session_id, client: m.client, node: m.node_url });
    if (members.length === 0) return { type: 'tunnel-route', id, shard: null };
    const first = members[0]!;
    return {
      type: 'tunnel-route',
      id,
      shard: first.shard ?? null,
      ...(first.node ? { node: first.node } : {}),
      port: e ? e.info.remote_port : r!.port,
      portHeld: e?.members.some((m) => m.listens) ?? false,
      sessionId: first.session,
      access: e ? e.access : r!.access,
      members,
    };
  }

  /** broadcast, answered: a shard that does not answer in time (restarting) asks for every
   *  route when it starts, so waiting longer would only delay the client. */
  private async routeEverywhere(id: string): Promise<void> {
    const msg = this.routeOf(id);
    const acks = Array.from({ length: this.config.workers }, (_, i) =>
      this.shards.ask(i, msg, ROUTE_ACK_TIMEOUT_MS).catch((err) => this.log.debug({ err, shard: i }, 'shard did not confirm a route')),
    );
    await Promise.all(acks);
  }

  private broadcastRoute(id: string): void {
    const msg = this.routeOf(id);
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

  // ── admission ──

  private async admit(shard: number, m: Admit): Promise<TunnelAdmitted> {
    try {
      if (m.id === null) return await this.admitOnce(shard, m);
      return await this.oneAtATime(m.id, () => this.admitOnce(shard, m));
    } finally {
      // Spent either way; on success the entry now counts instead (set before this runs).
      if (m.claim !== null) this.claims.delete(m.claim);
    }
  }

  /** Runs admissions of one id one after another (each reads, awaits, then writes). */
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

  private async admitOnce(shard: number, m: Admit): Promise<TunnelAdmitted> {
    this.countOpen(m.userId);
    if (m.id !== null) {
      const problem = tunnelIdProblem(m.id, this.config.domain);
      if (problem) throw new ApiError('bad-request', problem);
    }
    if (m.pool && m.tunnelType !== 'http') throw new ApiError('bad-request', 'a pool serves an http tunnel: TCP tunnels cannot be pooled');
    if (m.member !== null) return this.join(shard, m);
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
    // message, read now (a race just leaves it unnamed).
    const holder = m.id === null ? undefined : this.tunnels.get(m.id);
    const newKey = holder && holder.info.owner_id === m.userId && holder.members.some((x) => x.keyId !== m.keyId) ? await keyLabel(this.sql, m.keyId).catch(() => null) : null;
    const claimProblem = m.id === null ? null : await this.claimProblem(m.id, m.userId);
    let id = m.id;
    if (id === null) {
      do id = randomTunnelId(randomBytes);
      while (this.tunnels.has(id) || this.remote.has(id) || this.holds.has(id) || this.reservations.has(id) || tunnelIdProblem(id, this.config.domain));
    }
    const old = this.tunnels.get(id);
    const remote = this.remote.get(id);
    // Read before addMember ends the hold: a reconnect or takeover (here or on another node)
    // keeps counting from the user's first connection.
    const usedSinceMs = (old?.info.owner_id === m.userId ? old.usedSinceMs : null) ?? (remote?.user_id === m.userId ? remote.registered_at.getTime() : null) ?? this.holds.heldSince(id, m.userId) ?? Date.now();
    const held = old ? { userId: old.info.owner_id, teamId: old.info.team_id, pool: old.pool, type: old.info.tunnel_type, access: old.access } : remote ? { userId: remote.user_id, teamId: remote.team_id, pool: remote.pool, type: remote.tunnel_type, access: remote.access } : null;
    // In a cluster the claim decides again, on the row it reads FOR UPDATE.
    const verdict = decideClaim(held, { userId: m.userId, teamId, pool: m.pool, type: m.tunnelType, access: m.access });
    if (!verdict.ok) throw claimRefused(id, verdict);
    const joinsPool = verdict.kind === 'join-pool';
    // A live tunnel of this user takes over regardless (it holds the id now); otherwise the
    // reservation and the grace hold decide.
    if (verdict.kind === 'new' && claimProblem !== null) throw new ApiError('conflict', claimProblem);
    const client = randomBytes(18).toString('base64url');
    const sessionId = randomUUID();
    const url = this.publicUrl(m.tunnelType, id, m.remotePort);
    // In a cluster the database's answer is the registration (a pool another node just started, say).
    const reg = this.cluster ? await this.claimInCluster({ id, sessionId, url, teamId, client, mode: m.pool ? { pool: true } : { plain: true } }, m) : null;
    if (!reg && addsClient(verdict)) {
      const max = this.config.maxTunnelsPerUser;
      let n = 0;
      for (const e of this.tunnels.values()) n += new Set(e.members.filter((x) => x.userId === m.userId).map((x) => x.client)).size;
      if (n >= max) throw claimRefused(id, { ok: false, why: 'limit', held: n, max });
    }
    const current = this.tunnels.get(id);
    if (current && !joinsPool) {
      // Same user: a reconnect whose old connection is stale (or a second client). The new
      // registration wins; the old one is told so and must not come back. Its sessions close
      // when their shards report tunnel-down with the final counters.
      this.tunnels.delete(id);
      for (const x of current.members) {
        const reason = takeoverReason(x.keyId === m.keyId, newKey);
        this.endMember(x, { type: 'tunnel-close', tunnelId: id, reason, permanent: true, sessionId: x.sessionId, code: 'taken-over' });
      }
    }
    const entry: Entry = joinsPool && current
      ? current
      : {
          info: { id, owner_id: reg?.userId ?? m.userId, team_id: reg ? reg.teamId : teamId, remote_port: reg ? reg.port : m.remotePort, tunnel_type: m.tunnelType, url: reg?.url ?? url, local_target: m.local },
          access: reg ? reg.access : m.access,
          pool: reg?.pool ?? m.pool,
          registeredAtMs: Date.now(),
          usedSinceMs,
          members: [],
        };
    this.tunnels.set(id, entry);
    const laneKey = this.addMember(id, entry, shard, m, sessionId, client);
    // Every shard knows the route before the client hears Opened and prints its URL: a visitor
    // who uses it at once may land on any shard, and must not get 404 there.
    await this.routeEverywhere(id);
    return {
      id,
      sessionId,
      url: entry.info.url,
      teamId: entry.info.team_id,
      tookOver: held !== null && !joinsPool,
      access: entry.access,
      remotePort: entry.info.remote_port,
      ...(laneKey ? { laneKey } : {}),
      ...(this.cluster ? { memberKey: client } : {}),
    };
  }

  /** One more connection of a client already serving `m.id` (its connection to another node: Open.member). */
  private async join(shard: number, m: Admit): Promise<TunnelAdmitted> {
    const id = m.id;
    if (id === null || !this.cluster) throw new ApiError('not-found', 'no live tunnel of this client to join here');
    const sessionId = randomUUID();
    const reg = await this.claimInCluster({ id, sessionId, url: '', teamId: null, client: m.member!, mode: { join: m.member! } }, m);
    let entry = this.tunnels.get(id);
    if (!entry) {
      entry = { info: { id, owner_id: reg.userId, team_id: reg.teamId, remote_port: reg.port, tunnel_type: m.tunnelType, url: reg.url, local_target: m.local }, access: reg.access, pool: reg.pool, registeredAtMs: Date.now(), usedSinceMs: this.holds.heldSince(id, reg.userId) ?? Date.now(), members: [] };
      this.tunnels.set(id, entry);
    }
    const laneKey = this.addMember(id, entry, shard, m, sessionId, m.member!);
    await this.routeEverywhere(id);
    return { id, sessionId, url: entry.info.url, teamId: entry.info.team_id, tookOver: false, access: entry.access, remotePort: entry.info.remote_port, memberKey: m.member!, ...(laneKey ? { laneKey } : {}) };
  }

  private addMember(id: string, entry: Entry, shard: number, m: Admit, sessionId: string, client: string): string | null {
    // TCP visitors arrive at the owner's own listener: lanes would carry nothing.
    const laneKey = m.tunnelType === 'http' && this.config.workers > 1 ? randomBytes(18).toString('base64url') : null;
    entry.members.push({ sessionId, shard, keyId: m.keyId, userId: m.userId, laneKey, client, registeredAtMs: Date.now(), listens: m.remotePort !== null });
    this.holds.delete(id);
    this.stats.open({ id: sessionId, userId: m.userId, tunnelId: id, tunnelType: m.tunnelType, teamId: entry.info.team_id, clientIp: m.clientIp, nodeId: this.cluster?.id ?? null });
    return laneKey;
  }

  /** Claims `id` in the cluster's registry for this member, or refuses it as the database decides. */
  private async claimInCluster(
    c: { id: string; sessionId: string; url: string; teamId: string | null; client: string; mode: TunnelClaim['mode'] },
    m: Admit,
  ): Promise<{ userId: string; teamId: string | null; access: AccessWire | null; port: number | null; url: string; pool: boolean }> {
    if (!this.cluster!.healthy) throw new ApiError('unavailable', 'this node lost the cluster database and admits no tunnel until it is back; try again (another node may serve you)');
    this.touch(c.id);
    this.claiming.set(c.id, (this.claiming.get(c.id) ?? 0) + 1);
    try {
      return await this.claimRow(c, m);
    } finally {
      const n = (this.claiming.get(c.id) ?? 1) - 1;
      if (n > 0) this.claiming.set(c.id, n);
      else this.claiming.delete(c.id);
      this.touch(c.id);
      // After the member is added (the caller's next synchronous step): what changed meanwhile.
      if (n <= 0 && this.refreshAfterClaim.delete(c.id)) queueMicrotask(() => void this.refreshRoute(c.id));
    }
  }

  private async claimRow(
    c: { id: string; sessionId: string; url: string; teamId: string | null; client: string; mode: TunnelClaim['mode'] },
    m: Admit,
  ): Promise<{ userId: string; teamId: string | null; access: AccessWire | null; port: number | null; url: string; pool: boolean }> {
    const claim: TunnelClaim = { ...c, nodeId: this.cluster!.id, userId: m.userId, keyId: m.keyId, tunnelType: m.tunnelType, port: m.remotePort, local: m.local, access: m.access, clientIp: m.clientIp, maxPerUser: this.config.maxTunnelsPerUser };
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await claimTunnel(this.sql, claim);
        this.touch(c.id);
        if (r.ok) return { userId: r.registration.userId, teamId: r.registration.teamId, access: r.registration.access, port: r.registration.port, url: r.registration.url, pool: r.registration.pool };
        throw claimRefused(c.id, r);
      } catch (err) {
        // Two first claims of one id on two nodes: the primary key let one in; read again to answer as it decided.
        if ((err as { code?: string }).code === '23505' && attempt < 2) continue;
        throw err;
      }
    }
  }

  /**
   * A lane of a live http tunnel's member on shard `fromShard`. Another user's tunnel answers
   * exactly like a missing one; the key is compared in constant time. Nothing is recorded: the
   * lane lives while the route names its member's session (the shard checks it).
   */
  private lane(fromShard: number, id: string, userId: string, key: string): TunnelLaneAdmitted {
    const e = this.tunnels.get(id);
    const mine = e?.members.filter((x) => x.userId === userId && x.laneKey !== null) ?? [];
    if (!e || mine.length === 0) throw new ApiError('not-found', `no live http tunnel "${id}" of yours takes lanes`);
    const given = Buffer.from(key);
    const m = mine.find((x) => {
      const expected = Buffer.from(x.laneKey!);
      return given.length === expected.length && timingSafeEqual(given, expected);
    });
    if (!m) throw new ApiError('forbidden', `wrong lane key for tunnel "${id}"`);
    if (m.shard === fromShard) throw new ApiError('conflict', `tunnel "${id}" is served by this shard itself: a lane here would carry nothing`);
    return { sessionId: m.sessionId, url: e.info.url, teamId: e.info.team_id, access: e.access };
  }

  // ── ends ──

  private down(id: string, sessionId: string, last: StatsDelta | null): void {
    if (last) this.stats.add(last);
    this.stats.close(sessionId);
    this.removeMember(id, sessionId);
  }

  /** Member `sessionId` of `id` is over (or leaving: `closeSession` false, its tunnel-down closes
   *  the session): out of the route; the tunnel ends with its last member (its id then stays its
   *  owner's for --id-grace). In a cluster its row goes too. */
  private removeMember(id: string, sessionId: string, closeSession = true): void {
    if (closeSession) this.stats.close(sessionId);
    const e = this.tunnels.get(id);
    const i = e ? e.members.findIndex((x) => x.sessionId === sessionId) : -1;
    if (!e || i < 0) return;
    e.members.splice(i, 1);
    if (e.members.length === 0) {
      this.tunnels.delete(id);
      this.holds.ended(id, e.info.owner_id, e.usedSinceMs);
    }
    if (this.cluster) {
      this.touch(id);
      // Our member leaves the database's copy too, so the route does not name it meanwhile.
      const r = this.remote.get(id);
      if (r) r.members = r.members.filter((x) => x.session_id !== sessionId);
      releaseMember(this.sql, id, sessionId).catch((err: unknown) => this.log.warn({ err, id }, 'cluster: member row not released; the reconcile retries'));
    }
    this.broadcastRoute(id);
  }

  /** Asks member `m`'s shard to close it; a shard that no longer holds it (or is gone) sends no tunnel-down: the session closes here. */
  private endMember(m: Member, msg: Extract<TunnelMainToShard, { type: 'tunnel-close' }>): Promise<void> {
    return this.shards.ask(m.shard, msg, CLOSE_TIMEOUT_MS).then(
      (r) => void (!r.closed && this.stats.close(m.sessionId)),
      () => void this.stats.close(m.sessionId),
    );
  }

  /** Closes members of this node for good (permanent: the client must not return) and forgets them. */
  private async closeMembers(victims: { id: string; m: Member }[], reason: string, code?: RefusalCode): Promise<void> {
    await Promise.all(
      victims.map(async ({ id, m }) => {
        try {
          // The member goes when the shard reports tunnel-down (with the final counters).
          await this.shards.ask(m.shard, { type: 'tunnel-close', tunnelId: id, reason, permanent: true, sessionId: m.sessionId, code }, CLOSE_TIMEOUT_MS);
        } catch (err) {
          this.log.warn({ err, id }, 'closing tunnel failed');
        }
        this.removeMember(id, m.sessionId);
      }),
    );
  }

  private members(filter: (e: Entry, m: Member) => boolean): { id: string; m: Member }[] {
    const out: { id: string; m: Member }[] = [];
    for (const [id, e] of this.tunnels) for (const m of e.members) if (filter(e, m)) out.push({ id, m });
    return out;
  }

  private async close(id: string, reason: string): Promise<Record<string, never>> {
    const e = this.tunnels.get(id);
    const r = this.remote.get(id);
    const elsewhere = r?.members.filter((x) => x.node_id !== this.cluster?.id) ?? [];
    if (!e && elsewhere.length === 0) throw new ApiError('not-found', `no live tunnel "${id}"`);
    // Every member the database lists elsewhere, also one that joined since this node heard.
    const marked = this.cluster ? await this.cluster.requestClose(id, reason) : [];
    await this.closeMembers(this.members((_, m) => e?.members.includes(m) ?? false), reason);
    if (marked.length > 0 && !(await this.cluster!.awaitGone({ sessionIds: marked }))) {
      throw new ApiError('unavailable', `a node holding tunnel "${id}" did not confirm the close; it ends within ${Math.ceil(AWAIT_GONE_MS / 1000)} s`);
    }
    return {};
  }

  /** Ends a user's (deactivated) or a team's (deleted) tunnels; in a cluster, answers once every
   *  node ended its own (each heard the change from the database: clusterEvent). */
  private async closeOwner(userId: string | null, teamId: string | null, reason: string): Promise<number> {
    this.revocations++;
    const victims = this.members((e, m) => (userId !== null && m.userId === userId) || (teamId !== null && e.info.team_id === teamId));
    const remote = [...this.remote.values()].flatMap((r) => r.members.filter((x) => x.node_id !== this.cluster?.id && ((userId !== null && x.user_id === userId) || (teamId !== null && r.team_id === teamId)))).length;
    await this.closeMembers(victims, reason);
    await this.cluster?.awaitGone({ userIds: userId === null ? [] : [userId], teamIds: teamId === null ? [] : [teamId] });
    return victims.length + remote;
  }

  private async closeMember(teamId: string, userId: string, reason: string, here = false): Promise<number> {
    this.revocations++;
    const victims = this.members((e, m) => m.userId === userId && e.info.team_id === teamId);
    const remote = here ? 0 : [...this.remote.values()].flatMap((r) => (r.team_id === teamId ? r.members.filter((x) => x.node_id !== this.cluster?.id && x.user_id === userId) : [])).length;
    await this.closeMembers(victims, reason, 'forbidden');
    if (!here) await this.cluster?.awaitGone({ member: { teamId, userId } });
    return victims.length + remote;
  }

  // ── listing ──

  /** Live tunnels visible to `p`, over the whole cluster: members here with live counters, the others' as last flushed (≤ 1 s old). */
  private async list(p: Principal, teamIds: string[]): Promise<TunnelInfo[]> {
    const teams = new Set(teamIds);
    const visible = (owner: string, team: string | null): boolean => p.role === 'admin' || owner === p.userId || (team !== null && teams.has(team));
    const ids = [...new Set([...this.tunnels.keys(), ...this.remote.keys()])].filter((id) => {
      const e = this.tunnels.get(id);
      const r = this.remote.get(id);
      return e ? visible(e.info.owner_id, e.info.team_id) : visible(r!.user_id, r!.team_id);
    });
    const out = await this.views(ids);
    return out.sort((a, b) => a.id.localeCompare(b.id));
  }

  private async get(id: string): Promise<TunnelInfo | null> {
    return (await this.views([id]))[0] ?? null;
  }

  private async views(ids: string[]): Promise<TunnelInfo[]> {
    const me = this.cluster?.id;
    const elsewhere = (id: string) => this.remote.get(id)?.members.filter((x) => x.node_id !== me) ?? [];
    const sessions = ids.flatMap((id) => elsewhere(id).map((x) => x.session_id));
    const flushed = sessions.length > 0 ? await sessionTotals(this.sql, sessions) : new Map<string, TunnelInfo['stats']>();
    const out: TunnelInfo[] = [];
    for (const id of ids) {
      const e = this.tunnels.get(id);
      const r = this.remote.get(id);
      if (!e && !r) continue;
      const stats = { bytes_in: 0, bytes_out: 0, requests: 0 };
      const add = (t: TunnelInfo['stats'] | undefined) => {
        stats.bytes_in += t?.bytes_in ?? 0;
        stats.bytes_out += t?.bytes_out ?? 0;
        stats.requests += t?.requests ?? 0;
      };
      for (const m of e?.members ?? []) add(this.stats.totals(m.sessionId));
      const others = elsewhere(id);
      for (const x of others) add(flushed.get(x.session_id));
      const connections = (e?.members.length ?? 0) + others.length;
      const info = e ? e.info : { id, owner_id: r!.user_id, team_id: r!.team_id, remote_port: r!.port, tunnel_type: r!.tunnel_type, url: r!.url, local_target: r!.local_target };
      const since = e ? e.registeredAtMs : r!.registered_at.getTime();
      out.push({ ...info, uptime_secs: Math.max(0, Math.floor((Date.now() - since) / 1000)), stats, access: accessView(e ? e.access : r!.access), pool: e ? e.pool : r!.pool, connections });
    }
    return out;
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

  /** A notification from the database (src/cluster/node.ts); key and user changes are main's. */
  clusterEvent(e: Exclude<ClusterEvent, { t: 'keys' } | { t: 'users' }>): void {
    switch (e.t) {
      case 'route':
        void this.refreshRoute(e.id);
        return;
      case 'node':
        // A node joined or died: its members come or go on many ids at once.
        if (!e.up) void this.reconcile();
        return;
      case 'close': {
        // Only the members whose rows ask for it, with the reason written there by the API's node.
        for (const { sessionId, reason } of e.members) {
          const victims = this.members((_, m) => m.sessionId === sessionId && (this.tunnels.get(e.id)?.members.includes(m) ?? false));
          if (victims.length > 0) void this.closeMembers(victims, reason);
        }
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

  /**
   * Reads `id`'s route again: one read at a time per id (a notification meanwhile makes one more),
   * and at most MAX_ROUTE_READS ids at once (past it, one reconcile reads them all). Anyone who
   * may connect to the database can send route hints, as many as they like.
   */
  private async refreshRoute(id: string): Promise<void> {
    if (this.routeReads.has(id)) return void this.routeReads.set(id, true);
    if (this.routeReads.size >= MAX_ROUTE_READS) return this.reconcile();
    try {
      do {
        this.routeReads.set(id, false);
        await this.readRoute(id);
      } while (this.routeReads.get(id) === true);
    } finally {
      this.routeReads.delete(id);
    }
  }

  /** Ids whose route is being read; true: read it once more when done. */
  private readonly routeReads = new Map<string, boolean>();

  private async readRoute(id: string): Promise<void> {
    const mark = this.touch(id);
    let row: ClusterTunnelRow | undefined;
    try {
      row = await clusterTunnel(this.sql, id);
    } catch (err) {
      this.log.debug({ err, id }, 'cluster: route not read; the reconcile catches up');
      return;
    }
    // A claim of this id in flight here: the member it adds is not in `tunnels` yet; its own notification reads again.
    if (this.touched.get(id) === mark && !this.claiming.has(id)) this.applyRow(id, row);
    else if (this.claiming.has(id)) this.refreshAfterClaim.add(id);
  }

  /** Ids whose notification came during a claim here: read again once it is done. */
  private readonly refreshAfterClaim = new Set<string>();

  /** The database says `row` is `id` now (undefined: nobody serves it): this node follows. */
  private applyRow(id: string, row: ClusterTunnelRow | undefined): void {
    const me = this.cluster!.id;
    const e = this.tunnels.get(id);
    if (e) {
      const listed = new Set(row?.members.filter((x) => x.node_id === me).map((x) => x.session_id) ?? []);
      for (const m of e.members.filter((x) => !listed.has(x.sessionId))) {
        // Taken over (the registration is another one now), or our rows are gone (this node was declared dead).
        const takenOver = row !== undefined;
        this.endMember(m, {
          type: 'tunnel-close',
          tunnelId: id,
          reason: takenOver ? 'taken over by another connection of the same user, on another node' : 'this node lost its place in the cluster; connect again',
          permanent: takenOver,
          sessionId: m.sessionId,
          code: takenOver ? 'taken-over' : 'unavailable',
        });
        e.members.splice(e.members.indexOf(m), 1);
      }
      if (e.members.length === 0) {
        this.tunnels.delete(id);
        this.holds.ended(id, e.info.owner_id, e.usedSinceMs);
      }
    }
    const had = this.remote.get(id);
    if (row && row.members.some((x) => x.node_id !== me)) {
      this.remote.set(id, row);
      this.holds.delete(id);
    } else if (had) {
      this.remote.delete(id);
      if (!this.tunnels.has(id)) this.holds.ended(id, had.user_id, had.registered_at.getTime());
    }
    this.broadcastRoute(id);
  }

  /** Compares this node's tunnels and routes with the database; each id that differs follows it. */
  /**
   * One reconcile at a time: calls while one runs (the timer, a LISTEN reconnect, a flood of
   * node hints anyone who may connect can send) make one more run after it, not one each.
   */
  reconcile(): Promise<void> {
    if (this.reconciling) {
      this.reconcileAgain = true;
      return this.reconciling;
    }
    this.reconciling = (async () => {
      do {
        this.reconcileAgain = false;
        await this.reconcileOnce();
      } while (this.reconcileAgain);
    })().finally(() => {
      this.reconciling = null;
    });
    return this.reconciling;
  }

  private reconciling: Promise<void> | null = null;
  private reconcileAgain = false;

  private async reconcileOnce(): Promise<void> {
    if (!this.cluster) return;
    const start = this.touches;
    let rows: ClusterTunnelRow[];
    try {
      rows = await clusterTunnels(this.sql);
    } catch (err) {
      this.log.debug({ err }, 'cluster: reconcile could not read the registry');
      return;
    }
    const me = this.cluster.id;
    const stale = (id: string): boolean => (this.touched.get(id) ?? 0) > start || this.claiming.has(id);
    const key = (members: { session: string }[]): string => members.map((x) => x.session).sort().join(',');
    const listed = new Map(rows.map((r) => [r.id, r]));
    for (const r of rows) {
      if (stale(r.id)) continue;
      const e = this.tunnels.get(r.id);
      for (const x of r.members) {
        // Ours in the database, not here: a release that failed (the database was away).
        if (x.node_id === me && !e?.members.some((m) => m.sessionId === x.session_id)) releaseMember(this.sql, r.id, x.session_id).catch(() => undefined);
        // A close asked through another node whose notification was lost.
        if (x.node_id === me && x.close_reason !== null) this.clusterEvent({ t: 'close', id: r.id, members: [{ sessionId: x.session_id, reason: x.close_reason }] });
      }
      const known = [...(e?.members.map((m) => ({ session: m.sessionId })) ?? []), ...(this.remote.get(r.id)?.members.filter((x) => x.node_id !== me).map((x) => ({ session: x.session_id })) ?? [])];
      const truth = r.members.map((x) => ({ session: x.session_id }));
      if (key(known) !== key(truth)) this.applyRow(r.id, r);
    }
    for (const id of [...this.remote.keys(), ...this.tunnels.keys()]) if (!listed.has(id) && !stale(id)) this.applyRow(id, undefined);
    for (const [id, mark] of this.touched) if (mark <= start) this.touched.delete(id);
  }

  /** The lease is lost: no tunnel here may outlive it (a revocation may be unheard). Clients reconnect. */
  fence(): void {
    for (const [id, e] of [...this.tunnels]) {
      for (const m of e.members) {
        this.endMember(m, { type: 'tunnel-close', tunnelId: id, reason: 'this node lost the cluster database; connect again', permanent: false, sessionId: m.sessionId, code: 'unavailable' });
      }
      this.tunnels.delete(id);
      this.broadcastRoute(id);
    }
  }
}

function claimRefused(id: string, r: ClaimRefusal): ApiError {
  const p = claimRefusalProblem(id, r);
  return new ApiError(p.code, p.detail);
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
