import type { Sql } from './sql.js';
import type { AccessWire } from '../protocol/access.js';
import { addsClient, decideClaim, type ClaimRefusal } from '../protocol/admission.js';

// The cluster's shared state (migration 008): node leases and the live-tunnel registry.
// Uniqueness of tunnel ids and TCP ports across nodes is the database's (primary key and
// unique constraint), never an in-memory map's.

/** A live tunnel (registration) as every node sees it, with its members on every node. */
export interface ClusterTunnelRow {
  id: string;
  user_id: string;
  team_id: string | null;
  tunnel_type: 'http' | 'tcp';
  pool: boolean;
  port: number | null;
  url: string;
  local_target: string | null;
  access: AccessWire | null;
  registered_at: Date;
  members: ClusterMemberRow[];
}

/** One control connection serving a registration. */
export interface ClusterMemberRow {
  session_id: string;
  node_id: string;
  node_url: string;
  user_id: string;
  key_id: string;
  client: string;
  /** set when the API asked for this member's end (requestClose): what its client is told */
  close_reason: string | null;
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
    if (old) {
      await tx`update sessions set disconnected_at = last_flush_at where node_id = ${old.id} and disconnected_at is null`;
      await tx`delete from cluster_tunnels t where not exists (select 1 from cluster_members m where m.tunnel_id = t.id)`;
    }
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
    // Registrations whose every member was on the dead nodes end with them.
    await tx`delete from cluster_tunnels t where not exists (select 1 from cluster_members m where m.tunnel_id = t.id)`;
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
  clientIp: string | null;
  /** `join`: one more connection of the client whose key this is; `pool`: one more client of a pool (or its first) */
  mode: { join: string } | { pool: true } | { plain: true };
  /** the new member's client key (for `join`, the same as mode.join) */
  client: string;
  /** --max-tunnels-per-user, counted over the cluster */
  maxPerUser: number;
  /** --max-tcp-ports-per-user and --max-registrations-per-minute, counted over the cluster */
  maxTcpPorts: number;
  maxRegistrationsPerMinute: number;
}

/** What a joining member serves under: the registration's, not its own Open's. */
export interface Registration {
  userId: string;
  teamId: string | null;
  access: AccessWire | null;
  port: number | null;
  url: string;
  pool: boolean;
}

/** What a claim found: admitted (`replaced`: the same user's registration it took over), or why not. */
export type ClaimResult = { ok: true; replaced: boolean; registration: Registration } | ClaimRefusal;

/**
 * Claims id (and port) cluster-wide for one member, as decideClaim (src/protocol/admission.ts)
 * says of the row read FOR UPDATE. The primary key settles a race between two first claims:
 * the loser's insert fails (23505).
 */
