import type { Logger } from '../log.js';
import type { Opened, RefusalCode } from '../protocol/frames.js';
import type { TunnelLaneAdmitted, TunnelShardToMain } from '../protocol/tunnel-messages.js';
import { ApiError } from '../errors.js';
import { AccessGate } from './access.js';
import type { ControlConnection } from './control.js';
import type { RouteTable } from './shard-routes.js';
import { TunnelActor } from './tunnel.js';

// ShardLanes: a client's lane on this shard (ARCHITECTURE.md 2.1.1), a TunnelActor here for an
// http tunnel owned by another shard, so this shard's visitors are served without the mesh.
//
//   lane's Open{id, lane: key} ─▶ open(): tunnel-lane (ask) ─▶ registry checks user, key, shard
//     ─▶ the route must still name that session, no lane of it here yet ─▶ TunnelActor{lane}
//   tunnel-route no longer naming its session ─▶ closeStale(id): the lane closes (Closed unavailable)

export interface LaneDeps {
  log: Logger;
  routes: RouteTable<TunnelActor>;
  /** Asks the registry to admit the lane (counted as a pending admission by the caller). */
  admit(msg: Extract<TunnelShardToMain, { type: 'tunnel-lane' }>): Promise<TunnelLaneAdmitted>;
  markDirty(t: TunnelActor): void;
  /** Closes this shard's tunnel `id` (of `sessionId` only) and reports it; false when not here. */
  closeLocal(id: string, reason: string, permanent: boolean, sessionId?: string, code?: RefusalCode): boolean;
  /** Closes `t` and reports it. */
  closeActor(t: TunnelActor, reason: string, permanent: boolean, code?: RefusalCode): void;
}

/** Longest a stale lane's open streams may take to finish. */
const LANE_LEAVE_MS = 30_000;

export class ShardLanes {
  constructor(private readonly deps: LaneDeps) {}

  /** A lane of tunnel `id` on this connection: serves the visitors that reach this shard. */
  async open(conn: ControlConnection, id: string, key: string): Promise<Opened> {
    const { routes } = this.deps;
    const admitted = await this.deps.admit({ type: 'tunnel-lane', id, userId: conn.principal.userId, key });
    if (conn.isClosed) throw new ApiError('unavailable', 'the control connection closed while the lane was being admitted');
    // The route is the registration's truth here: a lane admitted just before its tunnel ended
    // or was taken over must not serve the id (a later route for it would find nothing to close).
    if (!routes.hasSession(id, admitted.sessionId)) throw new ApiError('unavailable', `tunnel "${id}" ended or moved while its lane was admitted`);
    if (routes.localOf(id, admitted.sessionId)) throw new ApiError('conflict', `tunnel "${id}" already has a lane on this shard`);
    const actor = new TunnelActor(
      { id, type: 'http', userId: conn.principal.userId, teamId: admitted.teamId, sessionId: admitted.sessionId, url: admitted.url, remotePort: null, lane: true },
      conn,
      this.deps.markDirty,
    );
    routes.add(actor, AccessGate.of(admitted.access));
    conn.adopt(actor);
    this.deps.log.debug({ id, user: conn.principal.userId }, 'tunnel lane opened');
    return { id, url: admitted.url, remotePort: null };
  }

  /** The route of `id` changed or went: a lane of another session closes (the client re-joins). */
  closeStale(id: string): void {
    for (const t of this.deps.routes.staleLanes(id)) {
      const close = (): void => this.deps.closeActor(t, 'the tunnel ended or moved', false, 'unavailable');
      if (t.streams.size === 0) {
        close();
        continue;
      }
      // Its member left gracefully (or moved): the lane's streams in flight finish, no new one comes.
      this.deps.routes.retire(t);
      const timer = setTimeout(close, LANE_LEAVE_MS);
      timer.unref();
      t.onIdle = () => {
        clearTimeout(timer);
        close();
      };
    }
  }
}
