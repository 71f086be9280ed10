import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import { ApiError } from '../errors.js';
import type { TunnelInfo } from '../protocol/messages.js';
import type { RouteMember } from '../protocol/tunnel-messages.js';
import { accessView } from '../protocol/access.js';
import type { HeldRegistration } from '../protocol/admission.js';
import { claimTunnel, clusterTunnel, clusterTunnels, liveNodes, releaseMember, sessionTotals, type ClusterTunnelRow } from '../db/cluster.js';
import { LocalDirectory, sumStats, uptime } from '../actors/local-directory.js';
import type { IdHolds } from '../actors/id-holds.js';
import { claimRefused, type Affected, type Claim, type DirectoryHost, type Entry, type Registration } from '../actors/tunnel-directory.js';
import { AWAIT_GONE_MS, type ClusterNode } from './node.js';

// ClusterDirectory (--node-url): this node's members in memory, as on a node alone; the
// cluster's registrations in the database (cluster_tunnels, cluster_members: src/db/cluster.ts).
//
//   claim    claimTunnel: decideClaim on the id's row FOR UPDATE, the limit over the cluster,
//            the member's row and its session row, and a `route` notification, in one transaction
//   release  releaseMember: the member's row (the registration's with its last one)
//   refresh  a `route` notification: the id's rows read again ─▶ applyRow: the other nodes'
//            members into `remote`; our own members the rows no longer name end (taken over
//            elsewhere: permanent; gone: transient) ─▶ the route to every shard of this node
//   reconcile every few seconds, after the LISTEN connection came back and when a node died:
//            every row at once; each id that differs follows the database
//   fence    the lease is lost: every member here ends (a revocation may be unheard)
//
// A read of the database older than a change made here is stale for that id: `touched` marks
// each change, and an id with a claim in flight (`claiming`: its row may be written before its
// member is here) waits for the claim's own notification.

/** Route reads of distinct ids in flight at once (cluster route hints); past it, a reconcile. */
const MAX_ROUTE_READS = 64;

export class ClusterDirectory extends LocalDirectory {
  /** live tunnels with a member on another node, as the database lists them */
  private readonly remote = new Map<string, ClusterTunnelRow>();
  /** per id, the `touches` count when something last changed it here */
  private readonly touched = new Map<string, number>();
  private touches = 0;
  /** ids with a claim in flight here */
  private readonly claiming = new Map<string, number>();
  /** ids whose notification came during a claim here: read again once it is done */
  private readonly refreshAfterClaim = new Set<string>();
  /** ids whose route is being read; true: read it once more when done */
  private readonly routeReads = new Map<string, boolean>();

  constructor(
    holds: IdHolds,
    private readonly node: ClusterNode,
    private readonly sql: Sql,
    private readonly log: Logger,
    private readonly host: DirectoryHost,
    private readonly limits: { maxTunnelsPerUser: number; maxTcpPortsPerUser: number; maxRegistrationsPerMinute: number },
  ) {
    super(holds);
  }

  override get nodeId(): string {
    return this.node.id;
  }

  override nodeUrls(): string[] {
    return this.liveNodes;
  }

  /** The live nodes' URLs (this one's too), read when a node joins or dies and at each reconcile. */
  private liveNodes: string[] = [];

  /** Reads the live nodes again; the shards hear when they changed. One read at a time (a flood
   *  of node hints anyone who may connect can send costs one more read, not one each). */
  readonly readNodes = oneAtATime(async () => {
    try {
      const urls = (await liveNodes(this.sql)).map((r) => r.url);
      if (urls.join(' ') === this.liveNodes.join(' ')) return;
      this.liveNodes = urls;
      this.host.broadcastNodes(urls);
    } catch (err) {
      this.log.debug({ err }, 'cluster: live nodes not read; the next reconcile tries again');
    }
  });

  /** The members of `id` on other nodes, as this node last read them. */
  private elsewhere(id: string): ClusterTunnelRow['members'] {
    return this.remote.get(id)?.members.filter((x) => x.node_id !== this.node.id) ?? [];
  }

  override ids(): string[] {
    return [...new Set([...super.ids(), ...this.remote.keys()])];
  }

  override held(id: string): HeldRegistration | null {
    const r = this.remote.get(id);
    return super.held(id) ?? (r ? { userId: r.user_id, teamId: r.team_id, pool: r.pool, type: r.tunnel_type, access: r.access } : null);
  }

  override live(id: string): boolean {
    return super.live(id) || this.remote.has(id);
  }

  override usedSince(id: string, userId: string): number | null {
    const r = this.remote.get(id);
    const own = this.entries.get(id);
    return (own?.info.owner_id === userId ? own.usedSinceMs : null) ?? (r?.user_id === userId ? r.registered_at.getTime() : null) ?? this.holds.heldSince(id, userId);
  }


