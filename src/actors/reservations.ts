import type { Sql } from '../db/sql.js';
import { getMembership, getTeam } from '../db/teams.js';
import { getUser } from '../db/users.js';
import { deleteReservation, listReservations, putReservation, recentHolders } from '../db/tunnel-reservations.js';
import { tunnelIdProblem } from '../protocol/frames.js';
import { ApiError } from '../errors.js';
import type { IdHolds } from './id-holds.js';

// The ids no live tunnel holds that someone may still claim before anyone else: reserved by an
// admin (`tunnel_reservations`, kept here in memory, changed only through the registry, so
// admission never waits for the database), or held for their last user by --id-grace (IdHolds).

/** A reserved id as the database keeps it. */
type Reservation = Awaited<ReturnType<typeof listReservations>>[number];

export class IdReservations {
  private readonly byId = new Map<string, Reservation>();

  constructor(
    private readonly sql: Sql,
    private readonly holds: IdHolds,
    private readonly domain: string,
    /** tells the other nodes of a cluster to read them again */
    private readonly changed: () => Promise<void>,
  ) {}

  has(id: string): boolean {
    return this.byId.has(id);
  }

  list(): Reservation[] {
    return [...this.byId.values()].sort((a, b) => a.id.localeCompare(b.id));
  }

  /** The reserved ids as the database has them (start-up, and another node changed them); at
   *  start-up (`grace`) the holds too: a restart drops every connection at once, the holds survive it. */
  async load(grace?: { idGraceSecs: number; idGraceMinLifetimeSecs: number; idGraceMaxPerUser: number }): Promise<void> {
    if (grace && grace.idGraceSecs > 0) {
      for (const r of await recentHolders(this.sql, grace.idGraceSecs, grace.idGraceMinLifetimeSecs, grace.idGraceMaxPerUser)) {
        this.holds.restore(r.tunnel_id, { userId: r.user_id, sinceMs: r.connected_at.getTime(), untilMs: r.disconnected_at.getTime() + grace.idGraceSecs * 1000 });
      }
      this.holds.start();
    }
    const list = await listReservations(this.sql);
    this.byId.clear();
    for (const r of list) this.byId.set(r.id, r);
  }

  /** Who else holds `id` against user `userId`, as a refusal, or null when they may take it. */
  async problem(id: string, userId: string): Promise<string | null> {
    const r = this.byId.get(id);
    if (r) {
      if (r.user_id !== null) return r.user_id === userId ? null : `tunnel id "${id}" is reserved for another user`;
      if (r.team_id !== null && (await getMembership(this.sql, r.team_id, userId))) return null;
      return `tunnel id "${id}" is reserved for a team you are not in`;
    }
    const h = this.holds.get(id);
    if (!h || h.userId === userId) return null;
    return `tunnel id "${id}" is held for the user who last used it until ${new Date(h.untilMs).toISOString()} (id grace); an admin can release it`;
  }

  async reserve(id: string, userId: string | null, teamId: string | null): Promise<Reservation> {
    const problem = tunnelIdProblem(id, this.domain);
    if (problem) throw new ApiError('bad-request', problem);
    if ((userId === null) === (teamId === null)) throw new ApiError('bad-request', 'give exactly one of "user_id" and "team_id"');
    if (userId !== null && !(await getUser(this.sql, userId))) throw new ApiError('not-found', `no user ${userId}`);
    if (teamId !== null && !(await getTeam(this.sql, teamId))) throw new ApiError('not-found', `no team ${teamId}`);
    const r = await putReservation(this.sql, id, userId, teamId);
    this.byId.set(id, r);
    await this.changed();
    return r;
  }

  /** Ends a reservation or a grace hold of `id`. */
  async release(id: string): Promise<Record<string, never>> {
    const hadHold = this.holds.delete(id);
    const hadReservation = this.byId.delete(id);
    const deleted = await deleteReservation(this.sql, id);
    if (!hadHold && !hadReservation && !deleted) throw new ApiError('not-found', `tunnel id "${id}" is neither reserved nor held`);
    await this.changed();
    return {};
  }
}
