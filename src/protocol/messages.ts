// Every message exchanged between the main thread (root supervisor) and the shard
// workers. Receivers switch on `type` and end with assertNever.
//
//   shard ──ShardToMain──▶ main      (tell, or ask with a timeout; see actors/actor.ts)
//   main  ──MainToShard──▶ shard
//
// Each direction's asked messages and their replies are in one map (ShardToMainReplies,
// MainToShardReplies, at the end): Mailbox.ask reads the reply type from msg.type there.
import type { Role, Scope } from './roles.js';
import type { TunnelMainToShard, TunnelMainToShardReplies, TunnelShardToMain, TunnelShardToMainReplies } from './tunnel-messages.js';
import type { AccessView } from './access.js';

export type { TunnelMainToShard, TunnelShardToMain };

/** An acknowledgement without content: the ask answers `{}` once the work is done. */
export type Ack = Record<string, never>;

/** Who is calling: resolved from a verified API key on the shard. */
export interface Principal {
  keyId: string;
  userId: string;
  role: Role;
  scopes: Scope[];
  /** The key's expires_at (epoch ms), null when it never expires: live control connections end then. */
  keyExpiresAtMs: number | null;
}

/** The API's Tunnel shape plus what visibility checks need. */
export interface TunnelInfo {
  id: string;
  owner_id: string;
  team_id: string | null;
  remote_port: number | null;
  tunnel_type: 'http' | 'tcp';
  uptime_secs: number;
  stats: { bytes_in: number; bytes_out: number; requests: number };
  /** access rules (never a credential) */
  access: AccessView;
  /** public URL (additive field) */
  url: string;
  /** the local service as its client named it (informational, client-supplied), or null */
  local_target: string | null;
  /** several clients serve it (--pool) */
  pool: boolean;
  /** control connections serving it, over every node (a pool's clients, a client's connections to two nodes) */
  connections: number;
}

/** Main's answer to `verify-key`: `limited` → 429 (by the IP's or the prefix's count), `busy` → 503. */
export type KeyVerdict =
  | { verdict: 'valid' | 'invalid' }
  | { verdict: 'limited'; kind: 'ip' | 'prefix'; retryAfterS: number }
  | { verdict: 'busy' };

/** One shard's edge counters since it started (edge/metrics.ts): totals, so a lost report costs nothing. */
/** The `protocol` label's values of the visitor requests counted, in the order of EdgeTotals.http's blocks. */
export const HTTP_PROTOCOLS = ['http1', 'h2', 'grpc'] as const;
/** Status-class slots per protocol block of EdgeTotals.http (index = status / 100). */
export const CLASS_SLOTS = 10;

export interface EdgeTotals {
  /** HTTP answers to visitors by protocol and status class: index = protocol block (HTTP_PROTOCOLS) × CLASS_SLOTS + status / 100 */
  http: number[];
  /** visitor TCP connections accepted */
  tcp: number;
  refusedBasicAuth: number;
  refusedIp: number;
  /** visitor requests that came as HTTP/2 streams */
  h2: number;
}

/** An IP answered 429 until `untilMs` (epoch ms). */
export interface IpBlock {
  ip: string;
  untilMs: number;
}

export type MainToShard =
  | TunnelMainToShard
  /** Drop cached keys of these keys / users; the ask answers once dropped (ack). With
   *  `endConnections` (revoke, deactivation) their tunnel control connections also end, with a
   *  permanent Fatal saying this, before the ack. */
  | { type: 'auth-invalidate'; keyIds: string[]; userIds: string[]; endConnections: string | null }
  /** An IP crossed the failed-auth limit: answer 429 until `untilMs` (epoch ms). */
  | { type: 'ip-blocked'; ip: string; untilMs: number }
  /** Stop accepting, let in-flight requests finish within `timeoutMs`; answers when idle. */
  | { type: 'drain'; timeoutMs: number }
  /** Read every TLS certificate again and serve new connections with them (SIGHUP); answers `{error}`. */
  | { type: 'tls-reload' }
  /** The ACME certificates changed (src/acme/): read them from the database for new handshakes. */
  | { type: 'acme-reload' };