  /** Claims `id` in the cluster's registry for this member, or refuses it as the database decides. */
  override async claim(c: Claim): Promise<Registration> {
    if (!this.node.healthy) throw new ApiError('unavailable', 'this node lost the cluster database and admits no tunnel until it is back; try again (another node may serve you)');
    this.touch(c.id);
    this.claiming.set(c.id, (this.claiming.get(c.id) ?? 0) + 1);
    try {
      return await this.claimRow(c);
    } finally {
      const n = (this.claiming.get(c.id) ?? 1) - 1;
      if (n > 0) this.claiming.set(c.id, n);
      else this.claiming.delete(c.id);
      this.touch(c.id);
      // After the member is added (the caller's next synchronous step): what changed meanwhile.
      if (n <= 0 && this.refreshAfterClaim.delete(c.id)) queueMicrotask(() => void this.refresh(c.id));
    }
  }

  private async claimRow(c: Claim): Promise<Registration> {
    const m = c.admit;
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await claimTunnel(this.sql, { id: c.id, sessionId: c.sessionId, url: c.url, teamId: c.teamId, client: c.client, mode: c.mode, nodeId: this.node.id, userId: m.userId, keyId: m.keyId, tunnelType: m.tunnelType, port: m.remotePort, local: m.local, access: m.access, clientIp: m.clientIp, maxPerUser: this.limits.maxTunnelsPerUser, maxTcpPorts: this.limits.maxTcpPortsPerUser, maxRegistrationsPerMinute: this.limits.maxRegistrationsPerMinute });
        this.touch(c.id);
        if (r.ok) return r.registration;
        throw claimRefused(c.id, r);
      } catch (err) {
        // Two first claims of one id on two nodes: the primary key let one in; read again to answer as it decided.
        if ((err as { code?: string }).code === '23505' && attempt < 2) continue;
        throw err;
      }
    }
  }

  override removeMember(id: string, sessionId: string): void {
    if (!this.entries.get(id)?.members.some((m) => m.sessionId === sessionId)) return;
    super.removeMember(id, sessionId);
    this.touch(id);
    // Our member leaves the database's copy too, so the route does not name it meanwhile.
    const r = this.remote.get(id);
    if (r) r.members = r.members.filter((x) => x.session_id !== sessionId);
    releaseMember(this.sql, id, sessionId).catch((err: unknown) => this.log.warn({ err, id }, 'cluster: member row not released; the reconcile retries'));
  }

  override countElsewhere(filter: (owner: { userId: string; teamId: string | null }, memberUserId: string) => boolean): number {
    let n = 0;
    for (const [id, r] of this.remote) for (const x of this.elsewhere(id)) if (filter({ userId: r.user_id, teamId: r.team_id }, x.user_id)) n++;
    return n;
  }

  protected override routeElsewhere(id: string): { members: RouteMember[]; port: number | null; access: Entry['access'] } | null {
    const r = this.remote.get(id);
    if (!r) return null;
    return { members: this.elsewhere(id).map((m) => ({ session: m.session_id, client: m.client, node: m.node_url })), port: r.port, access: r.access };
  }

  /** Members here with live counters, the others' as last flushed (≤ 1 s old). */
  override async views(ids: string[], live: (sessionId: string) => TunnelInfo['stats']): Promise<TunnelInfo[]> {
    const sessions = ids.flatMap((id) => this.elsewhere(id).map((x) => x.session_id));
    const flushed = sessions.length > 0 ? await sessionTotals(this.sql, sessions) : new Map<string, TunnelInfo['stats']>();
    const out: TunnelInfo[] = [];
    for (const id of ids) {
      const e = this.entries.get(id);
      const r = this.remote.get(id);
      if (!e && !r) continue;
      const others = this.elsewhere(id);
      const stats = sumStats([...(e?.members ?? []).map((m) => live(m.sessionId)), ...others.map((x) => flushed.get(x.session_id))]);
      const info = e ? e.info : { id, owner_id: r!.user_id, team_id: r!.team_id, remote_port: r!.port, tunnel_type: r!.tunnel_type, url: r!.url, local_target: r!.local_target };
      out.push({ ...info, uptime_secs: uptime(e ? e.registeredAtMs : r!.registered_at.getTime()), stats, access: accessView(e ? e.access : r!.access), pool: e ? e.pool : r!.pool, connections: (e?.members.length ?? 0) + others.length });
    }
    return out;
  }

  override closeElsewhere(id: string, reason: string): Promise<string[]> {
    return this.node.requestClose(id, reason);
  }

  override async awaitGone(affected: Affected, failure?: string): Promise<boolean> {
    const gone = await this.node.awaitGone(affected);
    if (!gone && failure !== undefined) throw new ApiError('unavailable', `${failure}; it ends within ${Math.ceil(AWAIT_GONE_MS / 1000)} s`);
    return gone;
  }

  override reservationsChanged(): Promise<void> {
    return this.node.notify({ t: 'reservations' });
  }

  private touch(id: string): number {
    const mark = ++this.touches;
    this.touched.set(id, mark);
    return mark;
  }

  /**
   * Reads `id`'s route again (a `route` notification): one read at a time per id (a
   * notification meanwhile makes one more), and at most MAX_ROUTE_READS ids at once (past it,
   * one reconcile reads them all). Anyone who may connect to the database can send route hints.
   */
  async refresh(id: string): Promise<void> {
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

  private async readRoute(id: string): Promise<void> {
    const mark = this.touch(id);
    let row: ClusterTunnelRow | undefined;
    try {
      row = await clusterTunnel(this.sql, id);
    } catch (err) {
      this.log.debug({ err, id }, 'cluster: route not read; the reconcile catches up');
      return;
    }
    // A claim of this id in flight here: the member it adds is not here yet; its own notification reads again.
    if (this.touched.get(id) === mark && !this.claiming.has(id)) this.applyRow(id, row);
    else if (this.claiming.has(id)) this.refreshAfterClaim.add(id);
  }

  /** The database says `row` is `id` now (undefined: nobody serves it): this node follows. */
  private applyRow(id: string, row: ClusterTunnelRow | undefined): void {
    const me = this.node.id;
    const e = this.entries.get(id);
    if (e) {
      const listed = new Set(row?.members.filter((x) => x.node_id === me).map((x) => x.session_id) ?? []);
      for (const m of e.members.filter((x) => !listed.has(x.sessionId))) {
        // Taken over (the registration is another one now), or our rows are gone (this node was declared dead).
        const takenOver = row !== undefined;
        this.host.endMember(m, {
          type: 'tunnel-close',
          tunnelId: id,
          reason: takenOver ? 'taken over by another connection of the same user, on another node' : 'this node lost its place in the cluster; connect again',
          permanent: takenOver,
          sessionId: m.sessionId,
          code: takenOver ? 'taken-over' : 'unavailable',
        });
        e.members.splice(e.members.indexOf(m), 1);
      }
      if (e.members.length === 0) this.dropEntry(id, e);
    }
    const had = this.remote.get(id);
    if (row && row.members.some((x) => x.node_id !== me)) {
      this.remote.set(id, row);
      this.holds.delete(id);
    } else if (had) {
      this.remote.delete(id);
      if (!this.entries.has(id)) this.holds.ended(id, had.user_id, had.registered_at.getTime());
    }
    this.host.broadcastRoute(id);
  }

  /**
   * Compares this node's tunnels and routes with the database; each id that differs follows it.
   * One at a time: calls while one runs (the timer, a LISTEN reconnect, a flood of node hints)
   * make one more run after it, not one each.
   */
  readonly reconcile = oneAtATime(() => this.reconcileOnce());

  private async reconcileOnce(): Promise<void> {
    await this.readNodes();
    const start = this.touches;
    let rows: ClusterTunnelRow[];
    try {
      rows = await clusterTunnels(this.sql);
    } catch (err) {
      this.log.debug({ err }, 'cluster: reconcile could not read the registry');
      return;
    }
    const me = this.node.id;
    const stale = (id: string): boolean => (this.touched.get(id) ?? 0) > start || this.claiming.has(id);
    const key = (sessions: string[]): string => sessions.sort().join(',');
    const listed = new Map(rows.map((r) => [r.id, r]));
    for (const r of rows) {
      if (stale(r.id)) continue;
      const e = this.entries.get(r.id);
      for (const x of r.members) {
        // Ours in the database, not here: a release that failed (the database was away).
        if (x.node_id === me && !e?.members.some((m) => m.sessionId === x.session_id)) releaseMember(this.sql, r.id, x.session_id).catch(() => undefined);
        // A close asked through another node whose notification was lost.
        if (x.node_id === me && x.close_reason !== null) this.closeAsked(r.id, [{ sessionId: x.session_id, reason: x.close_reason }]);
      }
      const known = [...(e?.members.map((m) => m.sessionId) ?? []), ...this.elsewhere(r.id).map((x) => x.session_id)];
      if (key(known) !== key(r.members.map((x) => x.session_id))) this.applyRow(r.id, r);
    }
    for (const id of [...this.remote.keys(), ...this.entries.keys()]) if (!listed.has(id) && !stale(id)) this.applyRow(id, undefined);
    for (const [id, mark] of this.touched) if (mark <= start) this.touched.delete(id);
  }

  /** The API of another node asked these members of `id` to end (the reason written on their rows). */
  closeAsked(id: string, members: { sessionId: string; reason: string }[]): void {
    for (const { sessionId, reason } of members) {
      const victims = this.members((e, m) => m.sessionId === sessionId && e.info.id === id);
      if (victims.length > 0) this.host.closeMembers(victims, reason);
    }
  }

  /** The lease is lost: no tunnel here may outlive it (a revocation may be unheard). Clients reconnect. */
  fence(): void {
    for (const [id, e] of [...this.entries]) {
      for (const m of e.members) {
        this.host.endMember(m, { type: 'tunnel-close', tunnelId: id, reason: 'this node lost the cluster database; connect again', permanent: false, sessionId: m.sessionId, code: 'unavailable' });
      }
      this.entries.delete(id);
      this.host.broadcastRoute(id);
    }
  }
}

/** `work` one run at a time: calls while one runs make one more run after it, not one each. */
function oneAtATime(work: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null;
  let again = false;
  return () => {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        await work();
      } while (again);
    })().finally(() => {
      running = null;
    });
    return running;
  };
}
