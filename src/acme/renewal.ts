// When a certificate is renewed, and a timer that can wait that long.
//
// The rule: the CA's ARI window (RFC 9773) where it offers one, a random moment inside it (so
// many servers do not renew at the same second); else when a third of the lifetime is left, which
// fits 90-day, 45-day and 6-day certificates alike. A failed attempt is retried with backoff,
// never later than a quarter of the time still left.

/** setTimeout's limit is 2^31-1 ms (24.8 days); a longer wait is slept in pieces. */
const MAX_TIMER_MS = 2 ** 31 - 1;
const FIRST_RETRY_MS = 30_000;
const MAX_RETRY_MS = 6 * 3600_000;
const MIN_RETRY_MS = 2_000;

export interface Window {
  start: Date;
  end: Date;
}

/**
 * The CA's window where it speaks of this certificate. A window that closes after the certificate
 * expires cannot be followed as written (renewing inside it may come too late) and is a CA's
 * generic answer rather than one fitted to this lifetime: Pebble gives a 48-hour window around
 * two-thirds of any lifetime, so a 5-minute certificate would be renewed at once, again and again.
 * The lifetime rule applies then. A window already over (a revoked certificate) is kept: it means
 * renew now.
 */
export function fittingWindow(notAfter: Date, ari: Window | null): Window | null {
  if (!ari) return null;
  return ari.end.getTime() > notAfter.getTime() ? null : ari;
}

export function renewAt(notBefore: Date, notAfter: Date, ari: Window | null, random = Math.random): Date {
  if (ari) return new Date(ari.start.getTime() + random() * (ari.end.getTime() - ari.start.getTime()));
  const lifetime = notAfter.getTime() - notBefore.getTime();
  return new Date(notAfter.getTime() - lifetime / 3);
}

/** The wait before attempt `failures + 1` after `failures` failed ones. */
export function retryDelayMs(failures: number, notAfter: Date, now = Date.now()): number {
  const backoff = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** Math.max(0, Math.min(failures - 1, 20)));
  const left = notAfter.getTime() - now;
  return Math.max(MIN_RETRY_MS, left > 0 ? Math.min(backoff, left / 4) : backoff);
}

/** Calls `fn` at `at` (to the millisecond, however far), unless cancelled. */
export class LongTimer {
  private handle: NodeJS.Timeout | null = null;

  constructor(
    readonly at: Date,
    private readonly fn: () => void,
  ) {
    this.arm();
  }

  private arm(): void {
    const wait = this.at.getTime() - Date.now();
    // Each piece ends by looking at the clock again: the last one lands on `at` itself.
    this.handle = wait <= 0 ? setTimeout(this.fn, 0) : setTimeout(() => this.arm(), Math.min(wait, MAX_TIMER_MS));
    this.handle.unref();
  }

  cancel(): void {
    if (this.handle) clearTimeout(this.handle);
    this.handle = null;
  }
}
