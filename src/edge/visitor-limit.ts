import { addressGroup } from '../protocol/cidr.js';

// Per-visitor-IP concurrency at the edge (IPv6 visitors by /64: one host has a whole /64 to pick from). A tunnel's streams share its client's connection
// and the local service: without a bound, one address that opens hundreds of requests and
// stalls them (slowloris on the request body) takes capacity every other visitor needs. Over
// the bound a visitor gets 429 at once, before anything reaches the tunnel.
//
// The count is per shard (a thread owns its Map, no locking): one address may hold up to
// `max` requests on each shard its connections land on.

/** An HTTP visitor's request, as the limit holds it: the visitor gives its count back when it finishes. */
export interface Finishing {
  readonly ended: boolean;
  /** Set by hold(): the limit and the key to release() once, when the request is over. */
  heldBy: VisitorLimit | null;
  heldKey: string;
}

export class VisitorLimit {
  private readonly perIp = new Map<string, number>();
  /** Visitor requests in flight on this shard (the drain waits for them). */
  inflight = 0;

  constructor(readonly max: number) {}

  /** Counts a request of `ip`: its key (the address, or its /64), or null at the bound (the caller answers 429). */
  admit(ip: string): string | null {
    const key = addressGroup(ip);
    const n = this.perIp.get(key) ?? 0;
    if (n >= this.max) return null;
    this.perIp.set(key, n + 1);
    this.inflight++;
    return key;
  }

  /**
   * The admitted request under `key` was handed on: its count comes back when `visitor`
   * finishes (it calls release), or now if it already did (a 404, a 503 on the spot).
   */
  hold(visitor: Finishing, key: string): void {
    if (visitor.ended) return this.release(key);
    visitor.heldBy = this;
    visitor.heldKey = key;
  }

  /** Gives back one count of `key` (once per admitted request). */
  release(key: string): void {
    this.inflight--;
    const n = (this.perIp.get(key) ?? 1) - 1;
    if (n <= 0) this.perIp.delete(key);
    else this.perIp.set(key, n);
  }
}
