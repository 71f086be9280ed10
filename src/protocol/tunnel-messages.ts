// Messages of the tunnel data plane between shards and the main thread's RegistryActor /
// StatsActor (and between shards over the mesh). Part of the ShardToMain / MainToShard
// unions in protocol/messages.ts; main.ts hands every message listed here to the registry.
//
//   shard ──tunnel-admit (ask)──────▶ RegistryActor ──tunnel-route (tell, every shard)──▶ shards
//   shard ──tunnel-stats (tell, ≤250 ms)──▶ RegistryActor ──▶ StatsActor ──one upsert/s──▶ sessions
//   shard ──tunnel-down (tell)──────▶ RegistryActor (session closed with final counters)
//   shard ──tunnel-lane (ask)───────▶ RegistryActor (a client's lane on another shard: key checked)
//   shard A ◀──TunnelMesh (tell, MessagePort mesh)──▶ shard B   (public HTTP landing on B for A's tunnel)
import type { Ack, Principal, TunnelInfo } from './messages.js';
import type { Reservation } from './api-views.js';
import type { RefusalCode, ResetCode, ResponseHead, StreamHead } from './frames.js';
import type { AccessWire } from './access.js';

/** Counters of one session since the last report (README "Tunnels": bytes_in, bytes_out, requests). */
export interface StatsDelta {
  sessionId: string;
  bytesIn: number;
  bytesOut: number;
  requests: number;
}

/** shard → main (RegistryActor). */
export type TunnelShardToMain =
  /** Tunnels visible to the principal (admins: all). */
  | { type: 'tunnels-list'; principal: Principal; teamIds: string[] }
  /** One live tunnel by id, or null. */
  | { type: 'tunnels-get'; id: string }
  /** Close one live tunnel for good (API delete); answers when closed. */
  | { type: 'tunnels-close'; id: string; reason: string }
  /** Close every live tunnel of a user (deactivated) or of a team (deleted). */
  | { type: 'tunnels-close-owner'; userId: string | null; teamId: string | null; reason: string }
  /** A user left a team: close that user's live tunnels bound to the team (and refuse their
   *  admissions in flight for it); answers when closed. */
  | { type: 'tunnels-close-member'; teamId: string; userId: string; reason: string }
  /** Admin: the reserved ids (the registry's copy of tunnel_reservations). */
  | { type: 'tunnel-reservations' }
  /** Admin: reserve an id for one user or one team (written, then admitted against); answers the Reservation. */
  | { type: 'tunnel-reserve'; id: string; userId: string | null; teamId: string | null }
  /** Admin: drop an id's reservation and the --id-grace hold of its last holder; throws
   *  not-found when it had neither. */
  | { type: 'tunnel-release'; id: string }
  /** Before binding a TCP port: count one toward the user's --max-tcp-ports-per-user (a live
   *  tcp tunnel of the same id, about to be taken over, does not count); answers the claim
   *  number or throws `forbidden` naming the limit. Spent by tunnel-admit, else released. */
  | { type: 'tunnel-port-claim'; userId: string; id: string | null }
  /** A claim that will not reach tunnel-admit (bind failed, connection gone). */
  | { type: 'tunnel-port-release'; claim: number }
  /** Admit a tunnel registered on this shard; answers TunnelAdmitted or throws a coded error
   *  (conflict, bad-request, forbidden, not-found). `id` null: pick a random free one. `teamId`:
   *  a team id, or the name of one of the user's teams (a tunnels-only key cannot list teams). */
  | {
      type: 'tunnel-admit';
      userId: string;
      /** the key of the control connection: a takeover by another key of the user names it */
      keyId: string;
      tunnelType: 'http' | 'tcp';
      id: string | null;
      teamId: string | null;
      remotePort: number | null;
      clientIp: string | null;
      /** the tunnel's access rules, credentials hashed (src/edge/access.ts), or null */
      access: AccessWire | null;
      /** tcp: the tunnel-port-claim this admission spends (admitted or refused), else null */
      claim: number | null;
      /** the local service as the client names it (shown in listings only), or null */
      local: string | null;
      /** join (or start) a pool of clients serving this id (Open.pool) */
      pool: boolean;
      /** cluster: one more connection of the client whose Opened.memberKey this is (Open.member), else null */
      member: string | null;
    }
  /** A client's lane for live http tunnel `id` arrived on this shard (edge/lanes.ts): answers
   *  TunnelLaneAdmitted, or throws not-found (no such tunnel of this user), forbidden (wrong
   *  key) or conflict (this is the tunnel's own shard). */
  | { type: 'tunnel-lane'; id: string; userId: string; key: string }
  /** A member of this shard is leaving (its client sent Close with streams open): out of the
   *  routes now; its tunnel-down follows when the streams are done. */
  | { type: 'tunnel-leave'; id: string; sessionId: string }
  /** A tunnel of this shard ended (client gone, stopped, closed); `last` holds its final counters. */
  | { type: 'tunnel-down'; id: string; sessionId: string; last: StatsDelta | null }
  /** Merged counter deltas of this shard's sessions (sent at most every 250 ms). */
  | { type: 'tunnel-stats'; deltas: StatsDelta[] }
  /** Every live tunnel's shard, and in a cluster the live nodes (a shard asks this once at start). */
  | { type: 'tunnel-routes' }
  /** a control connection of `userId` wants in: counted, or refused past --max-connections-per-user */
  | { type: 'control-connect'; userId: string }
  /** a counted control connection ended, or became a lane (lanes are not counted) */
  | { type: 'control-disconnect'; userId: string }
  /** Live data-plane objects of main and every shard (GET /readyz?detail=1); answers DataPlaneCounts. */
  | { type: 'data-plane-counts' };

