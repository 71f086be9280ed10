import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { CLASS_SLOTS, HTTP_PROTOCOLS, type EdgeTotals } from '../protocol/messages.js';
import type { ShardCounts } from '../protocol/tunnel-messages.js';
import type { StatsObserver } from '../actors/stats.js';

// The server's Prometheus metrics (main thread): one prom-client Registry for the whole process.
//
//   shards: edge counters (edge/metrics.ts) ──edge-counters{totals} ≤ 250 ms──▶ edge()
//   StatsActor: tunnel bytes (the same deltas as the sessions' counters), flush durations ──▶ observer
//   main.ts: failed authentications, shard restarts
//   at scrape: live tunnels (registry), control connections and heaps (asks every shard: tunnel-counts)
//   render() ◀── GET /metrics on any shard (ask `metrics`), or the --metrics-addr listener
//
// A shard's edge totals count from its start: main keeps, per shard index, the totals of the
// running incarnation and adds a dead one's last totals to `retired`, so a restart never makes a
// counter go backwards.

export interface MetricsSources {
  /** Live tunnels by type (the registry). */
  tunnels(): { http: number; tcp: number };
  /** Live objects of every shard that answers (the registry's data-plane counts). */
  shards(): Promise<ShardCounts[]>;
}

export interface MetricsText {
  contentType: string;
  text: string;
}

const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx', '6xx', '7xx', '8xx', '9xx'] as const;
/** Always exported (at 0) so dashboards and rate() see the series from the start. */
const USUAL_CLASSES = new Set(['1xx', '2xx', '3xx', '4xx', '5xx']);

function zero(): EdgeTotals {
  return { http: new Array<number>(HTTP_PROTOCOLS.length * CLASS_SLOTS).fill(0), tcp: 0, refusedBasicAuth: 0, refusedIp: 0, h2: 0 };
}

function addInto(sum: EdgeTotals, t: EdgeTotals): void {
  for (let i = 0; i < sum.http.length; i++) sum.http[i]! += t.http[i] ?? 0;
  sum.tcp += t.tcp;
  sum.refusedBasicAuth += t.refusedBasicAuth;
  sum.refusedIp += t.refusedIp;
  sum.h2 += t.h2 ?? 0;
}

export class ServerMetrics implements StatsObserver {
  readonly registry = new Registry();
  /** Edge totals of each running shard incarnation, by shard index. */
  private readonly live = new Map<number, EdgeTotals>();
  /** Last totals of every shard incarnation that died. */
  private readonly retired = zero();

  private readonly tunnels: Gauge<'type'>;
  private readonly visitorRequests: Counter<'type' | 'code_class' | 'protocol'>;
  private readonly accessRefusals: Counter<'rule'>;
  private readonly h2Requests: Counter;
  private readonly bytesTotal: Counter<'direction'>;
  private readonly controlConnections: Gauge;
  private readonly shardHeap: Gauge<'shard'>;
  private readonly visitorBuffered: Gauge;
  private readonly shardRestarts: Counter;
  private readonly authFailures: Counter;
  private readonly keyVerifications: Counter;
  private readonly flushSeconds: Histogram;

