import type { Sql } from './sql.js';
import { isoRequired } from './sql.js';
import type { Reservation } from '../api/schemas.js';

// Tunnel ids an admin reserved for a user or a team. The RegistryActor keeps them in memory
// (loaded at start-up, changed only through it) so admission never waits for the database.

interface ReservationRow {
  id: string;
  user_id: string | null;
  team_id: string | null;
  created_at: Date;
}

export const toReservation = (r: ReservationRow): Reservation => ({ id: r.id, user_id: r.user_id, team_id: r.team_id, created_at: isoRequired(r.created_at) });

export async function listReservations(sql: Sql): Promise<Reservation[]> {
  return (await sql<ReservationRow[]>`select * from tunnel_reservations order by id`).map(toReservation);
}

/** Reserves `id` for one user or one team (replacing an earlier reservation of it). */
export async function putReservation(sql: Sql, id: string, userId: string | null, teamId: string | null): Promise<Reservation> {
  const [r] = await sql<ReservationRow[]>`
    insert into tunnel_reservations (id, user_id, team_id) values (${id}, ${userId}, ${teamId})
    on conflict (id) do update set user_id = excluded.user_id, team_id = excluded.team_id, created_at = now()
    returning *`;
  return toReservation(r!);
}

export async function deleteReservation(sql: Sql, id: string): Promise<boolean> {
  return (await sql`delete from tunnel_reservations where id = ${id}`).count > 0;
}

/** Per id, the user of its latest session that ended within `graceSecs`, and when it ended. */
export async function recentHolders(sql: Sql, graceSecs: number): Promise<{ tunnel_id: string; user_id: string; disconnected_at: Date }[]> {
  return sql<{ tunnel_id: string; user_id: string; disconnected_at: Date }[]>`
    select distinct on (tunnel_id) tunnel_id, user_id, disconnected_at from sessions
    where disconnected_at is not null and disconnected_at > now() - make_interval(secs => ${graceSecs})
    order by tunnel_id, disconnected_at desc`;
}
