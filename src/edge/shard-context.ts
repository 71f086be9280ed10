import type { TemplatedApp } from '@trufflesuite/uws-js-unofficial';
import type { Sql } from '../db/sql.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { Mailbox } from '../actors/actor.js';
import type { MainToShard, ShardToMain, Principal } from '../protocol/messages.js';
import type { HttpServer } from '../http/uws.js';
import type { Uws } from '../http/uws-loader.js';
import type { Admit, TicketMinter } from '../auth/authenticate.js';
import type { LinkTokens } from '../cluster/node-links.js';

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
  /** --node-url: the tokens links between this cluster's nodes present (src/cluster/node-links.ts); null on a single node */
  linkTokens: LinkTokens | null;
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