/**
 * What the RegistryActor answers each ask of a shard (`Mailbox.ask` infers it from `type`).
 * A message of TunnelShardToMain missing here is a tell (tunnel-port-release, tunnel-down,
 * tunnel-stats): nothing answers it.
 */
/** A control connection's admission: over the user's bound, `ok` is false. */
export interface ControlAdmitted {
  ok: boolean;
  limit: number;
}

export interface TunnelShardToMainReplies {
  'tunnels-list': TunnelInfo[];
  'tunnels-get': TunnelInfo | null;
  'tunnels-close': Ack;
  /** how many live tunnels were closed */
  'tunnels-close-owner': number;
  /** how many live tunnels were closed */
  'tunnels-close-member': number;
  'tunnel-reservations': Reservation[];
  'tunnel-reserve': Reservation;
  'tunnel-release': Ack;
  'tunnel-port-claim': PortClaimed;
  'tunnel-admit': TunnelAdmitted;
  'tunnel-lane': TunnelLaneAdmitted;
  'tunnel-routes': { routes: TunnelRoute[]; nodes: string[] | null };
  'control-connect': ControlAdmitted;
  'data-plane-counts': DataPlaneCounts;
}

/** Answer to tunnel-port-claim: the claim number tunnel-admit spends (or tunnel-port-release returns). */
export interface PortClaimed {
  claim: number;
}

/** Answer to tunnel-admit. */
export interface TunnelAdmitted {
  id: string;
  sessionId: string;
  /** public URL: http://<id>.<domain>:<port> or tcp://<host>:<port> */
  url: string;
  /** the team the tunnel is bound to (resolved when the Open named it), or null */
  teamId: string | null;
  /** a live tunnel of the same user held this id and was closed for this one */
  tookOver: boolean;
  /** http on several shards: the key its lanes present (Opened.laneKey) */
  laneKey?: string;
  /** cluster: what this client's connection to another node presents to join (Opened.memberKey) */
  memberKey?: string;
  /** the registration's access rules (a pool's are its first member's: a client asking for others is refused) */
  access: AccessWire | null;
  /** tcp: the registration's port (a joining member binds none: its node's listener of the port serves it) */
  remotePort: number | null;
}

/** One control connection serving a tunnel, as a route names it: on a shard of this node, or on another node. */
export interface RouteMember {
  session: string;
  /** the burrow client it belongs to: a client's connections on two nodes share it */
  client: string;
  shard?: number;
  /** --node-url of the node that holds it */
  node?: string;
}

/** Answer to tunnel-lane: what the lane's TunnelActor needs to serve the tunnel's visitors here. */
export interface TunnelLaneAdmitted {
  sessionId: string;
  url: string;
  teamId: string | null;
  access: AccessWire | null;
}

