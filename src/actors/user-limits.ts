import { claimRefused } from './tunnel-directory.js';
import type { ControlAdmitted } from '../protocol/tunnel-messages.js';

// The per-user bounds the registry keeps on main (so over every connection and shard of this
// node): --max-registrations-per-minute, --max-connections-per-user and the TCP port claims of
// --max-tcp-ports-per-user (counted before the bind, so concurrent Opens cannot overshoot).
// --max-tunnels-per-user is the directory's. In a cluster the claim (db/cluster.ts) counts the
// registrations a minute, the TCP ports and the tunnels again over every node; these bounds are
// this node's share, checked before anything is bound or written.

const RATE_WINDOW_MS = 60_000;

interface PortClaim {
  userId: string;
  shard: number;
}

export interface UserLimitsConfig {
  maxRegistrationsPerMinute: number;
  maxConnectionsPerUser: number;
  maxTcpPortsPerUser: number;
}

export class UserLimits {
  /** Per user, when their recent Opens were admitted or refused. */
  private readonly opens = new Map<string, number[]>();
  /** Control connections per shard and user (a dead shard's go with it). */
  private readonly controls = new Map<number, Map<string, number>>();
  private readonly claims = new Map<number, PortClaim>();
  private nextClaim = 0;

  constructor(private readonly config: UserLimitsConfig) {}

  /** Counts this Open, or refuses it (transient: the client backs off). */
  countOpen(userId: string): void {
    const now = Date.now();
    const recent = (this.opens.get(userId) ?? []).filter((t) => t > now - RATE_WINDOW_MS);
    const max = this.config.maxRegistrationsPerMinute;
    if (recent.length >= max) {
      this.opens.set(userId, recent);
      throw claimRefused('', { ok: false, why: 'rate', max, retryAfterS: Math.ceil((recent[0]! + RATE_WINDOW_MS - now) / 1000) });
    }
    recent.push(now);
    this.opens.set(userId, recent);
  }

  controlConnect(shard: number, userId: string): ControlAdmitted {
    const limit = this.config.maxConnectionsPerUser;
    let held = 0;
    for (const users of this.controls.values()) held += users.get(userId) ?? 0;
    if (held >= limit) return { ok: false, limit };
    const users = this.controls.get(shard) ?? new Map<string, number>();
    this.controls.set(shard, users);
    users.set(userId, (users.get(userId) ?? 0) + 1);
    return { ok: true, limit };
  }

  controlDisconnect(shard: number, userId: string): void {
    const users = this.controls.get(shard);
    const n = (users?.get(userId) ?? 0) - 1;
    if (n > 0) users!.set(userId, n);
    else users?.delete(userId);
  }

  /** One of the user's TCP ports, held until the admission spends it or the shard returns it. `live`: the user's TCP tunnels other than the Open's id. */
  claimPort(shard: number, userId: string, live: number): number {
    const max = this.config.maxTcpPortsPerUser;
    let held = live;
    for (const c of this.claims.values()) if (c.userId === userId) held++;
    if (held >= max) throw claimRefused('', { ok: false, why: 'tcp-ports', held, max });
    const claim = ++this.nextClaim;
    this.claims.set(claim, { userId, shard });
    return claim;
  }

  releasePort(claim: number): void {
    this.claims.delete(claim);
  }

  /** A shard died: its connections and claims go with it. */
  shardDown(shard: number): void {
    this.controls.delete(shard);
    for (const [claim, c] of this.claims) if (c.shard === shard) this.claims.delete(claim);
  }
}
