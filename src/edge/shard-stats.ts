import type { StatsDelta, TunnelShardToMain } from '../protocol/tunnel-messages.js';

// StatsReporter: a shard's counters toward the StatsActor (main thread).
//
//   TunnelActor.count / openStream ─markDirty─▶ dirty set
//   every STATS_REPORT_MS: one tunnel-stats{deltas} of the dirty tunnels ─▶ main
//   a tunnel ends ─▶ tunnel-down{last}   (a lane: tunnel-stats{[last]} only: its tunnel lives on)

/** Deltas leave a shard at most this often (≤ 250 ms: counters stay near-live without a message per chunk). */
export const STATS_REPORT_MS = 250;

/** What the reporter needs of a tunnel (TunnelActor; tests use plain objects). */
export interface CountedTunnel {
  readonly id: string;
  readonly spec: { readonly lane: boolean; readonly sessionId: string };
  /** counters since the last call, null when nothing changed */
  takeDelta(): StatsDelta | null;
}

export class StatsReporter<T extends CountedTunnel> {
  private readonly dirty = new Set<T>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly tell: (msg: TunnelShardToMain) => unknown,
    everyMs = STATS_REPORT_MS,
  ) {
    this.timer = setInterval(() => this.flush(), everyMs);
    this.timer.unref();
  }

  /** A tunnel's counters changed (the TunnelActor calls this once per report period). */
  readonly markDirty = (t: T): void => void this.dirty.add(t);

  /** Sends the deltas of every dirty tunnel as one tunnel-stats. */
  flush(): void {
    if (this.dirty.size === 0) return;
    const deltas: StatsDelta[] = [];
    for (const t of this.dirty) {
      const d = t.takeDelta();
      if (d) deltas.push(d);
    }
    this.dirty.clear();
    if (deltas.length) this.tell({ type: 'tunnel-stats', deltas });
  }

  /** `t` ended with its final counters `last`. A lane's end is not its tunnel's: only its counters go to the session. */
  ended(t: T, last: StatsDelta | null): void {
    this.dirty.delete(t);
    if (t.spec.lane) {
      if (last) this.tell({ type: 'tunnel-stats', deltas: [last] });
      return;
    }
    this.tell({ type: 'tunnel-down', id: t.id, sessionId: t.spec.sessionId, last });
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
