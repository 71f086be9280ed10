import type { TunnelInfo } from '../protocol/messages.js';
import type { HeldRegistration } from '../protocol/admission.js';
import type { RouteMember, TunnelMainToShard } from '../protocol/tunnel-messages.js';
import { accessView } from '../protocol/access.js';
import { IdHolds } from './id-holds.js';
import type { Affected, Claim, Entry, Member, Registration, TunnelDirectory } from './tunnel-directory.js';

// LocalDirectory: a node alone (no --node-url). Its live tunnels are a map in memory, and
// nothing else holds an id: a claim that passed the registry's rules is admitted as asked.
// ClusterDirectory (src/cluster/directory.ts) extends it with the other nodes' registrations.
//
// When an entry's last member ends, its id stays its user's for --id-grace (IdHolds).

export class LocalDirectory implements TunnelDirectory {
  protected readonly entries = new Map<string, Entry>();
  readonly holds: IdHolds;

  constructor(holds: IdHolds) {
    this.holds = holds;
  }

  get nodeId(): string | null {
    return null;
  }

  nodeUrls(): string[] | null {
    return null;
  }

  get tunnels(): ReadonlyMap<string, Entry> {
    return this.entries;
  }

  ids(): string[] {
    return [...this.entries.keys()];
  }

  held(id: string): HeldRegistration | null {
    const e = this.entries.get(id);
    return e ? { userId: e.info.owner_id, teamId: e.info.team_id, pool: e.pool, type: e.info.tunnel_type, access: e.access } : null;
  }

  live(id: string): boolean {
    return this.entries.has(id);
  }

  usedSince(id: string, userId: string): number | null {
    const e = this.entries.get(id);
    return (e?.info.owner_id === userId ? e.usedSinceMs : null) ?? this.holds.heldSince(id, userId);
  }

  claim(_c: Claim): Promise<Registration | null> {
    return Promise.resolve(null);
  }

  addMember(id: string, entry: () => Entry, m: Member): Entry {
    let e = this.entries.get(id);
    if (!e) {
      e = entry();
      this.entries.set(id, e);
    }
    e.members.push(m);
    this.holds.delete(id);
    return e;
  }

  /** Replaces `id`'s entry by a new registration (a takeover): the old members are the caller's to end. */
  replace(id: string): Entry | undefined {
    const e = this.entries.get(id);
    this.entries.delete(id);
    return e;
  }

  removeMember(id: string, sessionId: string): void {
    const e = this.entries.get(id);
    const i = e ? e.members.findIndex((x) => x.sessionId === sessionId) : -1;
    if (!e || i < 0) return;
    e.members.splice(i, 1);
    if (e.members.length === 0) this.dropEntry(id, e);
  }

  /** `id` has no member here any more: its id is held for its user a while. */
  protected dropEntry(id: string, e: Entry): void {
    this.entries.delete(id);
    this.holds.ended(id, e.info.owner_id, e.usedSinceMs);
  }

  members(filter: (e: Entry, m: Member) => boolean): { id: string; m: Member }[] {
    const out: { id: string; m: Member }[] = [];
    for (const [id, e] of this.entries) for (const m of e.members) if (filter(e, m)) out.push({ id, m });
    return out;
  }

  countElsewhere(_filter: (owner: { userId: string; teamId: string | null }, memberUserId: string) => boolean): number {
    return 0;
  }

  /** The route members of other nodes, by node URL (none on a node alone). */
  protected routeElsewhere(_id: string): { members: RouteMember[]; port: number | null; access: Entry['access'] } | null {
    return null;
  }

  routeOf(id: string): Extract<TunnelMainToShard, { type: 'tunnel-route' }> {
    const e = this.entries.get(id);
    const elsewhere = this.routeElsewhere(id);
    const members: RouteMember[] = (e?.members ?? []).map((m) => ({ session: m.sessionId, client: m.client, shard: m.shard }));
    members.push(...(elsewhere?.members ?? []));
    if (members.length === 0) return { type: 'tunnel-route', id, shard: null };
    const first = members[0]!;
    return {
      type: 'tunnel-route',
      id,
      shard: first.shard ?? null,
      ...(first.node ? { node: first.node } : {}),
      port: e ? e.info.remote_port : elsewhere!.port,
      portHeld: e?.members.some((m) => m.listens) ?? false,
      sessionId: first.session,
      access: e ? e.access : elsewhere!.access,
      members,
    };
  }

  async views(ids: string[], live: (sessionId: string) => TunnelInfo['stats']): Promise<TunnelInfo[]> {
    const out: TunnelInfo[] = [];
    for (const id of ids) {
      const e = this.entries.get(id);
      if (!e) continue;
      const stats = sumStats(e.members.map((m) => live(m.sessionId)));
      out.push({ ...e.info, uptime_secs: uptime(e.registeredAtMs), stats, access: accessView(e.access), pool: e.pool, connections: e.members.length });
    }
    return out;
  }

  closeElsewhere(_id: string, _reason: string): Promise<string[]> {
    return Promise.resolve([]);
  }

  awaitGone(_affected: Affected, _failure?: string): Promise<boolean> {
    return Promise.resolve(true);
  }

  reservationsChanged(): Promise<void> {
    return Promise.resolve();
  }
}

export function sumStats(all: (TunnelInfo['stats'] | undefined)[]): TunnelInfo['stats'] {
  const stats = { bytes_in: 0, bytes_out: 0, requests: 0 };
  for (const t of all) {
    stats.bytes_in += t?.bytes_in ?? 0;
    stats.bytes_out += t?.bytes_out ?? 0;
    stats.requests += t?.requests ?? 0;
  }
  return stats;
}

export function uptime(sinceMs: number): number {
  return Math.max(0, Math.floor((Date.now() - sinceMs) / 1000));
}
