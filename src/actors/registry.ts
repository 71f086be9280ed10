import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import type { Config } from '../config.js';
import type { TunnelInfo, Principal } from '../protocol/messages.js';
import type { TunnelShardToMain, TunnelMainToShard } from '../protocol/tunnel-messages.js';
import { ApiError, assertNever } from '../errors.js';

// RegistryActor (main thread): the single owner of "which live tunnel has which id, on
// which shard". Runs on main's event loop, so each message is handled to completion
// before the next: admission is race-free without locks.

export interface ShardDirectory {
  tell(shard: number, msg: TunnelMainToShard): void;
  ask<R>(shard: number, msg: TunnelMainToShard, timeoutMs: number): Promise<R>;
}

interface Entry {
  info: Omit<TunnelInfo, 'uptime_secs'>;
  shard: number;
  registeredAtMs: number;
}

const CLOSE_TIMEOUT_MS = 5_000;

export class RegistryActor {
  private readonly tunnels = new Map<string, Entry>();

  constructor(
    private readonly log: Logger,
    private readonly shards: ShardDirectory,
    private readonly sql: Sql,
    private readonly config: Config,
  ) {}

  /** Start-up: sessions left open by a crash are closed at their last flush. */
  async start(): Promise<void> {
    void this.config;
    await this.sql`update sessions set disconnected_at = last_flush_at where disconnected_at is null`;
  }

  /** Shutdown: final flush of counters (the stats actor's job). */
  async stop(): Promise<void> {}

  handle(_fromShard: number, msg: TunnelShardToMain): unknown {
    switch (msg.type) {
      case 'tunnels-list':
        return this.list(msg.principal, msg.teamIds);
      case 'tunnels-get':
        return this.get(msg.id);
      case 'tunnels-close':
        return this.close(msg.id, msg.reason);
      case 'tunnels-close-owner':
        return this.closeOwner(msg.userId, msg.teamId, msg.reason);
      default:
        return assertNever(msg);
    }
  }

  /** A shard died: its tunnels are gone. */
  shardDown(shard: number): void {
    for (const [id, e] of this.tunnels) if (e.shard === shard) this.tunnels.delete(id);
  }

  private view(e: Entry): TunnelInfo {
    return { ...e.info, uptime_secs: (Date.now() - e.registeredAtMs) / 1000 };
  }

  private list(p: Principal, teamIds: string[]): TunnelInfo[] {
    const teams = new Set(teamIds);
    const out: TunnelInfo[] = [];
    for (const e of this.tunnels.values()) {
      if (p.role === 'admin' || e.info.owner_id === p.userId || (e.info.team_id !== null && teams.has(e.info.team_id))) {
        out.push(this.view(e));
      }
    }
    return out.sort((a, b) => a.id.localeCompare(b.id));
  }

  private get(id: string): TunnelInfo | null {
    const e = this.tunnels.get(id);
    return e ? this.view(e) : null;
  }

  private async close(id: string, reason: string): Promise<Record<string, never>> {
    const e = this.tunnels.get(id);
    if (!e) throw new ApiError('not-found', `no live tunnel "${id}"`);
    this.tunnels.delete(id);
    await this.shards.ask(e.shard, { type: 'tunnel-close', tunnelId: id, reason, permanent: true }, CLOSE_TIMEOUT_MS);
    return {};
  }

  private async closeOwner(userId: string | null, teamId: string | null, reason: string): Promise<number> {
    const victims = [...this.tunnels.entries()].filter(
      ([, e]) => (userId !== null && e.info.owner_id === userId) || (teamId !== null && e.info.team_id === teamId),
    );
    await Promise.all(victims.map(([id]) => this.close(id, reason).catch((err) => this.log.warn({ err, id }, 'closing tunnel failed'))));
    return victims.length;
  }
}
