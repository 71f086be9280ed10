import type { Sql } from './sql.js';
import type { AccessWire } from '../protocol/access.js';

// The cluster's shared state (migration 008): node leases and the live-tunnel registry.
// Uniqueness of tunnel ids and TCP ports across nodes is the database's (primary key and
// unique constraint), never an in-memory map's.

/** A live tunnel as every node sees it. */
export interface ClusterTunnelRow {
  id: string;
  node_id: string;
  node_url: string;
  session_id: string;
  user_id: string;
  key_id: string;
  team_id: string | null;
  tunnel_type: 'http' | 'tcp';
  port: number | null;
  url: string;
  local_target: string | null;
  access: AccessWire | null;
  registered_at: Date;
}

export interface NodeRow {
  id: string;
  url: string;
}

/**
 * Registers this node. A row with the same URL is a predecessor that died without its lease
 * running out (this process now holds its address): it goes, with its tunnels and sessions.
 */
export async function registerNode(sql: Sql, id: string, url: string, leaseMs: number): Promise<void> {
  await sql.begin(async (tx) => {
    const [old] = await tx<{ id: string }[]>`delete from cluster_nodes where url = ${url} returning id`;
    if (old) await tx`update sessions set disconnected_at = last_flush_at where node_id = ${old.id} and disconnected_at is null`;
    await tx`insert into cluster_nodes (id, url, lease_until) values (${id}, ${url}, now() + ${leaseMs} * interval '1 millisecond')`;
    await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'node', id, up: true })}::text::jsonb)`;
  });
}

/** Renews this node's lease; false when the row is gone (another node declared this one dead). */
export async function renewLease(sql: Sql, id: string, leaseMs: number): Promise<boolean> {
  const rows = await sql`update cluster_nodes set lease_until = now() + ${leaseMs} * interval '1 millisecond' where id = ${id} returning id`;
  return rows.length === 1;
}

/**
 * Deletes nodes whose lease ran out (their tunnels go by cascade) and closes their open
 * sessions at the last flushed counters; one transaction, so exactly one live node reaps
 * each dead one. Answers the ids reaped.
 */
export async function reapDeadNodes(sql: Sql): Promise<string[]> {
  return sql.begin(async (tx) => {
    const dead = await tx<{ id: string }[]>`delete from cluster_nodes where lease_until < now() returning id`;
    const ids = dead.map((d) => d.id);
    if (ids.length === 0) return [];
    await tx`update sessions set disconnected_at = last_flush_at where node_id = any(${ids}::uuid[]) and disconnected_at is null`;
    for (const id of ids) await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'node', id, up: false })}::text::jsonb)`;
    return ids;
  });
}

/** Leaves the cluster (shutdown): the row and, by cascade, any tunnel row left. */
export async function leaveCluster(sql: Sql, id: string): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`delete from cluster_nodes where id = ${id}`;
    await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'node', id, up: false })}::text::jsonb)`;
  });
}

export async function liveNodes(sql: Sql): Promise<NodeRow[]> {
  return sql<NodeRow[]>`select id, url from cluster_nodes where lease_until > now() order by started_at, id`;
}

export interface TunnelClaim {
  id: string;
  nodeId: string;
  sessionId: string;
  userId: string;
  keyId: string;
  teamId: string | null;
  tunnelType: 'http' | 'tcp';
  port: number | null;
  url: string;
  local: string | null;
  access: AccessWire | null;
  /** --max-tunnels-per-user, counted over the cluster */
  maxPerUser: number;
}

/** What a claim found: admitted (`replaced`: the same user's tunnel it took over, on any node), or the holder that refused it. */
export type ClaimResult = { ok: true; replaced: { nodeId: string; sessionId: string } | null } | { ok: false; holder: 'other-user' | 'port' | 'limit'; held?: number };

/**
 * Claims id (and port) cluster-wide. A live tunnel of another user keeps it; one of the same
 * user is replaced (the takeover rule), its node told through the notification.
 */
export async function claimTunnel(sql: Sql, c: TunnelClaim): Promise<ClaimResult> {
  return sql.begin(async (tx) => {
    // One user's claims take turns (their count is a limit); other users' do not wait.
    await tx`select pg_advisory_xact_lock(hashtext(${c.userId}))`;
    const [held] = await tx<{ user_id: string; node_id: string; session_id: string }[]>`
      select user_id, node_id, session_id from cluster_tunnels where id = ${c.id} for update`;
    if (held && held.user_id !== c.userId) return { ok: false, holder: 'other-user' } as const;
    if (!held) {
      const [count] = await tx<{ n: number }[]>`select count(*)::int as n from cluster_tunnels where user_id = ${c.userId}`;
      if (count!.n >= c.maxPerUser) return { ok: false, holder: 'limit', held: count!.n } as const;
    }
    if (held) await tx`delete from cluster_tunnels where id = ${c.id}`;
    if (c.port !== null) {
      const [taken] = await tx`select 1 from cluster_tunnels where port = ${c.port}`;
      if (taken) return { ok: false, holder: 'port' } as const;
    }
    // The primary key settles a race between two first claims: the loser's insert fails (23505).
    await tx`
      insert into cluster_tunnels (id, node_id, session_id, user_id, key_id, team_id, tunnel_type, port, url, local_target, access)
      values (${c.id}, ${c.nodeId}, ${c.sessionId}, ${c.userId}, ${c.keyId}, ${c.teamId}, ${c.tunnelType}, ${c.port}, ${c.url}, ${c.local}, ${c.access === null ? null : JSON.stringify(accessToJson(c.access))}::text::jsonb)`;
    await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'route', id: c.id, session: c.sessionId })}::text::jsonb)`;
    return { ok: true, replaced: held ? { nodeId: held.node_id, sessionId: held.session_id } : null } as const;
  });
}

