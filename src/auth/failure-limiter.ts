// Failed authentications (main thread), counted per client address and per key prefix. The
// address is an addressGroup (src/protocol/cidr.ts): IPv4 itself, IPv6 by its /64.
//
// Shards ask main before every argon2 verification (`verify-key`), so an attempt counts from
// the moment it is admitted, while still pending: once pending + failures reach the limit,
// further attempts are refused (429) without a verification. Counting only finished failures
// let 400 concurrent guesses through before the first one was counted.
//
// Per prefix as well as per IP: guesses at one key spread over many source addresses are held
// to the same limit. A blocked prefix still admits addresses that authenticated with it
// successfully before (its owner's usual hosts), and keys already cached on a shard keep
// working: both prove nothing is being guessed, so an attack on a prefix does not lock its
// owner out. The blocks live here, so a (re)started shard asks for them (`blocks()`).
export const WINDOW_MS = 60_000;
const MAX_TRACKED = 100_000;
/** Addresses remembered per prefix as its owner's: a few hosts, not a history. */
const TRUSTED_IPS_PER_PREFIX = 8;
const MAX_TRUSTED_PREFIXES = 100_000;

interface Count {
  /** Start of the current counting window. */
  startMs: number;
  failures: number;
  /** Admitted attempts not yet settled (not windowed: each is settled exactly once). */
  pending: number;
  /** Blocked until then (epoch ms); 0 when not blocked. */
  blockedUntilMs: number;
}

export interface Block {
  kind: 'ip' | 'prefix';
  subject: string;
  untilMs: number;
}

export type Admission = { admitted: true } | { admitted: false; kind: 'ip' | 'prefix'; retryAfterS: number };

class Counts {
  private readonly map = new Map<string, Count>();

  /** The live count of `subject`, its window restarted when it ran out. */
  get(subject: string, nowMs: number): Count {
    let c = this.map.get(subject);
    if (!c) {
      if (this.map.size >= MAX_TRACKED) this.sweep(nowMs);
      c = { startMs: nowMs, failures: 0, pending: 0, blockedUntilMs: 0 };
      this.map.set(subject, c);
    } else if (nowMs - c.startMs >= WINDOW_MS && c.blockedUntilMs <= nowMs) {
      c.startMs = nowMs;
      c.failures = 0;
      c.blockedUntilMs = 0;
    }
    return c;
  }

  peek(subject: string): Count | undefined {
    return this.map.get(subject);
  }

  *blocked(nowMs: number): Iterable<[string, number]> {
    for (const [s, c] of this.map) if (c.blockedUntilMs > nowMs) yield [s, c.blockedUntilMs];
  }

  private sweep(nowMs: number): void {
    for (const [s, c] of this.map) {
      if (c.pending === 0 && c.blockedUntilMs <= nowMs && nowMs - c.startMs >= WINDOW_MS) this.map.delete(s);
    }
    // Still full (a flood of distinct subjects): forget the oldest idle half rather than grow.
    if (this.map.size >= MAX_TRACKED) {
      let drop = this.map.size / 2;
      for (const [s, c] of this.map) {
        if (drop <= 0) break;
        if (c.pending > 0 || c.blockedUntilMs > nowMs) continue;
        this.map.delete(s);
        drop--;
      }
    }
  }
}

export class FailureLimiter {
  private readonly ips = new Counts();
  private readonly prefixes = new Counts();
  /** prefix → addresses it authenticated from (most recent last). */
  private readonly trusted = new Map<string, string[]>();

  constructor(
    private readonly limit: number,
    private readonly onBlock: (block: Block) => void,
  ) {}

  /**
   * Asks to verify one key: refused while the IP or the prefix is blocked or has `limit`
   * attempts pending + failed. An admitted attempt must be `settle`d exactly once.
   */
  admit(ip: string, prefix: string, nowMs = Date.now()): Admission {
    const byIp = this.ips.get(ip, nowMs);
    const refusedIp = this.refusal(byIp, nowMs);
    if (refusedIp !== null) return { admitted: false, kind: 'ip', retryAfterS: refusedIp };
    const byPrefix = this.prefixes.get(prefix, nowMs);
    const refusedPrefix = this.refusal(byPrefix, nowMs);
    if (refusedPrefix !== null && !this.trusted.get(prefix)?.includes(ip)) return { admitted: false, kind: 'prefix', retryAfterS: refusedPrefix };
    byIp.pending++;
    byPrefix.pending++;
    return { admitted: true };
  }

