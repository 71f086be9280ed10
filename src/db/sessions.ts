import type { Sql } from './sql.js';
import { iso, isoRequired } from './sql.js';
import type { Session } from '../api/schemas.js';

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