/** A tunnel ended on its node: its row goes (only that registration's) and every node hears it. */
export async function releaseTunnel(sql: Sql, id: string, sessionId: string): Promise<void> {
  await sql.begin(async (tx) => {
    const gone = await tx`delete from cluster_tunnels where id = ${id} and session_id = ${sessionId} returning id`;
    if (gone.length > 0) await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'route', id, session: null })}::text::jsonb)`;
  });
}

/** One live tunnel with its node's address, or undefined. */
export async function clusterTunnel(sql: Sql, id: string): Promise<ClusterTunnelRow | undefined> {
  const rows = await sql<StoredRow[]>`
    select t.*, n.url as node_url from cluster_tunnels t join cluster_nodes n on n.id = t.node_id where t.id = ${id}`;
  return rows.map(fromStored)[0];
}

/** Every live tunnel of the cluster (reconcile, and the /tunnels listing). */
export async function clusterTunnels(sql: Sql): Promise<ClusterTunnelRow[]> {
  const rows = await sql<StoredRow[]>`
    select t.*, n.url as node_url from cluster_tunnels t join cluster_nodes n on n.id = t.node_id order by t.id`;
  return rows.map(fromStored);
}

/** AccessWire in jsonb: its HMAC key and digests as base64. */
interface AccessJson {
  key: string | null;
  digests: string[];
  allowIp: string[];
  denyIp: string[];
  expiresAt: number | null;
}
type StoredRow = Omit<ClusterTunnelRow, 'access'> & { access: AccessJson | null };

function accessToJson(a: AccessWire): AccessJson {
  const b64 = (u: Uint8Array): string => Buffer.from(u).toString('base64');
  return { key: a.key === null ? null : b64(a.key), digests: a.digests.map(b64), allowIp: a.allowIp, denyIp: a.denyIp, expiresAt: a.expiresAt };
}

function fromStored(r: StoredRow): ClusterTunnelRow {
  const a = r.access;
  const bytes = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'base64'));
  return { ...r, access: a === null ? null : { key: a.key === null ? null : bytes(a.key), digests: a.digests.map(bytes), allowIp: a.allowIp, denyIp: a.denyIp, expiresAt: a.expiresAt } };
}

/** What a revocation ends, on every node: tunnels of these keys, these users, these teams, or one user's in one team. */
export interface Affected {
  keyIds?: readonly string[];
  userIds?: readonly string[];
  teamIds?: readonly string[];
  member?: { teamId: string; userId: string };
  sessionIds?: readonly string[];
}

/** How many live tunnels of the cluster a revocation still has to end. */
export async function countAffected(sql: Sql, a: Affected): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from cluster_tunnels
    where key_id = any(${(a.keyIds ?? []) as string[]}::uuid[]) or user_id = any(${(a.userIds ?? []) as string[]}::uuid[])
       or team_id = any(${(a.teamIds ?? []) as string[]}::uuid[]) or session_id = any(${(a.sessionIds ?? []) as string[]}::uuid[])
       or (team_id = ${a.member?.teamId ?? null}::uuid and user_id = ${a.member?.userId ?? null}::uuid)`;
  return row?.n ?? 0;
}

/** Session counters of tunnels on other nodes, as last flushed (the /tunnels listing). */
export async function sessionTotals(sql: Sql, sessionIds: readonly string[]): Promise<Map<string, { bytes_in: number; bytes_out: number; requests: number }>> {
  if (sessionIds.length === 0) return new Map();
  const rows = await sql<{ id: string; bytes_in: string; bytes_out: string; requests: string }[]>`
    select id, bytes_in, bytes_out, requests from sessions where id = any(${sessionIds as string[]}::uuid[])`;
  return new Map(rows.map((r) => [r.id, { bytes_in: Number(r.bytes_in), bytes_out: Number(r.bytes_out), requests: Number(r.requests) }]));
}
