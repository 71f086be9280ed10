import type { RegistryActor } from '../actors/registry.js';
import type { ClusterDirectory } from './directory.js';
import type { ClusterEvent, ClusterHandlers } from './node.js';
import type { OwnInvalidations } from './own-invalidations.js';

// The one place a cluster event is acted on (main thread). ClusterNode (node.ts) hears the
// database's notifications, confirms those that would end something (hints.ts), and hands
// each here with its timers' calls:
//
//   route {id}               the directory reads the id's rows again (directory.ts refresh)
//   node {up}                a node joined or died: the directory reconciles, which reads the
//                            live nodes again (told to every shard when they changed: Welcome
//                            names them) and every id (a dead node's members go)
//   close {id, members}      another node's API ended members of ours: closed with its reason
//   member {team, user}      removed from a team: our tunnels of that user and team end
//   reservations             the reserved ids are read again
//   keys / users             revoked keys, deactivated or changed users: this node's caches and
//                            connections, as its own API would (`invalidate`, main.ts), unless
//                            this node's API made the change and did it already (`own`)
//   reconcile (timer, LISTEN back)   the directory compares everything with the database
//   fenced (the lease is lost)       every tunnel here ends (a revocation may be unheard)

export interface ClusterEventTargets {
  directory(): ClusterDirectory;
  registry(): RegistryActor;
  /** Drops keys / users from every shard's cache; with `endConnections`, their control connections end with that reason. */
  invalidate(keyIds: string[], userIds: string[], endConnections: string | null): void;
  /** What this node's own API invalidated just now: its notification is not acted on twice. */
  own: OwnInvalidations;
  log: { warn(o: object, msg: string): void };
}

export function clusterEvents(t: ClusterEventTargets): ClusterHandlers {
  return {
    event(e: ClusterEvent): void {
      switch (e.t) {
        case 'route':
          void t.directory().refresh(e.id);
          return;
        case 'node':
          // A node joined or died: the list of nodes the shards name in Welcome, and a dead one's
          // members go on many ids at once. The reconcile reads both (one at a time, however many hints).
          void t.directory().reconcile();
          return;
        case 'close':
          t.directory().closeAsked(e.id, e.members);
          return;
        case 'member':
          void t.registry().closeMember(e.team, e.user, 'removed from the team', true);
          return;
        case 'reservations':
          t.registry().reservations.load().catch((err: unknown) => t.log.warn({ err }, 'cluster: reservations not reloaded'));
          return;
        case 'keys': {
          const keys = t.own.take('key', e.ids);
          if (keys.length > 0) t.invalidate(keys, [], 'the API key was revoked');
          return;
        }
        case 'users': {
          const ended = t.own.take('user-end', e.ended);
          const changed = t.own.take('user-cache', e.changed);
          if (ended.length > 0) t.invalidate([], ended, 'the user was deactivated');
          if (changed.length > 0) t.invalidate([], changed, null);
          return;
        }
        default: {
          const never: never = e;
          return never;
        }
      }
    },
    reconcile: () => {
      t.own.forget();
      void t.directory().reconcile();
    },
    fenced: () => t.directory().fence(),
  };
}
