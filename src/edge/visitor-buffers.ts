import { INITIAL_WINDOW_BYTES } from '../protocol/frames.js';

// A shard's budget of answer bytes held for visitors that read slower than their tunnel answers.
//
//   tunnel Data ─▶ TunnelVisitor ─socket.write()─▶ over its high-water mark: the bytes wait here ─▶ held
//                                ◀──'drain' / close─────────────────────────────────────────────── released
//
// Each stream's credit window (protocol/flow-control.ts) bounds what one visitor holds, but
// not how many visitors: hundreds that never read held hundreds of MiB. So:
//   held ≥ budget / 2   every visitor's window shrinks to PRESSED_WINDOW_BYTES (its CreditMeter
//                       keeps the rest of the credit back) while the pressure lasts
//   held ≥ budget       new tunnelled requests from address groups that hold unread bytes
//                       already are answered 503 (the others are still served)
//   held ≥ 2 × budget   every new tunnelled request is answered 503, and visitors are cut off,
//                       the one that began holding bytes last first, until it is under again
//                       (requests that all arrived at once, before any bytes were held, each
//                       bring a whole window: this is the ceiling)
// and --send-timeout closes those that take nothing at all, which gives their bytes back.
// Cutting off the latest holders, not whichever visitor's bytes happened to cross the line, keeps
// the earliest answers going: 256 HTTP/2 streams of 1 MiB against a 2 MiB ceiling were every one
// reset, since each stream's next chunk crossed it in turn.

/** A visitor's window while the shard is short of room: two credit batches, so none is stranded. */
export const PRESSED_WINDOW_BYTES = 256 * 1024;

/** A visitor whose bytes are held, as the ceiling sees it. */
export interface BufferHolder {
  readonly parkedBytes: number;
  /** Disconnects the visitor; gives its bytes back and leaves() before it returns. */
  cutOff(): void;
}

export class VisitorBuffers {
  /** Bytes held now. */
  total = 0;
  /** Visitors that held bytes, in the order they first did (oldest first), until they finish. */
  private readonly holders = new Set<BufferHolder>();
  /** Of which, by the visitor's address group (protocol/cidr.ts addressGroup); none at zero. */
  private readonly byGroup = new Map<string, number>();

  constructor(
    /** --visitor-buffer-budget in bytes (set once at start-up). */
    public budget: number,
  ) {}

  hold(group: string, n: number): void {
    this.total += n;
    this.byGroup.set(group, (this.byGroup.get(group) ?? 0) + n);
  }

  release(group: string, n: number): void {
    if (n === 0) return;
    this.total -= n;
    const left = (this.byGroup.get(group) ?? n) - n;
    if (left <= 0) this.byGroup.delete(group);
    else this.byGroup.set(group, left);
  }

  /** Credit a visitor's meter keeps back: the whole window less PRESSED_WINDOW_BYTES under pressure, else none. */
  get creditHeld(): number {
    return this.total * 2 >= this.budget ? INITIAL_WINDOW_BYTES - PRESSED_WINDOW_BYTES : 0;
  }

  /** At or past the budget: refuses() has something to decide (its group is worked out only then). */
  get full(): boolean {
    return this.total >= this.budget;
  }

  /** No room for another answer to a client of `group`: its new tunnelled request is answered 503. */
  refuses(group: string): boolean {
    if (this.total < this.budget) return false;
    return this.overCeiling || this.byGroup.has(group);
  }

  /** Twice the budget: a visitor that falls further behind is disconnected rather than buffered for. */
  get overCeiling(): boolean {
    return this.total >= 2 * this.budget;
  }

  /** `h` holds bytes (again): it keeps the place it had. */
  enlist(h: BufferHolder): void {
    this.holders.add(h);
  }

  leave(h: BufferHolder): void {
    this.holders.delete(h);
  }

  /** Past the ceiling: cuts off the visitors that began holding bytes last until it is under it again. */
  shed(): void {
    while (this.overCeiling) {
      let latest: BufferHolder | null = null;
      for (const h of this.holders) if (h.parkedBytes > 0) latest = h;
      if (latest === null) return;
      latest.cutOff();
    }
  }

  /** Address groups holding bytes now. */
  get groups(): number {
    return this.byGroup.size;
  }
}

/** This thread's budget (each shard worker has its own module instance); 32 MiB until configured. */
export const visitorBuffers = new VisitorBuffers(32 * 1024 * 1024);
