import { addressGroup } from '../protocol/cidr.js';

// Per-visitor-IP concurrency at the edge (IPv6 visitors by /64: one host has a whole /64 to pick from). A tunnel's streams share its client's connection
// and the local service: without a bound, one address that opens hundreds of requests and
// stalls them (slowloris on the request body) takes capacity every other visitor needs. Over
// the bound a visitor gets 429 at once, before anything reaches the tunnel.
//
// The count is per shard (a thread owns its Map, no locking): one address may hold up to
// `max` requests on each shard its connections land on.

/** What the ingress needs from an HTTP visitor to know when its request is over. */
export interface Finishing {
  onDone: (() => void) | null;
  readonly ended: boolean;
}

export class VisitorLimit {
  private readonly perIp = new Map<string, number>();
  /** Visitor requests in flight on this shard (the drain waits for them). */
  inflight = 0;

  constructor(readonly max: number) {}

  /** Counts a request of `ip` (IPv6: its /64); false (the caller answers 429) when it is at the bound. */
  admit(ip: string): boolean {
    const key = addressGroup(ip);
    const n = this.perIp.get(key) ?? 0;
    if (n >= this.max) return false;
    this.perIp.set(key, n + 1);
    this.inflight++;
    return true;
  }

  /**
   * Releases the count when `visitor` finishes. Call once, after the request was handed on:
   * whoever took the stream (the mesh) may have replaced `onDone`, and a request refused on
   * the spot (404, 503) is already over.
   */
  track(ip: string, visitor: Finishing): void {
    const key = addressGroup(ip);
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.inflight--;
      const n = (this.perIp.get(key) ?? 1) - 1;
      if (n <= 0) this.perIp.delete(key);
      else this.perIp.set(key, n);
    };
    if (visitor.ended) return release();
    const prev = visitor.onDone;
    visitor.onDone = () => {
      prev?.();
      release();
    };
  }
}
