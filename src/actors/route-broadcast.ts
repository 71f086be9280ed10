import type { Logger } from '../log.js';
import type { TunnelMainToShard, TunnelMainToShardReplies, TunnelRoute } from '../protocol/tunnel-messages.js';
import type { TunnelDirectory } from './tunnel-directory.js';

// Every shard of this node hears where each live tunnel is: its members here by shard, and in a
// cluster on other nodes by URL (the directory's routeOf). A route travels with the tunnel's
// access rules and TCP port, so a visitor is checked and served wherever the kernel put it.

/** How the registry reaches shard `shard` (main.ts: the ShardSupervisor; tests: fakes). */
export interface ShardDirectory {
  tell(shard: number, msg: TunnelMainToShard): void;
  /** The reply type follows from `msg.type` (TunnelMainToShardReplies). */
  ask<T extends keyof TunnelMainToShardReplies>(shard: number, msg: TunnelMainToShard & { type: T }, timeoutMs: number): Promise<TunnelMainToShardReplies[T]>;
}

const ROUTE_ACK_TIMEOUT_MS = 2_000;

export class RouteBroadcast {
  constructor(
    private readonly log: Logger,
    private readonly shards: ShardDirectory,
    private readonly workers: number,
    private readonly dir: () => TunnelDirectory,
  ) {}

  /** Answered by every shard: a shard that does not answer in time (restarting) asks for every
   *  route when it starts, so waiting longer would only delay the client. */
  async everywhere(id: string): Promise<void> {
    const msg = this.dir().routeOf(id);
    const acks = Array.from({ length: this.workers }, (_, i) => this.shards.ask(i, msg, ROUTE_ACK_TIMEOUT_MS).catch((err) => this.log.debug({ err, shard: i }, 'shard did not confirm a route')));
    await Promise.all(acks);
  }

  /** Told, not answered: a change the shards follow when they get to it. */
  tell(id: string): void {
    const msg = this.dir().routeOf(id);
    for (let i = 0; i < this.workers; i++) {
      try {
        this.shards.tell(i, msg);
      } catch (err) {
        this.log.debug({ err, shard: i }, 'shard not reachable for a route update');
      }
    }
  }

  /** Every live route and the live nodes (a shard that starts asks for them: tunnel-routes). */
  all(): { routes: TunnelRoute[]; nodes: string[] | null } {
    const routes = this.dir()
      .ids()
      .flatMap((id): TunnelRoute[] => {
        const r = this.dir().routeOf(id);
        return r.members && r.members.length > 0 ? [{ id, shard: r.shard ?? -1, ...(r.node ? { node: r.node } : {}), port: r.port ?? null, portHeld: r.portHeld ?? false, sessionId: r.sessionId!, access: r.access ?? null, members: r.members }] : [];
      });
    return { routes, nodes: this.dir().nodeUrls() };
  }

  /** cluster: the live nodes changed (a node joined or died), told to every shard: Welcome names them. */
  nodes(urls: string[]): void {
    for (let i = 0; i < this.workers; i++) {
      try {
        this.shards.tell(i, { type: 'cluster-nodes', nodes: urls });
      } catch (err) {
        this.log.debug({ err, shard: i }, 'shard not reachable for the node list');
      }
    }
  }
}
