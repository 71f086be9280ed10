import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import { pruneClosedSessions, upsertSessionTotals, type SessionTotals } from '../db/sessions.js';
import type { StatsDelta } from '../protocol/tunnel-messages.js';

// StatsActor (main thread): the one writer of a session's counters, and of its end while its
// node lives.
//
//   shards ──tunnel-stats deltas (≤ 250 ms)──▶ RegistryActor ──▶ StatsActor.add
//   every FLUSH_INTERVAL_MS: one multi-row upsert of every changed session
//   every 10 min (--session-retention): closed sessions past it deleted (prune)
//
// It keeps each live session's *totals* and writes absolute values (not increments), so a
// write that failed, or succeeded without our hearing of it (connection lost mid-reply), is
// simply repeated: nothing is lost while PostgreSQL is away and nothing is counted twice when
// it returns. On a node alone a session row is created by the first flush after registration
// (the upsert), so registering a tunnel never waits for the database.
//
// The other writers of `sessions`, none of them of counters (test/cluster/session-counts.test.ts
// checks the counts stay exact through each):
//   claimTunnel (db/cluster.ts)          a cluster member's row at its claim, counters zero
//                                        (`on conflict do nothing`: never over this actor's)
//   reapDeadNodes, registerNode (same)   a dead node's open sessions closed at their last
//                                        flush, by a live node or the dead one's successor
//   closeOrphanedSessions (db/sessions.ts, start-up)   a crashed single node's, the same way

export const FLUSH_INTERVAL_MS = 1_000;
/** --session-retention: how often closed sessions past it are deleted, and how many per statement. */
const PRUNE_INTERVAL_MS = 10 * 60_000;
const PRUNE_BATCH = 1_000;
/** 13 parameters a row; PostgreSQL takes at most 65535 parameters per statement. */
const MAX_ROWS_PER_STATEMENT = 5_000;

export interface SessionOpen {
  id: string;
  userId: string;
  tunnelId: string;
  tunnelType: 'http' | 'tcp';
  teamId: string | null;
  clientIp: string | null;
  /** cluster: the node that holds it (when it dies, another closes its sessions); null on a single node */
  nodeId?: string | null;
}

interface Row extends SessionOpen {
  connectedAt: Date;
  disconnectedAt: Date | null;
  bytesIn: number;
  bytesOut: number;
  requests: number;
  /** bumped on every change; a flush clears `dirty` only if no change came in meanwhile */
  version: number;
  flushedVersion: number;
}

/** What /metrics learns from the counters passing through (main-thread/metrics.ts). */
export interface StatsObserver {
  /** Tunnel bytes relayed: visitor → client (`in`), client → visitor (`out`). */
  bytes(bytesIn: number, bytesOut: number): void;
  /** One flush's duration, successful or not. */
  flushed(seconds: number): void;
}

export class StatsActor {
  observer: StatsObserver | null = null;
  private readonly rows = new Map<string, Row>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private failing = false;

  constructor(
    private readonly log: Logger,
    private readonly sql: Sql,
  ) {}

  /** `retentionSecs`: closed sessions older than it are deleted now and every PRUNE_INTERVAL_MS (null: kept). */
  start(retentionSecs: number | null = null): void {
    this.timer = setInterval(() => void this.flush(), FLUSH_INTERVAL_MS);
    this.timer.unref();
    if (retentionSecs !== null) {
      void this.prune(retentionSecs);
      this.pruneTimer = setInterval(() => void this.prune(retentionSecs), PRUNE_INTERVAL_MS).unref();
    }
  }

  private pruneTimer: NodeJS.Timeout | null = null;

  /** Deletes closed sessions older than `keepSecs`, a batch at a time. */
  async prune(keepSecs: number): Promise<number> {
    let total = 0;
    try {
      for (;;) {
        const n = await pruneClosedSessions(this.sql, keepSecs, PRUNE_BATCH);
        total += n;
        if (n < PRUNE_BATCH) break;
      }
      if (total > 0) this.log.info({ deleted: total }, 'closed sessions past --session-retention deleted');
    } catch (err) {
      this.log.warn({ err }, 'pruning old sessions failed; next try later');
    }
    return total;
  }

  open(s: SessionOpen): void {
    this.rows.set(s.id, { ...s, connectedAt: new Date(), disconnectedAt: null, bytesIn: 0, bytesOut: 0, requests: 0, version: 1, flushedVersion: 0 });
  }

