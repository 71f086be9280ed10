import type { TunnelInfo } from '../protocol/messages.js';
import type { AccessWire } from '../protocol/access.js';
import { claimRefusalProblem, type ClaimRefusal, type HeldRegistration } from '../protocol/admission.js';
import { ApiError } from '../errors.js';
import type { TunnelMainToShard, TunnelShardToMain } from '../protocol/tunnel-messages.js';
import type { IdHolds } from './id-holds.js';
import type { Affected, Registration } from '../db/cluster.js';

/** What a member serves under (Registration): the registration's, which in a cluster the database decides. */
export type { Affected, Registration };

// Where the registry (src/actors/registry.ts) learns and records which live tunnel holds which
// id. Two implementations:
//   LocalDirectory   (src/actors/local-directory.ts)  a node alone: everything in memory
//   ClusterDirectory (src/cluster/directory.ts)       --node-url: this node's members in memory,
//     the cluster's registrations in the database (claim, release, refresh, reconcile, fence)
// The registry talks to this interface only: its rules (the id's, the team's, the limits') are
// the same on one node and on many.

export type Admit = Extract<TunnelShardToMain, { type: 'tunnel-admit' }>;

/** One control connection serving a registration (a pool has several clients; a client of a
 *  cluster has a connection on two nodes: each one a member, with a session of its own). */
export interface Member {
  sessionId: string;
  shard: number;
  /** the control connection's key: a takeover by another key of the user says which one */
  keyId: string;
  userId: string;
  /** http on several shards: what a lane of this member presents (Opened.laneKey) */
  laneKey: string | null;
  /** the burrow client it belongs to (its connections on other nodes share it: Opened.memberKey) */
  client: string;
  registeredAtMs: number;
  /** tcp: this member bound the registration's port on its shard (a joining member binds none) */
  listens: boolean;
}

/** A live tunnel: its registration and this node's members of it. */
export interface Entry {
  info: Omit<TunnelInfo, 'uptime_secs' | 'stats' | 'access' | 'pool' | 'connections'>;
  /** access rules, credentials hashed: sent with the route so every shard checks visitors */
  access: AccessWire | null;
  /** several clients may serve it (--pool) */
  pool: boolean;
  registeredAtMs: number;
  /** since when its owner has used the id (a reconnect within --id-grace carries it on): its hold's lifetime */
  usedSinceMs: number;
  members: Member[];
}


/** A claim of `id` for a new member, after the registry's own rules let it through. */
export interface Claim {
  id: string;
  sessionId: string;
  url: string;
  teamId: string | null;
  client: string;
  /** `join`: one more connection of the client whose key this is; `pool`: one more client of a pool (or its first) */
  mode: { join: string } | { pool: true } | { plain: true };
  admit: Admit;
}

/** What a directory asks of the registry: the shards' side of an end. */
export interface DirectoryHost {
  /** Asks member `m`'s shard to close it; its session closes here when the shard no longer holds it. */
  endMember(m: Member, msg: Extract<TunnelMainToShard, { type: 'tunnel-close' }>): void;
  /** Ends members of this node for good, with `reason` (a close asked through another node). */
  closeMembers(victims: { id: string; m: Member }[], reason: string): void;
  /** Tells every shard of this node where `id` lives now. */
  broadcastRoute(id: string): void;
  /** Tells every shard of this node the live nodes (they changed). */
  broadcastNodes(urls: string[]): void;
}

export interface TunnelDirectory {
  /** This node's live tunnels, by id. */
  readonly tunnels: ReadonlyMap<string, Entry>;
  readonly holds: IdHolds;
  /** The cluster's id for this node (sessions name it), or null on a node alone. */
  readonly nodeId: string | null;
  /** The live nodes' URLs as this node last read them (null: a node alone). */
  nodeUrls(): string[] | null;
  /** Every live id this node knows: its own and, in a cluster, the other nodes'. */
  ids(): string[];
  /** The registration of `id` wherever it is held, for decideClaim; null when it is free. */
  held(id: string): HeldRegistration | null;
  /** Whether a random id must avoid `id` (live anywhere, held or reserved is the registry's). */
  live(id: string): boolean;
  /** Since when `userId` has used `id` (a reconnect or a takeover keeps counting), or null. */
  usedSince(id: string, userId: string): number | null;
  /**
   * Claims `id` for the member about to be added: a node alone has decided already (null), a
   * cluster asks the database, whose answer is the registration. Throws the refusal.
   */
  claim(c: Claim): Promise<Registration | null>;
  /** Takes `id`'s entry out for a new registration (a takeover): its members are the caller's to end. */
  replace(id: string): Entry | undefined;
  /** Adds a member of this node to `id`'s entry (made from `entry` when there is none). */
  addMember(id: string, entry: () => Entry, m: Member): Entry;
  /** Member `sessionId` of `id` is over here: out of its entry (its last member ends the entry). */
  removeMember(id: string, sessionId: string): void;
  /** This node's members that `filter` picks. */
  members(filter: (e: Entry, m: Member) => boolean): { id: string; m: Member }[];
  /** Members of other nodes that `filter` picks (registrations' owner and team, member's user). */
  countElsewhere(filter: (owner: { userId: string; teamId: string | null }, memberUserId: string) => boolean): number;
  /** What every shard of this node is told of `id`. */
  routeOf(id: string): Extract<TunnelMainToShard, { type: 'tunnel-route' }>;
  /** The API's view of these ids, with their counters (`live`: a session of this node's). */
  views(ids: string[], live: (sessionId: string) => TunnelInfo['stats']): Promise<TunnelInfo[]>;
  /** Asks the other nodes to end their members of `id` for good; answers their sessions. */
  closeElsewhere(id: string, reason: string): Promise<string[]>;
  /** Waits until no node holds what a revocation affects: false when the wait ran out, or with
   *  `failure`, an `unavailable` refusal that starts with it and says when the rest ends. */
  awaitGone(affected: Affected, failure?: string): Promise<boolean>;
  /** The reserved ids changed here: the other nodes read them again. */
  reservationsChanged(): Promise<void>;
}

/** A claim's refusal as the ApiError the shard answers (Retry-After kept across the thread). */
export function claimRefused(id: string, r: ClaimRefusal): ApiError {
  const p = claimRefusalProblem(id, r);
  return new ApiError(p.code, p.detail, undefined, p.retryAfterS === undefined ? undefined : { 'retry-after': String(p.retryAfterS) });
}
