// The --id-grace holds (RegistryActor): for a while after its last tunnel ends, an id stays with
// the user who used it, so a dropped connection does not hand it (its webhooks and cookies) to
// whoever asks first.
//
// Bounded, because a hold costs its user nothing: only an id its user kept a while
// (--id-grace-min-lifetime, counted from when the user began using it, so a client that
// reconnects often keeps its id) is held, at most --id-grace-max-per-user per user (past that
// the user's oldest hold ends: anyone may take that id), and expired holds are swept on a timer.

/** Who holds an id, and until when (ms). */
export interface Hold {
  userId: string;
  untilMs: number;
  /** since when its user has used the id without a gap longer than a hold */
  sinceMs: number;
}

export interface IdHoldLimits {
  graceMs: number;
  minLifetimeMs: number;
  maxPerUser: number;
}

/** How often expired holds are dropped from memory (lookups never see one in between). */
const SWEEP_INTERVAL_MS = 60_000;

export class IdHolds {
  private readonly byId = new Map<string, Hold>();
  /** per user, the ids held, oldest hold first (a Set keeps insertion order) */
  private readonly byUser = new Map<string, Set<string>>();
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly limits: IdHoldLimits) {}

  /** The user's tunnel on `id`, used since `sinceMs`, ended now: held for --id-grace if it lived long enough. */
  ended(id: string, userId: string, sinceMs: number, nowMs = Date.now()): void {
    if (this.limits.graceMs <= 0 || nowMs - sinceMs < this.limits.minLifetimeMs) return;
    this.put(id, { userId, sinceMs, untilMs: nowMs + this.limits.graceMs });
  }

  /** A hold read back at start-up (its lifetime already checked). */
  restore(id: string, hold: Hold): void {
    if (this.limits.graceMs > 0) this.put(id, hold);
  }

  /** The live hold on `id` (an expired one is dropped here). */
  get(id: string, nowMs = Date.now()): Hold | undefined {
    const h = this.byId.get(id);
    if (h && h.untilMs <= nowMs) {
      this.delete(id);
      return undefined;
    }
    return h;
  }

  /** Since when `userId` has used `id`, when they hold it (a reconnect carries the time on). */
  heldSince(id: string, userId: string): number | null {
    const h = this.get(id);
    return h && h.userId === userId ? h.sinceMs : null;
  }

  has(id: string): boolean {
    return this.get(id) !== undefined;
  }

  /** Ends the hold on `id`; true when there was a live one. */
  delete(id: string): boolean {
    const h = this.byId.get(id);
    if (!h) return false;
    this.byId.delete(id);
    const ids = this.byUser.get(h.userId);
    ids?.delete(id);
    if (ids?.size === 0) this.byUser.delete(h.userId);
    return h.untilMs > Date.now();
  }

  get size(): number {
    return this.byId.size;
  }

  /** Drops every expired hold; returns how many. */
  sweep(nowMs = Date.now()): number {
    let n = 0;
    for (const [id, h] of this.byId) {
      if (h.untilMs > nowMs) continue;
      this.delete(id);
      n++;
    }
    return n;
  }

  /** Sweeps on a timer that never keeps the process alive. */
  start(everyMs = SWEEP_INTERVAL_MS): void {
    if (this.timer || this.limits.graceMs <= 0) return;
    this.timer = setInterval(() => this.sweep(), everyMs).unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private put(id: string, hold: Hold): void {
    this.delete(id);
    this.byId.set(id, hold);
    let ids = this.byUser.get(hold.userId);
    if (!ids) this.byUser.set(hold.userId, (ids = new Set()));
    ids.add(id);
    // Past the cap the oldest goes; a restore in end order keeps the most recent too.
    while (ids.size > this.limits.maxPerUser) this.delete(ids.values().next().value as string);
  }
}
