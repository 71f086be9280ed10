import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import { closeOrphanedSessions } from '../db/sessions.js';
import { keyLabel } from '../db/api-keys.js';
import { getMembership, memberTeamIdByName } from '../db/teams.js';
import type { Config } from '../config.js';
import type { HandlerAnswer, TunnelInfo, Principal } from '../protocol/messages.js';
import type { DataPlaneCounts, ShardCounts, TunnelAdmitted, TunnelLaneAdmitted, TunnelMainToShard, TunnelShardToMain, TunnelShardToMainReplies } from '../protocol/tunnel-messages.js';
import { randomTunnelId, tunnelIdProblem, type RefusalCode } from '../protocol/frames.js';
import { addsClient, decideClaim, takeoverReason } from '../protocol/admission.js';
import { ApiError, assertNever } from '../errors.js';
import { IdHolds } from './id-holds.js';
import { StatsActor } from './stats.js';
import { UserLimits } from './user-limits.js';
import { IdReservations } from './reservations.js';
import { KeyedTurns } from './keyed-turns.js';
import { RouteBroadcast, type ShardDirectory } from './route-broadcast.js';
import { LocalDirectory } from './local-directory.js';
import { claimRefused, type Admit, type DirectoryHost, type Entry, type Member, type TunnelDirectory } from './tunnel-directory.js';

// RegistryActor (main thread): the single owner of "which live tunnel has which id, on
// which shard". Runs on main's event loop, so each message is handled to completion
// before the next: admission is race-free without locks (admissions of one id take turns;
// the team check's await is followed by a fresh conflict check).
//
//   shard ──tunnel-admit──▶ admit: id rules, team membership, decideClaim (protocol/admission.ts),
//                           the directory's claim ──▶ StatsActor.open(session) ──▶ tunnel-route to every shard
//   shard ──tunnel-down───▶ StatsActor.close(session, final counters) ──▶ tunnel-route null
//   shard ──tunnel-lane───▶ the lane key of a live http tunnel checked; its lanes end with the
//           route (a tunnel-route of another session, or null, closes them on their shards)
//   API   ──tunnels-close─▶ owning shard: tunnel-close (permanent: the client must not return)
//   API   ──tunnel-reserve / tunnel-release─▶ the reserved ids (database, then this copy)
//   Who may take an id: a live tunnel's owner (takeover) or a pool's (decideClaim); else, when
//   an admin reserved it, that user or that team's members; else, within --id-grace of its last
//   tunnel ending, the user who held it (so a dropped connection does not hand the id, its
//   webhooks and cookies, to whoever asks first); else anyone.
//   shard ──tunnel-port-claim / control-connect─▶ the per-user bounds (user-limits.ts)
//
// Where ids live is the TunnelDirectory's (tunnel-directory.ts): in memory on a node alone
// (LocalDirectory), and with the database in a cluster (ClusterDirectory, src/cluster/directory.ts).

export type { ShardDirectory };

/** Makes the directory the registry talks to (main.ts: a ClusterDirectory with --node-url). */
export type DirectoryFactory = (host: DirectoryHost, holds: IdHolds) => TunnelDirectory;

