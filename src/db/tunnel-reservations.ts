import type { Sql } from './sql.js';
import { isoRequired } from './sql.js';
import type { Reservation } from '../protocol/api-views.js';

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

/**
 * The --id-grace holds to restore at start-up: per id, the user of its latest session that ended
 * within `graceSecs`, when it ended, and since when that user used the id (their earliest session
 * of it that ended within the grace). Only ids used at least `minLifetimeSecs`, and per user the
 * `maxPerUser` that ended last, as IdHolds keeps them; oldest end first.
 */
export async function recentHolders(sql: Sql, graceSecs: number, minLifetimeSecs: number, maxPerUser: number): Promise<{ tunnel_id: string; user_id: string; connected_at: Date; disconnected_at: Date }[]> {
  return sql<{ tunnel_id: string; user_id: string; connected_at: Date; disconnected_at: Date }[]>`
    with latest as (
      select distinct on (tunnel_id) tunnel_id, user_id, disconnected_at from sessions
      where disconnected_at is not null and disconnected_at > now() - make_interval(secs => ${graceSecs})
      order by tunnel_id, disconnected_at desc
    ), used as (
      select l.tunnel_id, l.user_id, l.disconnected_at, min(s.connected_at) as connected_at
      from latest l join sessions s on s.tunnel_id = l.tunnel_id and s.user_id = l.user_id
        and s.disconnected_at > now() - make_interval(secs => ${graceSecs})
      group by l.tunnel_id, l.user_id, l.disconnected_at
    ), ranked as (
      select used.*, row_number() over (partition by user_id order by disconnected_at desc) as n from used
      where disconnected_at - connected_at >= make_interval(secs => ${minLifetimeSecs})
    )
    select tunnel_id, user_id, connected_at, disconnected_at from ranked where n <= ${maxPerUser}
    order by disconnected_at`;
}
