// Bounds the control handshakes a shard works on at once (upgrade received → 101 or refusal)
// whose key needs a new verification (not cached, none of it under way).
//
// When a server restarts, every client comes back within the same second (their reconnect
// delay is at most 1 s, tunnel-client.ts). Each handshake whose key is not cached yet costs a
// database read and an argon2 verification on main; thousands at once would only queue there
// and time out together. Past the bound a handshake is answered 503 + Retry-After at once,
// before any of that work (a few hundred bytes written, nothing read from the database); the
// client waits the Retry-After with jitter and tries again, so the work arrives in waves the
// server can finish.

import { MAX_QUEUED_JOBS } from '../workers/job-limits.js';

/**
 * Handshakes in progress per shard that each start a key verification (a database read and an
 * argon2 run on main): together the shards fill main's verification queue and no more, so main
 * never refuses one after its database read (with 256 per shard on two shards, 10,000 of 1,000
 * keys' attempts were: bench/results/2026-11-25-reconnect.md).
 */
export function handshakeBound(shards: number): number {
  return Math.max(16, Math.floor(MAX_QUEUED_JOBS / shards));
}

export class HandshakeGate {
  private pending = 0;

  constructor(private readonly max: number) {}

  /** True and counted when under the bound; the caller must leave() once the handshake ends. */
  tryEnter(): boolean {
    if (this.pending >= this.max) return false;
    this.pending++;
    return true;
  }

  leave(): void {
    this.pending--;
  }
}
