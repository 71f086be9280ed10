// ExpiryTimers: one timer per tunnel with --expires (its access rules' expiresAt), on the shard
// that owns it. When it fires the shard closes the tunnel (Closed{code:'expired', permanent}).
// setTimeout waits at most 2^31-1 ms (~24.8 days; longer waits fire at once), so a later
// expiry re-arms until its time has come.

/** setTimeout's longest wait (2^31-1 ms); an expiry further away re-arms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export class ExpiryTimers<K> {
  private readonly timers = new Map<K, NodeJS.Timeout>();

  constructor(
    /** the longest single wait (tests shorten it to see the re-arming) */
    private readonly maxWaitMs = MAX_TIMER_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Calls `expire` once `at` (epoch ms) has come; replaces an earlier timer of `key`. */
  arm(key: K, at: number, expire: () => void): void {
    clearTimeout(this.timers.get(key));
    const wait = Math.min(Math.max(at - this.now(), 0), this.maxWaitMs);
    const timer = setTimeout(() => {
      if (this.now() < at) return this.arm(key, at, expire);
      this.timers.delete(key);
      expire();
    }, wait);
    timer.unref();
    this.timers.set(key, timer);
  }

  /** The tunnel ended first: no expiry. */
  cancel(key: K): void {
    clearTimeout(this.timers.get(key));
    this.timers.delete(key);
  }

  /** Timers armed (tunnels with an expiry still to come). */
  get size(): number {
    return this.timers.size;
  }
}