export async function claimTunnel(sql: Sql, c: TunnelClaim): Promise<ClaimResult> {
  return sql.begin(async (tx) => {
    // One user's claims take turns (their counts are limits); other users' do not wait.
    await tx`select pg_advisory_xact_lock(hashtext(${c.userId}))`;
    // Every claim writes a session row: the user's rows of the last minute are their registrations over the cluster.
    const [recent] = await tx<{ n: number; age: number | null }[]>`
      select count(*)::int as n, extract(epoch from now() - min(connected_at))::float8 as age
      from sessions where user_id = ${c.userId} and connected_at > now() - interval '1 minute'`;
    if (recent!.n >= c.maxRegistrationsPerMinute) return { ok: false, why: 'rate', max: c.maxRegistrationsPerMinute, retryAfterS: Math.max(1, Math.ceil(60 - (recent!.age ?? 0))) } as const;
    const [held] = await tx<{ user_id: string; team_id: string | null; pool: boolean; tunnel_type: 'http' | 'tcp'; access: AccessJson | null; port: number | null; url: string }[]>`
      select user_id, team_id, pool, tunnel_type, access, port, url from cluster_tunnels where id = ${c.id} for update`;
    const addMember = async (): Promise<void> => {
      await tx`insert into cluster_members (session_id, tunnel_id, node_id, user_id, key_id, client)
        values (${c.sessionId}, ${c.id}, ${c.nodeId}, ${c.userId}, ${c.keyId}, ${c.client})`;
      // The session row now, not at the first flush: a node that dies within a second still
      // leaves a session for the reaper to close.
      await tx`insert into sessions (id, user_id, tunnel_id, tunnel_type, team_id, client_ip, node_id)
        values (${c.sessionId}, ${c.userId}, ${c.id}, ${c.tunnelType}, ${held?.team_id ?? c.teamId}, ${c.clientIp}, ${c.nodeId})
        on conflict (id) do nothing`;
      await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'route', id: c.id })}::text::jsonb)`;
    };
    const access = held?.access ? accessFromJson(held.access) : null;
    const joined = (h: NonNullable<typeof held>) => ({ ok: true, replaced: false, registration: { userId: h.user_id, teamId: h.team_id, access, port: h.port, url: h.url, pool: h.pool } }) as const;
    if ('join' in c.mode) {
      const [client] = held ? await tx`select 1 from cluster_members where tunnel_id = ${c.id} and client = ${c.mode.join} and user_id = ${c.userId}` : [];
      if (!held || !client) return { ok: false, why: 'no-client' } as const;
      await addMember();
      return joined(held);
    }
    const verdict = decideClaim(held ? { userId: held.user_id, teamId: held.team_id, pool: held.pool, type: held.tunnel_type, access } : null, { userId: c.userId, teamId: c.teamId, pool: 'pool' in c.mode, type: c.tunnelType, access: c.access });
    if (!verdict.ok) return verdict;
    if (addsClient(verdict)) {
      // A new client of the user (a registration, or one more client of a pool), counted over the cluster.
      const [count] = await tx<{ n: number }[]>`select count(distinct (tunnel_id, client))::int as n from cluster_members where user_id = ${c.userId}`;
      if (count!.n >= c.maxPerUser) return { ok: false, why: 'limit', held: count!.n, max: c.maxPerUser } as const;
    }
    if (verdict.kind === 'join-pool') {
      await addMember();
      return joined(held!);
    }
    // Checked before anything is written: a refusal commits nothing.
    if (c.tunnelType === 'tcp') {
      const [tcp] = await tx<{ n: number }[]>`select count(*)::int as n from cluster_tunnels where user_id = ${c.userId} and tunnel_type = 'tcp' and id <> ${c.id}`;
      if (tcp!.n >= c.maxTcpPorts) return { ok: false, why: 'tcp-ports', held: tcp!.n, max: c.maxTcpPorts } as const;
    }
    if (c.port !== null) {
      const [taken] = await tx`select 1 from cluster_tunnels where port = ${c.port} and id <> ${c.id}`;
      if (taken) return { ok: false, why: 'port', port: c.port } as const;
    }
    if (held) await tx`delete from cluster_tunnels where id = ${c.id}`;
    await tx`
      insert into cluster_tunnels (id, user_id, team_id, tunnel_type, pool, port, url, local_target, access)
      values (${c.id}, ${c.userId}, ${c.teamId}, ${c.tunnelType}, ${'pool' in c.mode}, ${c.port}, ${c.url}, ${c.local}, ${c.access === null ? null : JSON.stringify(accessToJson(c.access))}::text::jsonb)`;
    await addMember();
    return { ok: true, replaced: held !== undefined, registration: { userId: c.userId, teamId: c.teamId, access: c.access, port: c.port, url: c.url, pool: 'pool' in c.mode } } as const;
  });
}

/** A member ended on its node: its row goes, and the registration with its last member. */
export async function releaseMember(sql: Sql, id: string, sessionId: string): Promise<void> {
  await sql.begin(async (tx) => {
    const gone = await tx`delete from cluster_members where session_id = ${sessionId} returning tunnel_id`;
    if (gone.length === 0) return;
    await tx`delete from cluster_tunnels t where t.id = ${id} and not exists (select 1 from cluster_members m where m.tunnel_id = t.id)`;
    await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'route', id })}::text::jsonb)`;
  });
}

/**
 * Asks the other nodes to end every member of `id` they hold, for good: the reason goes on
 * their rows and the `close` notification only tells them to look (src/cluster/node.ts).
 * Answers the sessions marked (the caller waits for them to go).
 */
export async function requestClose(sql: Sql, id: string, nodeId: string, reason: string): Promise<string[]> {
  return sql.begin(async (tx) => {
    const rows = await tx<{ session_id: string }[]>`
      update cluster_members set close_reason = ${reason} where tunnel_id = ${id} and node_id <> ${nodeId} returning session_id`;
    if (rows.length > 0) await tx`select burrow_cluster_notify(${JSON.stringify({ t: 'close', id })}::text::jsonb)`;
    return rows.map((r) => r.session_id);
  });
}

/** This node's members of these ids whose close was asked (requestClose), with the reason written then, by id. */
export async function closingMembers(sql: Sql, ids: readonly string[], nodeId: string): Promise<Map<string, { sessionId: string; reason: string }[]>> {
  const rows = await sql<{ tunnel_id: string; session_id: string; close_reason: string }[]>`
    select tunnel_id, session_id, close_reason from cluster_members
    where tunnel_id = any(${ids as string[]}) and node_id = ${nodeId} and close_reason is not null`;
  const by = new Map<string, { sessionId: string; reason: string }[]>();
  for (const r of rows) by.set(r.tunnel_id, [...(by.get(r.tunnel_id) ?? []), { sessionId: r.session_id, reason: r.close_reason }]);
  return by;
}

interface MemberJoinRow extends ClusterMemberRow {
  tunnel_id: string;
}