  add(d: StatsDelta): void {
    this.observer?.bytes(d.bytesIn, d.bytesOut);
    const r = this.rows.get(d.sessionId);
    if (!r) return;
    r.bytesIn += d.bytesIn;
    r.bytesOut += d.bytesOut;
    r.requests += d.requests;
    r.version++;
  }

  close(sessionId: string, at = new Date()): void {
    const r = this.rows.get(sessionId);
    if (!r || r.disconnectedAt) return;
    r.disconnectedAt = at;
    r.version++;
  }

  /** Live totals of a session (for /tunnels stats). */
  totals(sessionId: string): { bytes_in: number; bytes_out: number; requests: number } {
    const r = this.rows.get(sessionId);
    return { bytes_in: r?.bytesIn ?? 0, bytes_out: r?.bytesOut ?? 0, requests: r?.requests ?? 0 };
  }

  /** One upsert of every changed session; overlapping calls share the write in flight. */
  flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    this.flushing = this.write().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  private async write(): Promise<void> {
    // Live sessions are written every interval even when idle: last_flush_at is where a crash
    // would close them (sessions are "flushed at least every second while live").
    const changed = [...this.rows.values()].filter((r) => r.version !== r.flushedVersion || !r.disconnectedAt);
    if (changed.length === 0) return;
    const started = performance.now();
    try {
      await this.writeRows(changed);
    } finally {
      this.observer?.flushed((performance.now() - started) / 1000);
    }
  }

  private async writeRows(changed: Row[]): Promise<void> {
    const now = new Date();
    const snapshot = changed.map((r) => ({ row: r, version: r.version, values: valuesOf(r, now) }));
    try {
      for (let i = 0; i < snapshot.length; i += MAX_ROWS_PER_STATEMENT) {
        await this.upsert(snapshot.slice(i, i + MAX_ROWS_PER_STATEMENT).map((s) => s.values));
      }
      if (this.failing) this.log.info({ sessions: changed.length }, 'session counters written again');
      this.failing = false;
      for (const s of snapshot) this.written(s.row, s.version);
    } catch (err) {
      if (isDataError(err)) {
        // One bad row (say its user was deleted) must not hold every other row back forever.
        for (const s of snapshot) {
          try {
            await this.upsert([s.values]);
            this.written(s.row, s.version);
          } catch (e) {
            if (!isDataError(e)) return this.outage(e);
            this.log.error({ err: e, session: s.row.id }, 'session row rejected by the database; dropping it');
            this.rows.delete(s.row.id);
          }
        }
        return;
      }
      this.outage(err);
    }
  }

  private outage(err: unknown): void {
    if (!this.failing) this.log.warn({ err: (err as Error).message }, 'cannot write session counters; keeping them until the database answers');
    this.failing = true;
  }

  private written(r: Row, version: number): void {
    r.flushedVersion = version;
    if (r.disconnectedAt && r.version === version) this.rows.delete(r.id);
  }

  private async upsert(values: SessionTotals[]): Promise<void> {
    await upsertSessionTotals(this.sql, values);
  }

  /** Shutdown: every live session ends now; write until done or `timeoutMs` passed. */
  async stop(timeoutMs = 5_000): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    const now = new Date();
    for (const r of this.rows.values()) this.close(r.id, now);
    const deadline = Date.now() + timeoutMs;
    while (this.pending() > 0 && Date.now() < deadline) {
      await this.flush();
      if (this.pending() > 0) await new Promise((r) => setTimeout(r, 200));
    }
    if (this.pending() > 0) this.log.error({ sessions: this.pending() }, 'session counters could not be written before shutdown');
  }

  /** Sessions held: live ones, and ended ones not yet written. */
  get size(): number {
    return this.rows.size;
  }

  pending(): number {
    let n = 0;
    for (const r of this.rows.values()) if (r.version !== r.flushedVersion) n++;
    return n;
  }
}

function valuesOf(r: Row, now: Date): SessionTotals {
  return {
    id: r.id,
    user_id: r.userId,
    tunnel_id: r.tunnelId,
    tunnel_type: r.tunnelType,
    team_id: r.teamId,
    client_ip: r.clientIp,
    node_id: r.nodeId ?? null,
    connected_at: r.connectedAt,
    disconnected_at: r.disconnectedAt,
    last_flush_at: now,
    bytes_in: r.bytesIn,
    bytes_out: r.bytesOut,
    requests: r.requests,
  };
}

/** Integrity / data errors (SQLSTATE classes 22, 23): the row is at fault, not the connection. */
function isDataError(err: unknown): boolean {
  const code = (err as { code?: string })?.code;
  return typeof code === 'string' && /^2[23]/.test(code);
}