/** Live objects of one shard's data plane: all 0 once every peer has left (named as gauges). */
export interface ShardCounts {
  shard: number;
  /** TunnelActors registered here (lanes included) */
  tunnels: number;
  /** of which lanes: tunnels owned by another shard, served here over the client's lane */
  lanes: number;
  /** this shard's copy of the registry's id → shard map */
  routes: number;
  control_connections: number;
  /** TunnelStreams (HTTP requests, WebSockets, TCP connections) of this shard's tunnels */
  streams: number;
  /** cross-shard streams, both roles (visitor here, tunnel here) */
  mesh_streams: number;
  /** streams over links to other nodes of a cluster, both roles */
  link_streams: number;
  /** Open requests waiting for the registry's admission */
  pending_admissions: number;
  /** V8 heap of this thread after the last GC (not RSS: a leak shows here, allocator retention does not) */
  heap_used_bytes: number;
  /** Answer bytes this shard's visitor sockets hold for visitors that read slowly (edge/visitor-buffers.ts) */
  visitor_buffered_bytes: number;
}

/** Answer to data-plane-counts. */
export interface DataPlaneCounts {
  /** The RegistryActor's live tunnels and the StatsActor's unwritten or live sessions (main thread). */
  registry: { tunnels: number; sessions: number; heap_used_bytes: number };
  shards: ShardCounts[];
}

export interface TunnelRoute {
  id: string;
  /** the owner shard; on another node (`node` set) meaningless (-1) */
  shard: number;
  /** cluster: the --node-url of the node holding it, when not this one */
  node?: string;
  /** cluster: a TCP tunnel's port (every node answers on it) */
  port?: number | null;
  /** cluster: a member on this node listens on `port` itself (else one shard of the node follows it) */
  portHeld?: boolean;
  /** every member (absent: the one of `shard`/`node` and `sessionId`) */
  members?: RouteMember[];
  /** the registration: a lane of another session of this id is stale and closes */
  sessionId: string;
  /** its access rules: every shard checks visitors where they arrive */
  access: AccessWire | null;
}

/** main → shard. */
export type TunnelMainToShard =
  /** Close a tunnel owned by this shard; `permanent` tells the client not to reconnect.
   *  With `sessionId`, only that registration (a same-user takeover must not close the new one).
   *  `code`: the Closed frame's code (default: deleted / taken-over / unavailable from the reason). */
  | { type: 'tunnel-close'; tunnelId: string; reason: string; permanent: boolean; sessionId?: string; code?: RefusalCode }
  /** Where a live tunnel lives now (`shard` null: gone), its session and access rules. Sent to
   *  every shard; lanes of `id` with another session (or none) close. */
  | { type: 'tunnel-route'; id: string; shard: number | null; node?: string; port?: number | null; portHeld?: boolean; sessionId?: string; access?: AccessWire | null; members?: RouteMember[] }
  /** This shard's live data-plane objects; answers ShardCounts. */
  | { type: 'tunnel-counts' }
  /** cluster: the live nodes' --node-url (this one's too) changed: Welcome names them to clients. */
  | { type: 'cluster-nodes'; nodes: string[] };

/** What a shard answers each ask of main; tunnel-route is asked only as an acknowledgement (null). */
export interface TunnelMainToShardReplies {
  'tunnel-close': { closed: boolean };
  'tunnel-route': null;
  'tunnel-counts': ShardCounts;
  'cluster-nodes': null;
}

/** shard ↔ shard over the mesh: one public HTTP stream whose visitor is on the ingress shard
 *  and whose tunnel is on the owner shard. `xid` is chosen by the ingress shard; messages toward
 *  the ingress carry it negated (both shards number their own visitors from 1). */
export type TunnelMesh =
  /** ingress → owner: a visitor request for `tunnelId`. */
  | { type: 'x-open'; xid: number; tunnelId: string; head: StreamHead }
  /** owner → ingress: the response head. */
  | { type: 'x-response'; xid: number; head: ResponseHead }
  /** both: body bytes (request body toward the owner, response body toward the ingress). */
  | { type: 'x-data'; xid: number; bytes: Uint8Array }
  /** both: end of body in the sender's direction; owner → ingress: the answer's trailers, if any. */
  | { type: 'x-end'; xid: number; trailers?: string[] }
  /** both: the stream is aborted (`vanished`: by the edge, its carrier gone; Downstream.reset). */
  | { type: 'x-reset'; xid: number; code: ResetCode; vanished?: boolean }
  /** both: the sender's side consumed `bytes` of what it received (end-to-end credit). */
  | { type: 'x-credit'; xid: number; bytes: number };
