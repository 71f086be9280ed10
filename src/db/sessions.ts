import type { Sql } from './sql.js';
import { iso, isoRequired } from './sql.js';
import type { Session } from '../protocol/api-views.js';

interface SessionRow {
  id: string;
  user_id: string;
  tunnel_id: string;
  client_ip: string | null;
  connected_at: Date;
  disconnected_at: Date | null;
  bytes_in: string | number;
  bytes_out: string | number;
  requests: string | number;
}

export function toSession(r: SessionRow): Session {
  return {
    id: r.id,
    user_id: r.user_id,
    tunnel_id: r.tunnel_id,
    client_ip: r.client_ip,
    connected_at: isoRequired(r.connected_at),
    disconnected_at: iso(r.disconnected_at),
    bytes_in: Number(r.bytes_in),
    bytes_out: Number(r.bytes_out),
    requests: Number(r.requests),
  };
}

/** Newest first; `userId` null means every user's sessions (admins with all=true). */
export async function listSessions(sql: Sql, userId: string | null, limit: number): Promise<Session[]> {
  const rows =
    userId === null
      ? await sql<SessionRow[]>`select * from sessions order by connected_at desc, id desc limit ${limit}`
      : await sql<SessionRow[]>`select * from sessions where user_id = ${userId} order by connected_at desc, id desc limit ${limit}`;
  return rows.map(toSession);
}

/** A session's absolute totals as the stats actor writes them (one row of the upsert). */
export interface SessionTotals {
  id: string;
  user_id: string;
  tunnel_id: string;
  tunnel_type: 'http' | 'tcp';
  team_id: string | null;
  client_ip: string | null;
  node_id: string | null;
  connected_at: Date;
  disconnected_at: Date | null;
  last_flush_at: Date;
  bytes_in: number;
  bytes_out: number;
  requests: number;
}

/** One multi-row upsert of absolute totals: repeating it after a lost reply counts nothing twice. */
export async function upsertSessionTotals(sql: Sql, rows: SessionTotals[]): Promise<void> {
  // The Sql type's empty column map hides the row-list helper's overload.
  const pg = sql as unknown as import('postgres').Sql;
  await pg`
    insert into sessions ${pg(rows, 'id', 'user_id', 'tunnel_id', 'tunnel_type', 'team_id', 'client_ip', 'node_id', 'connected_at', 'disconnected_at', 'last_flush_at', 'bytes_in', 'bytes_out', 'requests')}
    on conflict (id) do update set
      bytes_in = excluded.bytes_in,
      bytes_out = excluded.bytes_out,
      requests = excluded.requests,
      disconnected_at = excluded.disconnected_at,
      last_flush_at = excluded.last_flush_at`;
}

/**
 * Start-up: sessions left open by a crash are closed at their last flush. `cluster`: only those
 * no node holds (written before the database served a cluster): the live nodes' are theirs, a
 * dead node's the reaper's.
 */
export async function closeOrphanedSessions(sql: Sql, cluster = false): Promise<void> {
  if (cluster) await sql`update sessions set disconnected_at = last_flush_at where disconnected_at is null and node_id is null`;
  else await sql`update sessions set disconnected_at = last_flush_at where disconnected_at is null`;
}

/**
 * --session-retention: deletes up to `batch` closed sessions that ended more than `olderThanSecs`
 * ago; returns how many. Callers repeat while a full batch went, so no statement holds locks long.
 */
export async function pruneClosedSessions(sql: Sql, olderThanSecs: number, batch: number): Promise<number> {
  const r = await sql`delete from sessions where id in (
      select id from sessions where disconnected_at is not null and disconnected_at < now() - make_interval(secs => ${olderThanSecs}) limit ${batch})`;
  return r.count;
}
