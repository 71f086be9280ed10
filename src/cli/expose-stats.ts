// Counters and latency percentiles for `burrow http|tcp`, kept apart from the screen so they can
// be tested without a terminal.

/** Percentiles come from the most recent requests only: memory stays flat on long sessions. */
const LATENCY_WINDOW = 1000;

export interface RequestEvent {
  method: string;
  path: string;
  status: number;
  durationMs: number;
  bytesIn: number;
  bytesOut: number;
}

export interface ConnectionEvent {
  remote: string;
  durationMs: number;
  bytesIn: number;
  bytesOut: number;
}

export class ExposeStats {
  requests = 0;
  connections = 0;
  openStreams = 0;
  bytesIn = 0;
  bytesOut = 0;
  readonly startedAtMs: number;
  private latencies: number[] = [];
  private next = 0;

  constructor(now = Date.now()) {
    this.startedAtMs = now;
  }

  addRequest(e: RequestEvent): void {
    this.requests++;
    this.bytesIn += e.bytesIn;
    this.bytesOut += e.bytesOut;
    this.addLatency(e.durationMs);
  }

  addConnection(e: ConnectionEvent): void {
    this.connections++;
    this.bytesIn += e.bytesIn;
    this.bytesOut += e.bytesOut;
    this.addLatency(e.durationMs);
  }

  private addLatency(ms: number): void {
    if (this.latencies.length < LATENCY_WINDOW) this.latencies.push(ms);
    else this.latencies[this.next] = ms;
    this.next = (this.next + 1) % LATENCY_WINDOW;
  }

  /** Nearest-rank percentile (p in 0..100) of the window, or null before the first sample. */
  percentile(p: number): number | null {
    if (this.latencies.length === 0) return null;
    const sorted = [...this.latencies].sort((a, b) => a - b);
    const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
    return sorted[rank - 1]!;
  }
}