export type ShardToMain =
  | TunnelShardToMain
  /** First message of a shard: it listens on `port`. */
  | { type: 'ready'; port: number }
  /** argon2id hash of a new key's secret (piscina pool on main); answers the hash. */
  | { type: 'hash-secret'; secret: string }
  /**
   * Admit (failed-auth limit per IP and prefix) and argon2id-verify an uncached key from `ip`;
   * `hash` null (unknown, revoked, expired or deactivated) verifies against a dummy hash so
   * the cost is the same. Answers KeyVerdict; main counts the outcome.
   */
  | { type: 'verify-key'; ip: string; prefix: string; hash: string | null; secret: string }
  /** A failed authentication from `ip` that needed no verification (missing/malformed key). */
  | { type: 'auth-failure'; ip: string }
  /** A starting shard asks for the IP blocks in force; answers IpBlock[]. */
  | { type: 'auth-blocks' }
  /** Invalidate cached keys on every shard (and end control connections, see MainToShard);
   *  answers after every shard acknowledged. */
  | { type: 'auth-invalidate'; keyIds: string[]; userIds: string[]; endConnections: string | null }
  /** Readiness: answers {shardsUp, shardsTotal}. */
  | { type: 'health' }
  /** This shard's edge counters (tell, at most every 250 ms while they change). */
  | { type: 'edge-counters'; totals: EdgeTotals }
  /** GET /metrics on this shard: answers the Prometheus text of the whole server. */
  | { type: 'metrics' }
  /** A custom domain passed its ownership check: every shard routes it, then its certificate is ordered; answers {} once routed. */
  | { type: 'custom-domain-verified'; name: string }
  /** A handshake named a verified custom domain this shard has no certificate for (tell, at most once a minute per name and shard). */
  | { type: 'certificate-wanted'; name: string };

/** Main's answer to `health`. */
export interface ShardsUp {
  shardsUp: number;
  shardsTotal: number;
}

/** Main's answer to `metrics`: the Prometheus exposition of the whole server. */
export interface MetricsReply {
  contentType: string;
  text: string;
}

/**
 * Request → reply: what main answers each ask of a shard. `Mailbox.ask` infers its result
 * from `msg.type` through this map; a message missing here (ready, auth-failure,
 * edge-counters, and the data plane's tells) is sent with `tell` and never answered.
 */
export interface ShardToMainReplies extends TunnelShardToMainReplies {
  'hash-secret': string;
  'verify-key': KeyVerdict;
  'auth-blocks': IpBlock[];
  'auth-invalidate': Ack;
  health: ShardsUp;
  metrics: MetricsReply;
  'custom-domain-verified': Ack;
}

/** Request → reply: what a shard answers each ask of main (ip-blocked is a tell). */
export interface MainToShardReplies extends TunnelMainToShardReplies {
  'auth-invalidate': Ack;
  /** `idle`: every in-flight request finished before the timeout */
  drain: { idle: boolean };
  /** `error`: why the certificates could not be read (the old ones stay), or null */
  'tls-reload': { error: string | null };
  'acme-reload': { certificates: number };
}

/** The reply map of a channel, chosen by what it sends (the Mailbox default; any other channel, such as the mesh, has only tells). */
export type RepliesOf<Out> = [Out] extends [ShardToMain]
  ? ShardToMainReplies
  : [Out] extends [MainToShard]
    ? MainToShardReplies
    : NoReplies;

/** A channel of tells only. */
export interface NoReplies {}

/** What a receiver's handler may return: one of the channel's replies (or its promise), or nothing for a tell. */
export type HandlerAnswer<Replies> = Replies[keyof Replies] | Promise<Replies[keyof Replies]> | undefined;
