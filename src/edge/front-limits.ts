import { readFileSync } from 'node:fs';
import { addressGroup, type CidrSet } from '../protocol/cidr.js';

// How many connections the public port of one shard keeps open, so that silent connections from
// a few addresses cannot take every file descriptor of the process (after which each new
// visitor, /healthz and control reconnect is reset by the kernel).
//
//   accept ─▶ descriptors in use ≥ budget          ─▶ closed at once
//           ─▶ ≥ budget − reserve (the last tenth)  ─▶ served only for a control connection or
//                                                      the API (FrontHost.reserved), else 503
//   peer known (the socket's, or the PROXY header's) ─▶ its address group over its cap ─▶ closed
//
// Descriptors, not connections: a connection talking to the API holds two more (both ends of
// its unix socket to the uWS App). Each shard counts its own; the kernel spreads connections over
// the shards (SO_REUSEPORT), so a shard's share of the process-wide budget is budget / workers.

/** What a new connection may do: everything, only reach control or the API, or nothing. */
export type Admission = 'open' | 'reserve' | 'full';

/** The soft limit on open files of this process (RLIMIT_NOFILE), or null where it cannot be read. */
export function openFileLimit(): number | null {
  try {
    // Node has no getrlimit; Linux shows it here (Node raised the soft limit to the hard one at start).
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'latin1'));
    if (!m) return null;
    return m[1] === 'unlimited' ? Number.MAX_SAFE_INTEGER : Number(m[1]);
  } catch {
    return null;
  }
}

/** Where the open-file limit cannot be read (not Linux): a common default. */
const FALLBACK_OPEN_FILES = 4096;

/**
 * One shard's share of the descriptors the public port may use: `--public-fd-limit`, or three
 * quarters of the process's open-file limit (the rest: the database, TCP tunnels, the main thread).
 */
export function shardFdBudget(publicFdLimit: number | null, workers: number, openFiles = openFileLimit()): number {
  const total = publicFdLimit ?? Math.floor(((openFiles ?? FALLBACK_OPEN_FILES) * 3) / 4);
  return Math.max(16, Math.floor(total / Math.max(1, workers)));
}

export interface ConnectionLimitsOptions {
  /** Open connections per address group. */
  perGroup: number;
  /** Descriptors this shard's public port may hold. */
  fdBudget: number;
  /** Peers not counted per address (--trust-proxy: the operator's load balancers carry many clients). */
  exempt: CidrSet;
}

/** One shard's counts of open public connections and the descriptors they hold. */
export class ConnectionLimits {
  private readonly byGroup = new Map<string, number>();
  private fds = 0;
  /** Below the budget by this much, only control connections and the API are served. */
  readonly reserve: number;

  constructor(private readonly opts: ConnectionLimitsOptions) {
    this.reserve = Math.max(1, Math.floor(opts.fdBudget / 10));
  }

  /** Descriptors the public port holds now. */
  get descriptors(): number {
    return this.fds;
  }

  /** A socket was accepted: what it may do. Counted (release with releaseSocket) unless 'full'. */
  admitSocket(): Admission {
    if (this.fds >= this.opts.fdBudget) return 'full';
    this.fds++;
    return this.fds > this.opts.fdBudget - this.reserve ? 'reserve' : 'open';
  }

  releaseSocket(): void {
    this.fds--;
  }

  /** More descriptors held for a connection (its unix socket pair to the API), released with releaseFds. */
  holdFds(n: number): void {
    this.fds += n;
  }

  releaseFds(n: number): void {
    this.fds -= n;
  }

  /**
   * The connection's client is `peer`: false when its address group holds its cap already (the
   * connection is then not counted). Else counted until releasePeer; null when it is exempt.
   */
  admitPeer(peer: string): string | null | false {
    if (this.opts.exempt.has(peer)) return null;
    const group = addressGroup(peer);
    const n = this.byGroup.get(group) ?? 0;
    if (n >= this.opts.perGroup) return false;
    this.byGroup.set(group, n + 1);
    return group;
  }

  releasePeer(group: string): void {
    const n = (this.byGroup.get(group) ?? 1) - 1;
    // Deleted at zero: a map entry per address ever seen would itself be a leak.
    if (n <= 0) this.byGroup.delete(group);
    else this.byGroup.set(group, n);
  }

  /** Address groups with an open connection (for tests and the readiness detail). */
  get groups(): number {
    return this.byGroup.size;
  }
}
