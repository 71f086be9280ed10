// Percentiles of latencies the harness collects itself (h2load's per-request log, the gRPC caller).

/** Nearest-rank percentile (p in 0..100) of ascending `sorted`; NaN when there is none. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
