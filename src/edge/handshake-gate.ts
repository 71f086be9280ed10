// Bounds the control handshakes a shard works on at once (upgrade received → 101 or refusal)
// whose key needs a new verification (not cached, none of it under way, no ticket).
//
// When a server restarts, every client comes back within the same second (their reconnect
// delay is at most 1 s, tunnel-client.ts). Each handshake whose key is not cached yet costs a
// database read and an argon2 verification on main; thousands at once would only queue there
// and time out together. Past a bound a handshake is answered 503 + Retry-After at once; the
// client waits the Retry-After with jitter and tries again, so the work arrives in waves the
// server can finish.
//
// Random keys from many addresses must not lock real clients out, so a handshake goes through
// two stages, as main's argon2 queues do (workers/jobs.ts):
//   lookup:  its key's row is read (a few milliseconds), at most `bound` at once;
//   verify:  the argon2 run on main, in one of two classes, `bound` each: keys whose prefix
//            exists and is usable, and the rest (guesses). A flood of guesses fills only its
//            own class; a real key still finds a place, and main's first queue is its.
// And per address group (addressGroup: IPv4 itself, IPv6 its /64) at most `perGroup` in all,
// so one group cannot hold every place. Every refusal counts as a failed authentication of its
// address (acceptControl), so a flood that only ever gets 503 reaches the limit and 429.

import { MAX_QUEUED_JOBS } from '../protocol/job-limits.js';

/**
 * Handshakes per stage and class per shard: together the shards fill each of main's
 * verification queues and no more, so main never refuses one after its database read (with 256
 * per shard on two shards, 10,000 of 1,000 keys' attempts were: bench/results/2026-11-25-reconnect.md).
 */
export function handshakeBound(shards: number): number {
  return Math.max(16, Math.floor(MAX_QUEUED_JOBS / shards));
}

/** One address group's share of a shard's handshakes: an eighth, so eight groups are needed to fill a stage. */
export function perGroupBound(bound: number): number {
  return Math.max(2, Math.floor(bound / 8));
}

type Stage = 'lookup' | 'known' | 'unknown';

/** One handshake's place: a lookup first, then a verification of its class; left once. */
export class GateSlot {
  private stage: Stage | null = 'lookup';

  constructor(
    private readonly gate: HandshakeGate,
    private readonly group: string,
  ) {}

  /**
   * The key's row was read: `known` when its prefix exists and is usable. True when its class
   * has a place (the slot moves there), false when it is full (the slot is left: shed it).
   */
  verify(known: boolean): boolean {
    if (this.stage !== 'lookup') return this.stage !== null;
    const next: Stage = known ? 'known' : 'unknown';
    if (!this.gate.has(next)) {
      this.leave();
      return false;
    }
    this.gate.move('lookup', next);
    this.stage = next;
    return true;
  }

  /** The handshake ended (or was shed): frees its place. Idempotent. */
  leave(): void {
    if (this.stage === null) return;
    this.gate.release(this.stage, this.group);
    this.stage = null;
  }
}

export class HandshakeGate {
  private readonly counts: Record<Stage, number> = { lookup: 0, known: 0, unknown: 0 };
  private readonly groups = new Map<string, number>();

  constructor(
    private readonly bound: number,
    private readonly perGroup = perGroupBound(bound),
  ) {}

  /** A place in the lookup stage for a handshake from `group`, or null when the stage or the group is full. */
  tryEnter(group: string): GateSlot | null {
    const held = this.groups.get(group) ?? 0;
    if (held >= this.perGroup || this.counts.lookup >= this.bound) return null;
    this.groups.set(group, held + 1);
    this.counts.lookup++;
    return new GateSlot(this, group);
  }

  /** @internal (GateSlot) */
  has(stage: Stage): boolean {
    return this.counts[stage] < this.bound;
  }

  /** @internal (GateSlot) */
  move(from: Stage, to: Stage): void {
    this.counts[from]--;
    this.counts[to]++;
  }

  /** @internal (GateSlot) */
  release(stage: Stage, group: string): void {
    this.counts[stage]--;
    const held = (this.groups.get(group) ?? 1) - 1;
    if (held <= 0) this.groups.delete(group);
    else this.groups.set(group, held);
  }
}
