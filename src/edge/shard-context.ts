import type { TemplatedApp } from '@trufflesuite/uws-js-unofficial';
import type { Sql } from '../db/sql.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { Mailbox } from '../actors/actor.js';
import type { MainToShard, ShardToMain, Principal } from '../protocol/messages.js';
import type { HttpServer } from '../http/uws.js';
import type { Uws } from '../http/uws-loader.js';
import type { StreamHead } from '../protocol/frames.js';
import type { WsConnection } from '../protocol/ws-connection.js';
import type { Downstream, Upstream } from './stream.js';

// The edge sits below auth/ and cluster/: the authenticator (src/auth/authenticate.ts) and the
// links between nodes (src/cluster/node-links.ts) are handed to it here, as the shapes below.

/** A fresh resumption ticket and when it runs out (epoch ms). */
export type TicketMinter = () => { ticket: string; untilMs: number };

/** Whether a key whose row was read (`known`: its prefix exists and is usable) may be verified now; throws to refuse. */
export type Admit = (known: boolean) => void;

/** A stream's receiving end, with what its carrier runs once the stream is done. */
export type LinkDownstream = Downstream & { onDone: (() => void) | null };

/** This shard's links to and from the cluster's other nodes (NodeLinks). */
export interface ClusterLinks {
  /** Streams over links, both roles (GET /readyz?detail=1). */
  readonly streamCount: number;
  /** A visitor here for a tunnel on the node at `url`; null when none. */
  open(url: string, tunnelId: string, head: StreamHead, down: LinkDownstream): Upstream | null;
  /** A link another node dialled to this one (its 101 written by the caller). */
  accept(ws: WsConnection): void;
  closeAll(): void;
}

/**
 * Builds a shard's ClusterLinks: `openHere` opens a stream a link brought on a tunnel of this
 * node (null when none); `health` hears that a dialled link failed or was lost (`up` false),
 * or was established (true).
 */
export type ClusterLinksFactory = (
  log: Logger,
  openHere: (tunnelId: string, head: StreamHead, down: LinkDownstream) => Upstream | null,
  health: (url: string, up: boolean) => void,
) => ClusterLinks;

/** Everything a feature installed on a shard may use. One per shard worker thread. */
export interface ShardContext {
  index: number;
  config: Config;
  log: Logger;
  sql: Sql;
  uws: Uws;
  app: TemplatedApp;
  http: HttpServer;
  main: Mailbox<ShardToMain, MainToShard>;
  /** --node-url: builds the links between this cluster's nodes; null on a single node */
  clusterLinks: ClusterLinksFactory | null;
  /** Keys the credentials' tag pools compare joiners with (hashAccess in src/edge/access.ts); a server secret. */
  accessTagKey: Uint8Array;
  /**
   * Resolves `Authorization` to a principal or throws ApiError(401/429); `ip` counts failures.
   * `ticket`: a control connection's resumption ticket (src/auth/resume-ticket.ts); `admit`:
   * the handshake gate's say before a verification (Authenticator.authenticate).
   */
  authenticate(authorization: string | undefined, ip: string, ticket?: string, admit?: Admit): Promise<Principal>;
  /** True when authenticate() would run no new key verification (cached, joining one, or resumed). */
  authIsCheap(authorization: string | undefined, ip: string, ticket?: string): boolean;
  /** Issues the resumption tickets of a control connection that authenticated as `principal` (Welcome's, then Ticket's). */
  resumeTickets(authorization: string, principal: Principal): TicketMinter | null;
}