  /** Whether `ip` authenticated with `prefix` before (and has not failed with it since). */
  isTrusted(ip: string, prefix: string): boolean {
    return this.trusted.get(prefix)?.includes(ip) ?? false;
  }

  /**
   * The outcome of an admitted attempt. 'dropped': never verified because the queue was full;
   * it counts as a failure of the address (not of the prefix, which may be a victim's), so a
   * flood that only ever gets 503 still reaches the limit and 429. 'none': not verified for
   * another reason (the pool failed): not counted.
   */
  settle(ip: string, prefix: string, outcome: 'valid' | 'invalid' | 'dropped' | 'none', nowMs = Date.now()): void {
    const byIp = this.ips.get(ip, nowMs);
    const byPrefix = this.prefixes.get(prefix, nowMs);
    byIp.pending = Math.max(0, byIp.pending - 1);
    byPrefix.pending = Math.max(0, byPrefix.pending - 1);
    if (outcome === 'none') return;
    if (outcome === 'dropped') return this.count(byIp, 'ip', ip, nowMs);
    if (outcome === 'valid') return this.trust(prefix, ip);
    this.distrust(prefix, ip);
    this.count(byIp, 'ip', ip, nowMs);
    this.count(byPrefix, 'prefix', prefix, nowMs);
  }

  /** A failure that needed no verification (missing or malformed key): counts for the IP only. */
  fail(ip: string, nowMs = Date.now()): void {
    this.count(this.ips.get(ip, nowMs), 'ip', ip, nowMs);
  }

  /** Every block in force, for a (re)started shard. */
  blocks(nowMs = Date.now()): Block[] {
    const out: Block[] = [];
    for (const [subject, untilMs] of this.ips.blocked(nowMs)) out.push({ kind: 'ip', subject, untilMs });
    for (const [subject, untilMs] of this.prefixes.blocked(nowMs)) out.push({ kind: 'prefix', subject, untilMs });
    return out;
  }

  /** Seconds to wait if `c` refuses another attempt now, else null. */
  private refusal(c: Count, nowMs: number): number | null {
    if (c.blockedUntilMs > nowMs) return Math.max(1, Math.ceil((c.blockedUntilMs - nowMs) / 1000));
    // Not blocked yet, but the attempts in flight could reach the limit: wait for them.
    if (c.pending + c.failures >= this.limit) return 1;
    return null;
  }

  private count(c: Count, kind: Block['kind'], subject: string, nowMs: number): void {
    c.failures++;
    if (c.failures < this.limit || c.blockedUntilMs > nowMs) return;
    // A full window from now, whatever part of the window the failures took: the limit holds
    // across a window boundary too.
    c.blockedUntilMs = nowMs + WINDOW_MS;
    c.startMs = nowMs;
    c.failures = 0;
    this.onBlock({ kind, subject, untilMs: c.blockedUntilMs });
  }

  private distrust(prefix: string, ip: string): void {
    const ips = this.trusted.get(prefix);
    const i = ips?.indexOf(ip) ?? -1;
    if (i >= 0) ips!.splice(i, 1);
  }

  private trust(prefix: string, ip: string): void {
    const ips = this.trusted.get(prefix) ?? [];
    if (ips.at(-1) === ip) return;
    const i = ips.indexOf(ip);
    if (i >= 0) ips.splice(i, 1);
    ips.push(ip);
    if (ips.length > TRUSTED_IPS_PER_PREFIX) ips.shift();
    this.trusted.delete(prefix); // re-inserted last: the map's order is least recently used first
    if (this.trusted.size >= MAX_TRUSTED_PREFIXES) this.trusted.delete(this.trusted.keys().next().value!);
    this.trusted.set(prefix, ips);
  }
}
