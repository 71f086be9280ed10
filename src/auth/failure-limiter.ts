// Failed authentications per client IP (main thread). Shards report each failure; when an
// IP passes the limit within the window, every shard is told to answer 429 until the
// window ends (keys already verified and cached keep working: they prove nothing is being guessed). Counting centrally keeps the limit true however many shards there are.
export const WINDOW_MS = 60_000;
const MAX_TRACKED_IPS = 100_000;

export class FailureLimiter {
  private readonly windows = new Map<string, { startMs: number; count: number }>();

  constructor(private readonly limit: number) {}

  /** Records one failure; returns the epoch ms until which the IP is blocked, or null. */
  fail(ip: string, nowMs = Date.now()): number | null {
    let w = this.windows.get(ip);
    if (!w || nowMs - w.startMs >= WINDOW_MS) {
      if (!w && this.windows.size >= MAX_TRACKED_IPS) this.sweep(nowMs);
      w = { startMs: nowMs, count: 0 };
      this.windows.set(ip, w);
    }
    w.count++;
    return w.count === this.limit ? w.startMs + WINDOW_MS : null;
  }

  private sweep(nowMs: number): void {
    for (const [ip, w] of this.windows) if (nowMs - w.startMs >= WINDOW_MS) this.windows.delete(ip);
    // Still full (a flood of distinct addresses): forget the oldest half rather than grow.
    if (this.windows.size >= MAX_TRACKED_IPS) {
      let drop = this.windows.size / 2;
      for (const ip of this.windows.keys()) {
        if (drop-- <= 0) break;
        this.windows.delete(ip);
      }
    }
  }
}
