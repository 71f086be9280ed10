// Counters and latency percentiles for `burrow http|tcp`, kept apart from the screen so they can
// be tested without a terminal.

/** Percentiles come from the most recent requests only: memory stays flat on long sessions. */
const LATENCY_WINDOW = 1000;
/** Arrivals are counted per second for the last 5 minutes (ngrok's rt1 / rt5). */
const RATE_SECONDS = 300;

export interface RequestEvent {
  method: string;
  path: string;
  /** what the visitor got: the local service's status, or 502 / 504 when it could not be reached */
  status: number;
  durationMs: number;
  bytesIn: number;
  bytesOut: number;
  /** why the local service gave no answer ("connection refused by localhost:3000"); absent when it answered */
  error?: string;
}

export interface ConnectionEvent {
  remote: string;
  durationMs: number;
  bytesIn: number;
  bytesOut: number;
  /** why the connection to the local service failed; absent when it was made */
  error?: string;
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
  /** arrivals per second: ring of RATE_SECONDS buckets, `arrivalSecond[i]` the second bucket i counts */
  private readonly arrivals = new Array<number>(RATE_SECONDS).fill(0);
  private readonly arrivalSecond = new Array<number>(RATE_SECONDS).fill(-1);

  constructor(now = Date.now()) {
    this.startedAtMs = now;
  }

  addRequest(e: RequestEvent, now = Date.now()): void {
    this.arrived(now - e.durationMs);
    this.requests++;
    this.bytesIn += e.bytesIn;
    this.bytesOut += e.bytesOut;
    this.addLatency(e.durationMs);
  }

  addConnection(e: ConnectionEvent, now = Date.now()): void {
    this.arrived(now - e.durationMs);
    this.connections++;
    this.bytesIn += e.bytesIn;
    this.bytesOut += e.bytesOut;
    this.addLatency(e.durationMs);
  }

  private arrived(atMs: number): void {
    const sec = Math.floor(atMs / 1000);
    const i = sec % RATE_SECONDS;
    if (this.arrivalSecond[i] !== sec) {
      this.arrivalSecond[i] = sec;
      this.arrivals[i] = 0;
    }
    this.arrivals[i]!++;
  }

  /** Requests (or connections) per second that arrived over the last `seconds` (≤ 300), as ngrok's rt1/rt5. */
  rate(seconds: number, now = Date.now()): number {
    const current = Math.floor(now / 1000);
    let n = 0;
    for (let i = 0; i < RATE_SECONDS; i++) {
      const sec = this.arrivalSecond[i]!;
      if (sec > current - seconds && sec <= current) n += this.arrivals[i]!;
    }
    return n / seconds;
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