  constructor(private readonly sources: MetricsSources) {
    const registers = [this.registry];
    // Process-wide figures (CPU, RSS, file descriptors) cover every thread; heap, event-loop
    // lag and GC are the main thread's (the shards' heaps: burrow_shard_heap_used_bytes).
    collectDefaultMetrics({ register: this.registry, prefix: 'burrow_' });
    this.tunnels = new Gauge({ name: 'burrow_tunnels', help: 'Live tunnels by type.', labelNames: ['type'], registers });
    this.visitorRequests = new Counter({
      name: 'burrow_visitor_requests_total',
      help: 'Visitor HTTP requests answered, by status class (WebSocket upgrades are 1xx) and protocol (http1, h2, grpc: an HTTP/2 request with a gRPC content-type), and visitor TCP connections accepted (code_class "none", no protocol).',
      labelNames: ['type', 'code_class', 'protocol'],
      registers,
    });
    this.bytesTotal = new Counter({
      name: 'burrow_tunnel_bytes_total',
      help: 'Bytes relayed through tunnels: request bodies and TCP bytes from visitors (in), response bodies and TCP bytes to visitors (out).',
      labelNames: ['direction'],
      registers,
    });
    this.controlConnections = new Gauge({ name: 'burrow_control_connections', help: 'Open tunnel control connections (all shards), lanes included.', registers });
    this.shardRestarts = new Counter({ name: 'burrow_shard_restarts_total', help: 'Shard worker threads that exited unexpectedly and were restarted.', registers });
    this.authFailures = new Counter({ name: 'burrow_auth_failures_total', help: 'Failed authentications: missing, malformed, unknown, revoked or expired API keys (API and tunnel control).', registers });
    this.keyVerifications = new Counter({ name: 'burrow_key_verifications_total', help: 'argon2id verifications of API keys (a key is verified once per shard, then cached; a resumed control connection skips it).', registers });
    this.flushSeconds = new Histogram({ name: 'burrow_stats_flush_seconds', help: 'Duration of each write of the session counters to the database.', registers });
    this.h2Requests = new Counter({ name: 'burrow_h2_requests_total', help: 'Visitor requests that came as HTTP/2 streams (h2 or h2c); the others are HTTP/1.x.', registers });
    this.accessRefusals = new Counter({ name: 'burrow_access_refusals_total', help: "Visitors refused by a tunnel's access rules, by rule.", labelNames: ['rule'], registers });
    this.visitorBuffered = new Gauge({ name: 'burrow_visitor_buffered_bytes', help: 'Answer bytes held for visitors that read slower than their tunnel answers (all shards; bounded by --visitor-buffer-budget per shard).', registers });
    this.shardHeap = new Gauge({ name: 'burrow_shard_heap_used_bytes', help: 'V8 heap used by each shard worker thread.', labelNames: ['shard'], registers });
    // Counters that only grow here start at 0 so their series exist before the first event.
    this.bytesTotal.inc({ direction: 'in' }, 0);
    this.bytesTotal.inc({ direction: 'out' }, 0);
    this.shardRestarts.inc(0);
    this.authFailures.inc(0);
    this.keyVerifications.inc(0);
  }

  // ---- StatsObserver (StatsActor) ----
  bytes(bytesIn: number, bytesOut: number): void {
    if (bytesIn > 0) this.bytesTotal.inc({ direction: 'in' }, bytesIn);
    if (bytesOut > 0) this.bytesTotal.inc({ direction: 'out' }, bytesOut);
  }
  flushed(seconds: number): void {
    this.flushSeconds.observe(seconds);
  }

  // ---- events on main ----
  authFailed(): void {
    this.authFailures.inc();
  }
  keyVerified(): void {
    this.keyVerifications.inc();
  }
  shardRestarted(): void {
    this.shardRestarts.inc();
  }

  /** A shard's edge totals since it started (edge-counters). */
  edge(shard: number, totals: EdgeTotals): void {
    this.live.set(shard, totals);
  }

  /** A shard died: its last totals stay counted. */
  shardDown(shard: number): void {
    const last = this.live.get(shard);
    if (last) addInto(this.retired, last);
    this.live.delete(shard);
  }

  /** The exposition of the whole server (Prometheus text format 0.0.4). */
  render(): Promise<MetricsText> {
    // One at a time: a render resets and refills series, which another must not see half done.
    const next = this.rendering.then(() => this.renderNow());
    this.rendering = next.then(
      () => undefined,
      () => undefined,
    );
    return next;
  }

  private rendering: Promise<void> = Promise.resolve();

  private async renderNow(): Promise<MetricsText> {
    const shards = await this.sources.shards();
    const live = this.sources.tunnels();
    this.tunnels.set({ type: 'http' }, live.http);
    this.tunnels.set({ type: 'tcp' }, live.tcp);
    this.controlConnections.set(shards.reduce((n, s) => n + s.control_connections, 0));
    this.visitorBuffered.set(shards.reduce((n, s) => n + s.visitor_buffered_bytes, 0));
    this.shardHeap.reset();
    for (const s of shards) this.shardHeap.set({ shard: String(s.shard) }, s.heap_used_bytes);

    const sum = zero();
    addInto(sum, this.retired);
    for (const t of this.live.values()) addInto(sum, t);
    this.visitorRequests.reset();
    HTTP_PROTOCOLS.forEach((protocol, p) => {
      STATUS_CLASSES.forEach((codeClass, i) => {
        const n = sum.http[p * CLASS_SLOTS + i + 1] ?? 0;
        if (n > 0 || USUAL_CLASSES.has(codeClass)) this.visitorRequests.inc({ type: 'http', code_class: codeClass, protocol }, n);
      });
    });
    this.visitorRequests.inc({ type: 'tcp', code_class: 'none' }, sum.tcp);
    this.accessRefusals.reset();
    this.accessRefusals.inc({ rule: 'basic_auth' }, sum.refusedBasicAuth);
    this.accessRefusals.inc({ rule: 'ip' }, sum.refusedIp);
    this.h2Requests.reset();
    this.h2Requests.inc(sum.h2);
    return { contentType: this.registry.contentType, text: await this.registry.metrics() };
  }
}
