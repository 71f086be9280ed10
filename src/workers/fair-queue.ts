// A bounded queue served round-robin across lanes (one lane per client IP for argon2 jobs):
// a client with 200 jobs waiting delays another client's one job by at most one job per
// busy lane, not by 200. When full, the longest lane gives up its newest job, so a flood from
// one lane cannot push out the others.

export class FairQueue<T> {
  /** Lanes in service order: a served lane moves to the back (Map keeps insertion order). */
  private readonly lanes = new Map<string, T[]>();
  private size = 0;

  constructor(private readonly capacity: number) {}

  get length(): number {
    return this.size;
  }

  /** Queues `item`; returns the item dropped to make room (maybe `item` itself), or null. */
  push(lane: string, item: T): T | null {
    let dropped: T | null = null;
    if (this.size >= this.capacity) {
      const [longest, jobs] = this.longestLane();
      const own = this.lanes.get(lane)?.length ?? 0;
      if (own + 1 >= jobs.length) return item;
      dropped = jobs.pop()!;
      this.size--;
      if (jobs.length === 0) this.lanes.delete(longest);
    }
    const q = this.lanes.get(lane);
    if (q) q.push(item);
    else this.lanes.set(lane, [item]);
    this.size++;
    return dropped;
  }

  /** The next item, taking lanes in turn; null when empty. */
  shift(): T | null {
    const first = this.lanes.entries().next();
    if (first.done) return null;
    const [lane, q] = first.value;
    const item = q.shift()!;
    this.size--;
    this.lanes.delete(lane);
    if (q.length > 0) this.lanes.set(lane, q);
    return item;
  }

  private longestLane(): [string, T[]] {
    let best: [string, T[]] = ['', []];
    for (const e of this.lanes) if (e[1].length > best[1].length) best = e;
    return best;
  }
}
