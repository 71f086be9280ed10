// Every message exchanged between the main thread (root supervisor) and the shard
// workers. Receivers switch on `type` and end with assertNever.
//
//   shard ──ShardToMain──▶ main      (tell, or ask with a timeout; see actors/actor.ts)
//   main  ──MainToShard──▶ shard
import type { Role, Scope } from '../auth/scopes.js';
import type { TunnelMainToShard, TunnelShardToMain } from './tunnel-messages.js';

export type { TunnelMainToShard, TunnelShardToMain };

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
  | { type: 'drain'; timeoutMs: number };


export type ShardToMain =
  | TunnelShardToMain
  /** First message of a shard: it listens on `port`. */
  | { type: 'ready'; port: number }
  /** argon2id hash of a new key's secret (piscina pool on main); answers the hash. */
  | { type: 'hash-secret'; secret: string }
  /** argon2id verify; answers boolean. */
  | { type: 'verify-secret'; hash: string; secret: string }
  /** A failed authentication from `ip` (counts toward the 429 limit). */
  | { type: 'auth-failure'; ip: string }
  /** Invalidate cached keys on every shard (and end control connections, see MainToShard);
   *  answers after every shard acknowledged. */
  | { type: 'auth-invalidate'; keyIds: string[]; userIds: string[]; endConnections: string | null }
  /** Readiness: answers {shardsUp, shardsTotal}. */
  | { type: 'health' };