async function withMembers(sql: Sql, regs: StoredRow[], ids: string[] | null): Promise<ClusterTunnelRow[]> {
  const members = ids === null
    ? await sql<MemberJoinRow[]>`select m.*, n.url as node_url from cluster_members m join cluster_nodes n on n.id = m.node_id order by m.registered_at, m.session_id`
    : await sql<MemberJoinRow[]>`select m.*, n.url as node_url from cluster_members m join cluster_nodes n on n.id = m.node_id where m.tunnel_id = any(${ids}) order by m.registered_at, m.session_id`;
  const by = new Map<string, ClusterMemberRow[]>();
  for (const m of members) {
    const list = by.get(m.tunnel_id) ?? [];
    list.push({ session_id: m.session_id, node_id: m.node_id, node_url: m.node_url, user_id: m.user_id, key_id: m.key_id, client: m.client, close_reason: m.close_reason ?? null });
    by.set(m.tunnel_id, list);
  }
  return regs.map((r) => ({ ...fromStored(r), members: by.get(r.id) ?? [] })).filter((r) => r.members.length > 0);
}

/** One live tunnel with its members, or undefined. */
export async function clusterTunnel(sql: Sql, id: string): Promise<ClusterTunnelRow | undefined> {
  const regs = await sql<StoredRow[]>`select * from cluster_tunnels where id = ${id}`;
  return (await withMembers(sql, regs, [id]))[0];
}

/** Every live tunnel of the cluster (reconcile). */
export async function clusterTunnels(sql: Sql): Promise<ClusterTunnelRow[]> {
  const regs = await sql<StoredRow[]>`select * from cluster_tunnels order by id`;
  return withMembers(sql, regs, null);
}

/** What a revocation ends, on every node: members of these keys, these users, in these teams, or one user's in one team. */
export interface Affected {
  keyIds?: readonly string[];
  userIds?: readonly string[];
  teamIds?: readonly string[];
  member?: { teamId: string; userId: string };
  sessionIds?: readonly string[];
}

/** How many members, on any node, a revocation still has to end. */
export async function countAffected(sql: Sql, a: Affected): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from cluster_members m join cluster_tunnels t on t.id = m.tunnel_id
    where m.key_id = any(${(a.keyIds ?? []) as string[]}::uuid[]) or m.user_id = any(${(a.userIds ?? []) as string[]}::uuid[])
       or t.team_id = any(${(a.teamIds ?? []) as string[]}::uuid[]) or m.session_id = any(${(a.sessionIds ?? []) as string[]}::uuid[])
       or (t.team_id = ${a.member?.teamId ?? null}::uuid and m.user_id = ${a.member?.userId ?? null}::uuid)`;
  return row?.n ?? 0;
}

/** Session counters of tunnels on other nodes, as last flushed (the /tunnels listing). */
export async function sessionTotals(sql: Sql, sessionIds: readonly string[]): Promise<Map<string, { bytes_in: number; bytes_out: number; requests: number }>> {
  if (sessionIds.length === 0) return new Map();
  const rows = await sql<{ id: string; bytes_in: string; bytes_out: string; requests: string }[]>`
    select id, bytes_in, bytes_out, requests from sessions where id = any(${sessionIds as string[]}::uuid[])`;
  return new Map(rows.map((r) => [r.id, { bytes_in: Number(r.bytes_in), bytes_out: Number(r.bytes_out), requests: Number(r.requests) }]));
}

/** AccessWire in jsonb: its HMAC key and digests as base64. */
interface AccessJson {
  key: string | null;
  digests: string[];
  allowIp: string[];
  denyIp: string[];
  expiresAt: number | null;
  /** absent in rows written before pools compared credentials */
  credentialsTag?: string | null;
}
type StoredRow = Omit<ClusterTunnelRow, 'access' | 'members'> & { access: AccessJson | null };

function accessToJson(a: AccessWire): AccessJson {
  const b64 = (u: Uint8Array): string => Buffer.from(u).toString('base64');
  return { key: a.key === null ? null : b64(a.key), digests: a.digests.map(b64), allowIp: a.allowIp, denyIp: a.denyIp, expiresAt: a.expiresAt, credentialsTag: a.credentialsTag ? b64(a.credentialsTag) : null };
}

function accessFromJson(a: AccessJson): AccessWire {
  const bytes = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'base64'));
  return { key: a.key === null ? null : bytes(a.key), digests: a.digests.map(bytes), allowIp: a.allowIp, denyIp: a.denyIp, expiresAt: a.expiresAt, credentialsTag: a.credentialsTag ? bytes(a.credentialsTag) : null };
}

function fromStored(r: StoredRow): Omit<ClusterTunnelRow, 'members'> {
  return { ...r, access: r.access === null ? null : accessFromJson(r.access) };
}
