import { CREDIT_BATCH_BYTES, INITIAL_WINDOW_BYTES } from './frames.js';

// Flow control of one stream direction, the same on the edge and in the client.
//
//   sender                                               receiver
//   source ─read─▶ SendWindow.spend(n) ──Data n──▶ … ──▶ destination.write(n)
//          ◀pause/resume─ SendWindow.grant(m) ◀─Credit m── CreditMeter (m = bytes the destination took)
//
// A direction starts with INITIAL_WINDOW_BYTES of credit. The sender stops reading its source
// when the window is spent and resumes when credit comes back. The receiver counts a byte as
// consumed only once its destination accepted it (a write that returned true, or a 'drain' /
// onWritable after one that did not), so credit never runs ahead of a slow reader; it reports
// in batches of CREDIT_BATCH_BYTES. A remainder under a batch is never stranded: a paused
// sender has a whole window (≫ a batch) unreported or on its way, so a batch always fills. Whatever sits between the two (a shard, the mesh) only relays Data and Credit; it
// may check the peer's arithmetic with a SendWindow/ReceiveWindow of its own.
// A receiver short of memory shrinks the sender's window without a frame of its own: its
// CreditMeter keeps some accepted credit back (holdBack), so the sender can have only the
// window less that much outstanding; the credit goes back when the pressure ends.
//
// StreamEnds is the one end/reset state machine of a stream: each direction ends once (End),
// the stream is over when both did or at the first Reset, and it is over exactly once.

/** What a window pauses: a socket, a visitor connection's reading, an undici handler. */
export interface Source {
  pause(): void;
  resume(): void;
}

const NO_SOURCE: Source = { pause() {}, resume() {} };

/** The sender's window: bytes it may still send before the receiver returns credit. */
export class SendWindow {
  private available: number;
  private stopped = false;

  constructor(
    private readonly source: Source = NO_SOURCE,
    private readonly initial: number = INITIAL_WINDOW_BYTES,
  ) {
    this.available = initial;
  }

  /** Bytes sent and not yet credited back. */
  get outstanding(): number {
    return this.initial - this.available;
  }

  /** True while the source is paused for lack of credit. */
  get paused(): boolean {
    return this.stopped;
  }

  /**
   * Counts `n` bytes sent. Once the window is spent the source is paused, unless `more` is
   * false (the source has nothing more to give: pausing it would only keep it from ending).
   * The source may overrun by what it handed over in one read; the receiver tolerates that.
   */
  spend(n: number, more = true): void {
    this.available -= n;
    if (this.available <= 0 && !this.stopped && more) {
      this.stopped = true;
      this.source.pause();
    }
  }

  /**
   * Credit for `n` bytes came back. False (and nothing changes) when it is more than was
   * sent and not yet credited: the peer broke the protocol.
   */
  grant(n: number): boolean {
    if (n > this.outstanding) return false;
    this.available += n;
    if (this.stopped && this.available > 0) {
      this.stopped = false;
      this.source.resume();
    }
    return true;
  }
}

/**
 * A sender may overrun the window by what its source handed over at once (it pauses the source
 * only after a read); more than a whole extra window is not a chunk, it is a flood.
 */
export const WINDOW_SLACK_BYTES = INITIAL_WINDOW_BYTES;

/** The receiver's view of the sender's window, to refuse a peer that ignores it. */
export class ReceiveWindow {
  private available: number;
  constructor(initial: number = INITIAL_WINDOW_BYTES) {
    this.available = initial;
  }
  /** Counts `n` bytes received; false when the sender is past its window and the slack. */
  receive(n: number): boolean {
    this.available -= n;
    return this.available >= -WINDOW_SLACK_BYTES;
  }
  /** We sent the sender credit for `n` bytes. */
  granted(n: number): void {
    this.available += n;
  }
  /** How far past the window the sender is (0 when within it), for a message. */
  get overrun(): number {
    return Math.max(0, -this.available);
  }
}