const CLOSE_TIMEOUT_MS = 5_000;
const COUNTS_TIMEOUT_MS = 2_000;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export class RegistryActor implements DirectoryHost {
  private readonly dir: TunnelDirectory;
  readonly reservations: IdReservations;
  private readonly limits: UserLimits;
  /** Bumped whenever memberships or users lose tunnels: an admission whose team check
   *  awaited across such a change is refused (transient: the client retries and re-checks). */
  private revocations = 0;
  readonly stats: StatsActor;
  private readonly routes: RouteBroadcast;
  /** admissions of one id take turns (each reads, awaits, then writes its registration) */
  private readonly idTurns = new KeyedTurns();

  constructor(
    private readonly log: Logger,
    private readonly shards: ShardDirectory,
    private readonly sql: Sql,
    private readonly config: Config,
    directory: DirectoryFactory = (_host, holds) => new LocalDirectory(holds),
  ) {
    this.stats = new StatsActor(log.child({ actor: 'stats' }), sql);
    this.limits = new UserLimits(config);
    this.routes = new RouteBroadcast(log, shards, config.workers, () => this.dir);
    const holds = new IdHolds({ graceMs: config.idGraceSecs * 1000, minLifetimeMs: config.idGraceMinLifetimeSecs * 1000, maxPerUser: config.idGraceMaxPerUser });
    this.dir = directory(this, holds);
    this.reservations = new IdReservations(sql, holds, config.domain, () => this.dir.reservationsChanged());
  }

  /** Start-up: sessions left open by a crash are closed at their last flush (in a cluster, the
   *  dead nodes' are the reaper's: other nodes' sessions are live). */
  async start(): Promise<void> {
    await closeOrphanedSessions(this.sql, this.config.nodeUrl !== null);
    await this.reservations.load(this.config);
    this.stats.start(this.config.sessionRetentionSecs);
  }

  /** Shutdown: every session ends; final flush of counters. */
  async stop(): Promise<void> {
    this.dir.holds.stop();
    await this.stats.stop();
  }

  /** The registry's mailbox: an ask's answer is its TunnelShardToMainReplies entry. */
  handle(fromShard: number, msg: TunnelShardToMain): HandlerAnswer<TunnelShardToMainReplies> {
    switch (msg.type) {
      case 'tunnels-list':
        return this.list(msg.principal, msg.teamIds);
      case 'tunnels-get':
        return this.dir.views([msg.id], (s) => this.stats.totals(s)).then((v) => v[0] ?? null);
      case 'tunnels-close':
        return this.close(msg.id, msg.reason);
      case 'tunnels-close-owner':
        return this.closeOwner(msg.userId, msg.teamId, msg.reason);
      case 'tunnels-close-member':
        return this.closeMember(msg.teamId, msg.userId, msg.reason);
      case 'tunnel-reservations':
        return this.reservations.list();
      case 'tunnel-reserve':
        return this.reservations.reserve(msg.id, msg.userId, msg.teamId);
      case 'tunnel-release':
        return this.reservations.release(msg.id);
      case 'tunnel-port-claim':
        return { claim: this.limits.claimPort(fromShard, msg.userId, [...this.dir.tunnels.values()].filter((e) => e.info.owner_id === msg.userId && e.info.tunnel_type === 'tcp' && e.info.id !== msg.id).length) };
      case 'tunnel-port-release':
        this.limits.releasePort(msg.claim);
        return undefined;
      case 'tunnel-admit':
        return this.admit(fromShard, msg);
      case 'tunnel-lane':
        return this.lane(fromShard, msg.id, msg.userId, msg.key);
      case 'tunnel-down':
        if (msg.last) this.stats.add(msg.last);
        this.removeMember(msg.id, msg.sessionId);
        return undefined;
      case 'tunnel-leave':
        this.removeMember(msg.id, msg.sessionId, false);
        return undefined;
      case 'tunnel-stats':
        for (const d of msg.deltas) this.stats.add(d);
        return undefined;
      case 'tunnel-routes':
        return this.routes.all();
      case 'data-plane-counts':
        return this.counts();
      case 'control-connect':
        return this.limits.controlConnect(fromShard, msg.userId);
      case 'control-disconnect':
        this.limits.controlDisconnect(fromShard, msg.userId);
        return undefined;
      default:
        return assertNever(msg);
    }
  }

  // ── counts ──

  /** Live tunnels by type (GET /metrics: this node's). */
  liveByType(): { http: number; tcp: number } {
    const n = { http: 0, tcp: 0 };
    for (const e of this.dir.tunnels.values()) n[e.info.tunnel_type]++;
    return n;
  }

  /** Live objects here and on every running shard (a shard that does not answer is left out). */
  async counts(): Promise<DataPlaneCounts> {
    const asks = Array.from({ length: this.config.workers }, (_, i) => this.shards.ask(i, { type: 'tunnel-counts' }, COUNTS_TIMEOUT_MS).catch(() => null));
    const shards = (await Promise.all(asks)).filter((c): c is ShardCounts => c !== null);
    let sessions = 0;
    for (const e of this.dir.tunnels.values()) sessions += e.members.length;
    return { registry: { tunnels: this.dir.tunnels.size, sessions: Math.max(sessions, this.stats.size), heap_used_bytes: process.memoryUsage().heapUsed }, shards };
  }

  /** A shard died: its members are gone; their sessions close with the last counters heard. */
  shardDown(shard: number): void {
    this.limits.shardDown(shard);
    for (const { id, m } of this.dir.members((_, x) => x.shard === shard)) this.removeMember(id, m.sessionId);
  }

  broadcastRoute(id: string): void {
    this.routes.tell(id);
  }

  broadcastNodes(urls: string[]): void {
    this.routes.nodes(urls);
  }

  private publicUrl(type: 'http' | 'tcp', id: string, port: number | null): string {
    const base = new URL(this.config.baseUrl);
    if (type === 'tcp') return `tcp://${base.hostname}:${port}`;
    return `${base.protocol}//${id}.${this.config.domain}${base.port ? `:${base.port}` : ''}`;
  }

  // ── admission ──

  private async admit(shard: number, m: Admit): Promise<TunnelAdmitted> {
    try {
      if (m.id === null) return await this.admitOnce(shard, m);
      return await this.idTurns.run(m.id, () => this.admitOnce(shard, m));
    } finally {
      // Spent either way; on success the entry now counts instead (set before this runs).
      if (m.claim !== null) this.limits.releasePort(m.claim);
    }
  }

  private async admitOnce(shard: number, m: Admit): Promise<TunnelAdmitted> {
    this.limits.countOpen(m.userId);
    if (m.id !== null) {
      const problem = tunnelIdProblem(m.id, this.config.domain);
      if (problem) throw new ApiError('bad-request', problem);
    }
    if (m.pool && m.tunnelType !== 'http') throw new ApiError('bad-request', 'a pool serves an http tunnel: TCP tunnels cannot be pooled');
    if (m.member !== null) return this.join(shard, m);
    const teamId = m.teamId === null ? null : await this.teamOf(m.teamId, m.userId);
    // Another key of this user about to take a live id over: its name goes into the old client's
    // message, read now (a race just leaves it unnamed).
    const holder = m.id === null ? undefined : this.dir.tunnels.get(m.id);
    const newKey = holder && holder.info.owner_id === m.userId && holder.members.some((x) => x.keyId !== m.keyId) ? await keyLabel(this.sql, m.keyId).catch(() => null) : null;
    const claimProblem = m.id === null ? null : await this.reservations.problem(m.id, m.userId);
    let id = m.id;
    if (id === null) {
      do id = randomTunnelId(randomBytes);
      while (this.dir.live(id) || this.dir.holds.has(id) || this.reservations.has(id) || tunnelIdProblem(id, this.config.domain));
    }
    // Read before the member ends the hold: a reconnect or takeover (here or on another node)
    // keeps counting from the user's first connection.
    const usedSinceMs = this.dir.usedSince(id, m.userId) ?? Date.now();
    const held = this.dir.held(id);
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
    const reg = await this.dir.claim({ id, sessionId, url, teamId, client, mode: m.pool ? { pool: true } : { plain: true }, admit: m });
    if (!reg && addsClient(verdict)) {
      const max = this.config.maxTunnelsPerUser;
      let n = 0;
      for (const e of this.dir.tunnels.values()) n += new Set(e.members.filter((x) => x.userId === m.userId).map((x) => x.client)).size;
      if (n >= max) throw claimRefused(id, { ok: false, why: 'limit', held: n, max });
    }
    if (!joinsPool) {
      // Same user: a reconnect whose old connection is stale (or a second client). The new
      // registration wins; the old one is told so and must not come back. Its sessions close
      // when their shards report tunnel-down with the final counters.
      for (const x of this.dir.replace(id)?.members ?? []) {
        this.endMember(x, { type: 'tunnel-close', tunnelId: id, reason: takeoverReason(x.keyId === m.keyId, newKey), permanent: true, sessionId: x.sessionId, code: 'taken-over' });
      }
    }
    const fresh = (): Entry => ({
      info: { id: id!, owner_id: reg?.userId ?? m.userId, team_id: reg ? reg.teamId : teamId, remote_port: reg ? reg.port : m.remotePort, tunnel_type: m.tunnelType, url: reg?.url ?? url, local_target: m.local },
      access: reg ? reg.access : m.access,
      pool: reg?.pool ?? m.pool,
      registeredAtMs: Date.now(),
      usedSinceMs,
      members: [],
    });
    const { entry, laneKey } = this.addMember(id, fresh, shard, m, sessionId, client);
    // Every shard knows the route before the client hears Opened and prints its URL: a visitor
    // who uses it at once may land on any shard, and must not get 404 there.
    await this.routes.everywhere(id);
    return { id, sessionId, url: entry.info.url, teamId: entry.info.team_id, tookOver: held !== null && !joinsPool, access: entry.access, remotePort: entry.info.remote_port, ...(laneKey ? { laneKey } : {}), ...(this.dir.nodeId ? { memberKey: client } : {}) };
  }

  /** The team an Open names (its id, or the name of one of the user's teams), if the user is in it. */
  private async teamOf(team: string, userId: string): Promise<string> {
    const before = this.revocations;
    let teamId = team;
    if (!UUID_RE.test(team)) {
      // A team name (tunnels-only keys cannot list teams to find the id): only the user's own
      // teams are searched, so this reveals nothing about teams the user is not in.
      const named = await memberTeamIdByName(this.sql, userId, team);
      if (!named) throw new ApiError('not-found', `you are in no team named "${team}"`);
      teamId = named;
    } else if (!(await getMembership(this.sql, team, userId))) throw new ApiError('forbidden', `you are not a member of team ${team}`);
    // A removal or team deletion that closed tunnels while we read may have missed this one.
    if (this.revocations !== before) throw new ApiError('unavailable', `team ${teamId} changed while this tunnel was admitted; try again`);
    return teamId;
  }

  /** One more connection of a client already serving `m.id` (its connection to another node: Open.member). */
  private async join(shard: number, m: Admit): Promise<TunnelAdmitted> {
    const id = m.id;
    if (id === null || !this.dir.nodeId) throw new ApiError('not-found', 'no live tunnel of this client to join here');
    const sessionId = randomUUID();
    const reg = (await this.dir.claim({ id, sessionId, url: '', teamId: null, client: m.member!, mode: { join: m.member! }, admit: m }))!;
    const fresh = (): Entry => ({ info: { id, owner_id: reg.userId, team_id: reg.teamId, remote_port: reg.port, tunnel_type: m.tunnelType, url: reg.url, local_target: m.local }, access: reg.access, pool: reg.pool, registeredAtMs: Date.now(), usedSinceMs: this.dir.holds.heldSince(id, reg.userId) ?? Date.now(), members: [] });
    const { entry, laneKey } = this.addMember(id, fresh, shard, m, sessionId, m.member!);
    await this.routes.everywhere(id);
    return { id, sessionId, url: entry.info.url, teamId: entry.info.team_id, tookOver: false, access: entry.access, remotePort: entry.info.remote_port, memberKey: m.member!, ...(laneKey ? { laneKey } : {}) };
  }

  private addMember(id: string, fresh: () => Entry, shard: number, m: Admit, sessionId: string, client: string): { entry: Entry; laneKey: string | null } {
    // TCP visitors arrive at the owner's own listener: lanes would carry nothing.
    const laneKey = m.tunnelType === 'http' && this.config.workers > 1 ? randomBytes(18).toString('base64url') : null;
    const entry = this.dir.addMember(id, fresh, { sessionId, shard, keyId: m.keyId, userId: m.userId, laneKey, client, registeredAtMs: Date.now(), listens: m.remotePort !== null });
    this.stats.open({ id: sessionId, userId: m.userId, tunnelId: id, tunnelType: m.tunnelType, teamId: entry.info.team_id, clientIp: m.clientIp, nodeId: this.dir.nodeId });
    return { entry, laneKey };
  }

  /**
   * A lane of a live http tunnel's member on shard `fromShard`. Another user's tunnel answers
   * exactly like a missing one; the key is compared in constant time. Nothing is recorded: the
   * lane lives while the route names its member's session (the shard checks it).
   */
  private lane(fromShard: number, id: string, userId: string, key: string): TunnelLaneAdmitted {
    const e = this.dir.tunnels.get(id);
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

  /** Member `sessionId` of `id` is over (or leaving: `closeSession` false, its tunnel-down closes
   *  the session): out of the route; the tunnel ends with its last member (its id then stays its
   *  owner's for --id-grace). In a cluster its row goes too. */
  private removeMember(id: string, sessionId: string, closeSession = true): void {
    if (closeSession) this.stats.close(sessionId);
    if (!this.dir.tunnels.get(id)?.members.some((x) => x.sessionId === sessionId)) return;
    this.dir.removeMember(id, sessionId);
    this.broadcastRoute(id);
  }

  /** Asks member `m`'s shard to close it; a shard that no longer holds it (or is gone) sends no tunnel-down: the session closes here. */
  endMember(m: Member, msg: Extract<TunnelMainToShard, { type: 'tunnel-close' }>): void {
    this.shards.ask(m.shard, msg, CLOSE_TIMEOUT_MS).then(
      (r) => void (!r.closed && this.stats.close(m.sessionId)),
      () => void this.stats.close(m.sessionId),
    );
  }

  /** Closes members of this node for good (permanent: the client must not return) and forgets them. */
  closeMembers(victims: { id: string; m: Member }[], reason: string, code?: RefusalCode): Promise<void> {
    return Promise.all(
      victims.map(async ({ id, m }) => {
        try {
          // The member goes when the shard reports tunnel-down (with the final counters).
          await this.shards.ask(m.shard, { type: 'tunnel-close', tunnelId: id, reason, permanent: true, sessionId: m.sessionId, code }, CLOSE_TIMEOUT_MS);
        } catch (err) {
          this.log.warn({ err, id }, 'closing tunnel failed');
        }
        this.removeMember(id, m.sessionId);
      }),
    ).then(() => undefined);
  }

  private async close(id: string, reason: string): Promise<Record<string, never>> {
    if (!this.dir.live(id)) throw new ApiError('not-found', `no live tunnel "${id}"`);
    // Every member the database lists elsewhere, also one that joined since this node heard.
    const marked = await this.dir.closeElsewhere(id, reason);
    await this.closeMembers(this.dir.members((e) => e.info.id === id), reason);
    if (marked.length > 0) await this.dir.awaitGone({ sessionIds: marked }, `a node holding tunnel "${id}" did not confirm the close`);
    return {};
  }

  /** Ends a user's (deactivated) or a team's (deleted) tunnels; in a cluster, answers once every
   *  node ended its own (each heard the change from the database: the cluster's events). */
  private async closeOwner(userId: string | null, teamId: string | null, reason: string): Promise<number> {
    this.revocations++;
    const victims = this.dir.members((e, m) => (userId !== null && m.userId === userId) || (teamId !== null && e.info.team_id === teamId));
    const remote = this.dir.countElsewhere((owner, user) => (userId !== null && user === userId) || (teamId !== null && owner.teamId === teamId));
    await this.closeMembers(victims, reason);
    await this.dir.awaitGone({ userIds: userId === null ? [] : [userId], teamIds: teamId === null ? [] : [teamId] });
    return victims.length + remote;
  }

  /** A member removed from a team loses its tunnels bound to it; `here`: only this node's (another node's API asked). */
  async closeMember(teamId: string, userId: string, reason: string, here = false): Promise<number> {
    this.revocations++;
    const victims = this.dir.members((e, m) => m.userId === userId && e.info.team_id === teamId);
    const remote = here ? 0 : this.dir.countElsewhere((owner, user) => owner.teamId === teamId && user === userId);
    await this.closeMembers(victims, reason, 'forbidden');
    if (!here) await this.dir.awaitGone({ member: { teamId, userId } });
    return victims.length + remote;
  }

  /** Live tunnels visible to `p`, over the whole cluster. */
  private async list(p: Principal, teamIds: string[]): Promise<TunnelInfo[]> {
    const teams = new Set(teamIds);
    const ids = this.dir.ids().filter((id) => {
      const h = this.dir.held(id);
      return h !== null && (p.role === 'admin' || h.userId === p.userId || (h.teamId !== null && teams.has(h.teamId)));
    });
    const out = await this.dir.views(ids, (s) => this.stats.totals(s));
    return out.sort((a, b) => a.id.localeCompare(b.id));
  }
}
