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

/** Handshakes in progress per shard that each start a key verification (a database read and an argon2 run on main). */
export const MAX_PENDING_HANDSHAKES = 256;

export class HandshakeGate {
  private pending = 0;

  constructor(private readonly max = MAX_PENDING_HANDSHAKES) {}

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
