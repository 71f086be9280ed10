import { performance } from 'node:perf_hooks';

// A timeout that is set, pushed back and turned off on every request at the cost of a clock
// read. `socket.setTimeout(ms)` makes a new Timeout and a bound function at every call, and
// clearTimeout/setTimeout move a timer in the timer lists: three or four of those per request
// on a keep-alive connection. A Deadline keeps one timer, armed only when none is armed at or
// before the new expiry; a timer that fires before the deadline (it was pushed back) re-arms
// itself for the rest, and one that finds the deadline off does nothing.

export class Deadline {
  private timer: NodeJS.Timeout | null = null;
  /** When the armed timer fires (performance.now() ms); meaningful while `timer` is set. */
  private timerAt = 0;
  /** When the deadline expires; 0: off. */
  private at = 0;

  constructor(private readonly onExpire: () => void) {}

  /** Whether a deadline is set. */
  get on(): boolean {
    return this.at !== 0;
  }

  /** Expires `ms` from now, replacing any earlier setting. */
  set(ms: number): void {
    const now = performance.now();
    this.at = now + ms;
    if (this.timer !== null && this.timerAt <= this.at) return;
    this.arm(now, ms);
  }

  /** Turns the deadline off (an armed timer, if any, finds nothing to do). */
  clear(): void {
    this.at = 0;
  }

  /** Off for good: the owner is gone. */
  stop(): void {
    this.at = 0;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private arm(now: number, ms: number): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAt = now + ms;
    // Unreferenced, as a socket's own timeout is: a deadline never keeps the process alive.
    this.timer = setTimeout(this.fire, Math.max(1, Math.ceil(ms))).unref();
  }

  private readonly fire = (): void => {
    this.timer = null;
    if (this.at === 0) return;
    const now = performance.now();
    if (this.at > now) return this.arm(now, this.at - now);
    this.at = 0;
    this.onExpire();
  };
}