/**
 * The receiver's credit meter: counts bytes handed to the destination, and reports (through
 * `report`) only those the destination accepted, in batches.
 */
/** Where a CreditMeter reports accepted bytes (the stream itself: no closure per stream). */
export interface CreditSink {
  reportCredit(bytes: number): void;
}

export class CreditMeter {
  /** Handed to the destination, which buffered them: accepted at its next drain. */
  private buffered = 0;
  /** Accepted and not reported yet. */
  private unreported = 0;
  /** Of `unreported`, what is kept back (holdBack): the sender's window is that much smaller. */
  private held = 0;

  constructor(
    private readonly sink: CreditSink,
    private readonly batchBytes: number = CREDIT_BATCH_BYTES,
  ) {}

  /** `n` bytes written to the destination; `taken`: its write() returned true (not over its high-water mark). */
  wrote(n: number, taken: boolean): void {
    if (taken) this.accepted(n);
    else this.buffered += n;
  }

  /** The destination took `n` bytes (a chunk it had queued, or bytes that will never be delivered). */
  accepted(n: number): void {
    this.unreported += n;
    if (this.unreported - this.held >= this.batchBytes) this.flush();
  }

  /** Bytes written and not accepted yet (the destination buffers them). */
  get pending(): number {
    return this.buffered;
  }

  /**
   * Keeps up to `bytes` of accepted credit back from now on (0: none, and what was kept goes
   * back at once). The window less `bytes` must stay over a batch, or a paused sender could
   * wait for a report that never fills.
   */
  holdBack(bytes: number): void {
    if (bytes === this.held) return;
    this.held = bytes;
    if (this.unreported > bytes && (bytes === 0 || this.unreported - bytes >= this.batchBytes)) this.flush();
  }

  /** The destination emptied its buffer ('drain', onWritable): what it held is accepted. */
  drained(): void {
    const n = this.buffered;
    this.buffered = 0;
    this.accepted(n);
  }

  private flush(): void {
    const n = this.unreported - this.held;
    this.unreported = this.held;
    this.sink.reportCredit(n);
  }
}

/** Outcome of an End from the peer. */
export type PeerEnd = 'ok' | 'duplicate' | 'over';

/**
 * The end/reset state machine of one stream. "local" is the direction this side sends, "peer"
 * the one it receives. Callers act on a transition only when it says so (true / 'ok'), then
 * call `settle()` so the stream finishes once both directions ended; the owner's `streamFinished` runs once.
 */
/** Told once when a StreamEnds finishes (the stream itself: no closure per stream). */
export interface EndsOwner {
  streamFinished(): void;
}

export class StreamEnds {
  private localEnded = false;
  private peerEnded = false;
  private over = false;

  constructor(private readonly owner: EndsOwner) {}

  /** The stream is finished (both ended, or reset): nothing more is sent or delivered. */
  get done(): boolean {
    return this.over;
  }
  /** This side sent its End. */
  get localDone(): boolean {
    return this.localEnded;
  }
  /** The peer's End arrived. */
  get peerDone(): boolean {
    return this.peerEnded;
  }

  /** Our direction ends: true when the caller should send its End (not over, not ended before). */
  endLocal(): boolean {
    if (this.over || this.localEnded) return false;
    this.localEnded = true;
    return true;
  }

  /** The peer's direction ended: 'ok' to deliver it; a second End is 'duplicate', a late one 'over'. */
  endPeer(): PeerEnd {
    if (this.over) return 'over';
    if (this.peerEnded) return 'duplicate';
    this.peerEnded = true;
    return 'ok';
  }

  /** Finishes the stream if both directions ended. */
  settle(): void {
    if (this.localEnded && this.peerEnded) this.finish();
  }

  /**
   * Finishes the stream now (a reset either way); false when it was already over. `notify`
   * false skips streamFinished: the owner is tearing all its streams down and keeps its own books.
   */
  finish(notify = true): boolean {
    if (this.over) return false;
    this.over = true;
    if (notify) this.owner.streamFinished();
    return true;
  }
}
