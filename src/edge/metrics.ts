import type { Mailbox } from '../actors/actor.js';
import type { EdgeTotals, MainToShard, ShardToMain } from '../protocol/messages.js';

// Counters of what happens on a shard's edge, for GET /metrics.
//
//   visitor answer / TCP connection / access refusal ─▶ one integer increment here (hot path)
//   every PUSH_MS, when something changed ─▶ main: edge-counters{totals} ─▶ main-thread/metrics.ts
//
// The hot path pays an array or field increment, nothing else: no prom-client, no message, no
// allocation. Totals (not deltas) cross to main, so a lost or repeated message changes nothing;
// main keeps a dead shard's last totals, so a restart (which starts these at 0) never makes a
// counter go backwards. What a crash loses is at most the last PUSH_MS of increments.

/** How often a shard reports its totals (only when they changed). */
export const PUSH_MS = 250;

/** Access rules that refuse a visitor (the `rule` label of burrow_access_refusals_total). */
export type AccessRule = 'basic_auth' | 'ip';

class EdgeCounters {
  /** HTTP answers to visitors by status class: index = status / 100 (1..9; 101 = WebSocket upgrade). */
  readonly httpByClass = new Float64Array(10);
  /** Visitor TCP connections accepted on a TCP tunnel's port. */
  tcpConnections = 0;
  refusedBasicAuth = 0;
  refusedIp = 0;
  /** Visitor requests that came as HTTP/2 streams (h2 or h2c); the others are HTTP/1.x. */
  h2Streams = 0;

  totals(): EdgeTotals {
    return { http: Array.from(this.httpByClass), tcp: this.tcpConnections, refusedBasicAuth: this.refusedBasicAuth, refusedIp: this.refusedIp, h2: this.h2Streams };
  }
}

/** This thread's counters (each shard worker has its own module instance). */
export const edgeCounters = new EdgeCounters();

/** One HTTP answer (any status 100–999) written to a visitor of a tunnel. */
export function countHttpAnswer(status: number): void {
  edgeCounters.httpByClass[(status / 100) | 0]!++;
}

/** One visitor request on an HTTP/2 stream (burrow_http_requests_total{protocol="h2"}). */
export function countH2Stream(): void {
  edgeCounters.h2Streams++;
}

/** A visitor refused by a tunnel's access rules (the hook the access rules call). */
export function countAccessRefusal(rule: AccessRule): void {
  if (rule === 'ip') edgeCounters.refusedIp++;
  else edgeCounters.refusedBasicAuth++;
}

function same(a: EdgeTotals, b: EdgeTotals): boolean {
  return a.tcp === b.tcp && a.h2 === b.h2 && a.refusedBasicAuth === b.refusedBasicAuth && a.refusedIp === b.refusedIp && a.http.every((n, i) => n === b.http[i]);
}

/** Starts reporting this shard's totals to main; returns a stop function (the drain sends a last report). */
export function pushEdgeCounters(main: Mailbox<ShardToMain, MainToShard>): () => void {
  let sent = edgeCounters.totals();
  const push = (): void => {
    const now = edgeCounters.totals();
    if (same(now, sent)) return;
    sent = now;
    main.tell({ type: 'edge-counters', totals: now });
  };
  const timer = setInterval(push, PUSH_MS);
  timer.unref();
  return () => {
    clearInterval(timer);
    push();
  };
}
