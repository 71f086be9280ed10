// A token bucket: `burst` tokens, refilled at `perSecond`. take() spends one, or says there was
// none. The control connection spends one for every frame a peer sends that costs an answer.

export class TokenBucket {
  private tokens: number;
  private atMs: number;

  constructor(
    readonly burst: number,
    readonly perSecond: number,
    nowMs = Date.now(),
  ) {
    this.tokens = burst;
    this.atMs = nowMs;
  }

  take(nowMs = Date.now()): boolean {
    if (nowMs > this.atMs) {
      this.tokens = Math.min(this.burst, this.tokens + ((nowMs - this.atMs) * this.perSecond) / 1000);
      this.atMs = nowMs;
    }
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
