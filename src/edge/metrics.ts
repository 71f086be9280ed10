import type { Mailbox } from '../actors/actor.js';
import { CLASS_SLOTS, HTTP_PROTOCOLS, type EdgeTotals, type MainToShard, type ShardToMain } from '../protocol/messages.js';

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

/**
 * A visitor request's protocol as RequestHead.protocol says it: absent for HTTP/1.x (the
 * `protocol` label's `http1`), 'h2' for an HTTP/2 stream, 'grpc' for an HTTP/2 stream whose
 * content-type is gRPC's. A fixed set: the label never takes a value from a request.
 */
export type VisitorProtocol = 'h2' | 'grpc';

/** Access rules that refuse a visitor (the `rule` label of burrow_access_refusals_total). */
export type AccessRule = 'basic_auth' | 'ip';

class EdgeCounters {
  /**
   * HTTP answers to visitors by protocol and status class: index = block of the protocol
   * (HTTP_PROTOCOLS order) × CLASS_SLOTS + status / 100 (1..9; 101 = WebSocket upgrade).
   */
  readonly httpByClass = new Float64Array(HTTP_PROTOCOLS.length * CLASS_SLOTS);
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

/** One HTTP answer (any status 100–999) written to a visitor of a tunnel, by its request's protocol. */
export function countHttpAnswer(status: number, protocol?: VisitorProtocol): void {
  // No label object, no lookup: the slot is arithmetic on a fixed layout.
  const block = protocol === undefined ? 0 : protocol === 'h2' ? CLASS_SLOTS : 2 * CLASS_SLOTS;
  edgeCounters.httpByClass[block + ((status / 100) | 0)]!++;
}

/** One visitor request on an HTTP/2 stream, answered by the tunnel or refused by the front (burrow_h2_requests_total). */
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
