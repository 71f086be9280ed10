import { randomUUID } from 'node:crypto';
import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import { countAffected, leaveCluster, reapDeadNodes, registerNode, renewLease, requestClose, type Affected } from '../db/cluster.js';
import { HintChecker } from './hints.js';

// ClusterNode (main thread, --node-url): this burrowd's membership of the cluster.
//
//   every LEASE_RENEW_MS: renew our lease ─ failing for FENCE_AFTER_MS ─▶ fenced (local tunnels end)
//   every REAP_MS: dead nodes' rows deleted (their tunnels by cascade), sessions closed
//   LISTEN burrow_<schema>: what every node must hear, sent by the changing transaction itself
//     route {id}            a tunnel's members changed (read its rows again)
//     node {id, up}         a node joined or died
//     key / user / member   revocation, deactivation, role change, team removal (triggers, migration 008)
//     close {id}            the API asked for a tunnel's members on other nodes to end (reason on their rows)
//   Any role that may connect can NOTIFY this channel: a notification that would end something
//   is a hint, confirmed by reading the rows again (HintChecker, hints.ts) before anything ends.
//     reservations          an admin changed the reserved ids
//   every RECONCILE_MS (and after the LISTEN connection came back): the directory compares its
//   routes with the database, so a lost notification costs at most that long.
//   awaitGone (a revocation made here): woken by each route/node notification, it counts the
//   rows the revocation affects again, and answers when none is left.
//
// The bound a partitioned node keeps a revoked tunnel alive: it fences itself FENCE_AFTER_MS
// after its last renewal was sent, before its lease (LEASE_MS from that renewal's arrival)
// runs out and the others reap it.

export const LEASE_MS = 3_000;
const LEASE_RENEW_MS = 500;
export const FENCE_AFTER_MS = 2_000;
const REAP_MS = 500;
export const RECONCILE_MS = 5_000;
/** How long an API call waits for the other nodes to end the tunnels a revocation affects: the
 *  lease and a reap pass, after which a node that did not answer is dead and its rows gone. */
export const AWAIT_GONE_MS = LEASE_MS + REAP_MS + 500;
/** A count that failed (the database away) is tried again after this long. */
const AWAIT_RETRY_MS = 100;

/** A notification as sent: a hint of what changed, which anyone who may connect could have sent. */
export type ClusterHint =
  | { t: 'route'; id: string }
  | { t: 'node'; id: string; up: boolean }
  | { t: 'key'; id: string }
  | { t: 'user'; id: string; end: boolean }
  | { t: 'member'; team: string; user: string }
  | { t: 'close'; id: string }
  | { t: 'reservations' };

/**
 * What the handlers act on: a hint confirmed by the database (HintChecker). Hints that end
 * nothing (route, node, reservations) only make a node read again, so they pass as they are.
 */
export type ClusterEvent =
  | Exclude<ClusterHint, { t: 'close' | 'key' | 'user' }>
  | { t: 'close'; id: string; members: { sessionId: string; reason: string }[] }
  /** keys revoked or deleted (the confirmed `key` hints of a batch, at once) */
  | { t: 'keys'; ids: string[] }
  /** users deactivated or deleted (`ended`: their connections end) or otherwise changed (a role: caches only) */
  | { t: 'users'; ended: string[]; changed: string[] };

export interface ClusterHandlers {
  event(e: ClusterEvent): void;
  /** Time to compare routes with the database (periodic, and after a LISTEN reconnect). */
  reconcile(): void;
  /** The lease could not be renewed (database lost, or we were declared dead): end local tunnels. */
  fenced(why: string): void;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const str = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 200;
const uuid = (v: unknown): v is string => typeof v === 'string' && UUID.test(v);

/** A notification's payload as a ClusterHint, or null (anything malformed is ignored). */
export function parseClusterEvent(payload: string): ClusterHint | null {
  let v: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(payload);
    if (!parsed || typeof parsed !== 'object') return null;
    v = parsed as Record<string, unknown>;
  } catch {
    return null;
  }
  switch (v.t) {
    case 'route':
      return str(v.id) ? { t: 'route', id: v.id } : null;
    case 'node':
      return uuid(v.id) && typeof v.up === 'boolean' ? { t: 'node', id: v.id, up: v.up } : null;
    case 'key':
      return uuid(v.id) ? { t: 'key', id: v.id } : null;
    case 'user':
      return uuid(v.id) && typeof v.end === 'boolean' ? { t: 'user', id: v.id, end: v.end } : null;
    case 'member':
      return uuid(v.team) && uuid(v.user) ? { t: 'member', team: v.team, user: v.user } : null;
    case 'close':
      // Whatever else the payload says (a reason, say) is not read: the rows are (HintChecker).
      return str(v.id) ? { t: 'close', id: v.id } : null;
    case 'reservations':
      return { t: 'reservations' };
    default:
      return null;
  }
}

export class ClusterNode {
  readonly id = randomUUID();
  private channel = '';
  private timers: NodeJS.Timeout[] = [];
  /** performance.now() when the last successful renewal was sent */
  private renewedAt = performance.now();
  private fenced = false;
  private stopped = false;
  private listening: { unlisten(): Promise<void> } | null = null;

  constructor(
    private readonly sql: Sql,
    private readonly log: Logger,
    readonly url: string,
    private readonly handlers: ClusterHandlers,
  ) {
    this.hints = new HintChecker(sql, log, this.id, (e) => handlers.event(e));
  }

  private readonly hints: HintChecker;

  /** False while fenced: this node may not admit tunnels (its routes could be stale). */
  get healthy(): boolean {
    return !this.fenced;
  }

  async start(): Promise<void> {
    const [row] = await this.sql<{ s: string }[]>`select current_schema() as s`;
    this.channel = `burrow_${row!.s}`;
    this.listening = await this.sql.listen(
      this.channel,
      (payload) => {
        const hint = parseClusterEvent(payload);
        if (!hint) return this.malformed(payload);
        // Every member row that goes is announced (route: released or taken over; node: reaped).
        if (hint.t === 'route' || hint.t === 'node') this.wakeGone();
        if (hint.t === 'route' || hint.t === 'node' || hint.t === 'reservations') return this.handlers.event(hint);
        this.hints.check(hint);
      },
      // Called again after every reconnect of the LISTEN connection: what was sent meanwhile is lost.
      () => {
        this.wakeGone();
        this.handlers.reconcile();
      },
    );
    const sent = performance.now();
    await registerNode(this.sql, this.id, this.url, LEASE_MS);
    this.renewedAt = sent;
    this.timers.push(
      setInterval(() => void this.renew(), LEASE_RENEW_MS),
      setInterval(() => void this.reap(), REAP_MS),
      setInterval(() => this.handlers.reconcile(), RECONCILE_MS),
    );
    for (const t of this.timers) t.unref();
    this.log.info({ node: this.id, url: this.url }, 'joined the cluster');
  }

  private renewing = false;

  private async renew(): Promise<void> {
    if (this.stopped) return;
    // Checked on the timer, not on the renewal's failure: a frozen link fails nothing, it hangs.
    if (performance.now() - this.renewedAt >= FENCE_AFTER_MS) this.fence('the cluster database did not confirm this node\'s lease in time');
    if (this.renewing) return;
    this.renewing = true;
    const sent = performance.now();
    try {
      const held = await renewLease(this.sql, this.id, LEASE_MS);
      if (!held) {
        // Declared dead (a pause longer than the lease): our tunnels' rows are gone already.
        this.fence('another node declared this one dead (its lease ran out)');
        await registerNode(this.sql, this.id, this.url, LEASE_MS);
      }
      this.renewedAt = sent;
      if (this.fenced) {
        this.fenced = false;
        this.log.warn({ node: this.id }, 'cluster lease held again: admitting tunnels');
        this.handlers.reconcile();
      }
    } catch (err) {
      if (performance.now() - this.renewedAt >= FENCE_AFTER_MS) this.fence(`the cluster database is unreachable (${(err as Error).message})`);
    } finally {
      this.renewing = false;
    }
  }

  private fence(why: string): void {
    if (this.fenced) return;
    this.fenced = true;
    this.log.error({ node: this.id, why }, 'cluster lease lost: ending this node\'s tunnels');
    this.handlers.fenced(why);
  }

  private async reap(): Promise<void> {
    if (this.stopped || this.fenced) return;
    try {
      const dead = await reapDeadNodes(this.sql);
      if (dead.length > 0) this.log.warn({ nodes: dead }, 'cluster: dead nodes reaped (their tunnels and sessions closed)');
    } catch (err) {
      this.log.debug({ err }, 'cluster: reaping failed; next pass');
    }
  }

  /** Malformed notifications are logged once a second at most: anyone who may connect can send them. */
  private malformed(payload: string): void {
    this.malformedCount++;
    const now = Date.now();
    if (now - this.malformedLoggedAt < 1_000) return;
    this.log.warn({ count: this.malformedCount, last: payload.slice(0, 200) }, 'cluster: malformed notifications ignored');
    this.malformedCount = 0;
    this.malformedLoggedAt = now;
  }

  private malformedCount = 0;
  private malformedLoggedAt = 0;

  /** Sends a hint that only makes every node read again (a reservation change). */
  async notify(e: Extract<ClusterHint, { t: 'reservations' }>): Promise<void> {
    await this.sql`select burrow_cluster_notify(${JSON.stringify(e)}::text::jsonb)`;
  }

  /** Ends the members of `id` on other nodes for good (the reason on their rows, then the hint); answers their sessions. */
  requestClose(id: string, reason: string): Promise<string[]> {
    return requestClose(this.sql, id, this.id, reason);
  }

  /** Revocations waiting for members to go: each is woken by every notification that a member row went. */
  private readonly goneWaiters = new Set<() => void>();

  private wakeGone(): void {
    for (const wake of [...this.goneWaiters]) wake();
  }

  /**
   * Waits until no node holds a tunnel the revocation affects. Each node removes its rows as it
   * ends them, and every removal is a notification (`route`; a node that cannot is reaped within
   * the lease: `node`), so the rows are counted again only when one arrives. False when the
   * wait ran out.
   */
  async awaitGone(affected: Affected): Promise<boolean> {
    const until = performance.now() + AWAIT_GONE_MS;
    for (;;) {
      // Listening before counting: a removal announced while the count runs wakes the next wait.
      let wake = (): void => undefined;
      let woken = false;
      const heard = new Promise<void>((resolve) => {
        wake = () => {
          woken = true;
          resolve();
        };
      });
      this.goneWaiters.add(wake);
      try {
        const n = await countAffected(this.sql, affected).catch(() => -1);
        if (n === 0) return true;
        const left = until - performance.now();
        if (left <= 0) {
          this.log.warn({ affected, left: n }, 'cluster: tunnels of a revocation still listed after the wait');
          return false;
        }
        if (!woken) await waitFor(heard, n < 0 ? Math.min(left, AWAIT_RETRY_MS) : left);
      } finally {
        this.goneWaiters.delete(wake);
      }
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wakeGone();
    for (const t of this.timers) clearInterval(t);
    this.hints.stop();
    await this.listening?.unlisten().catch(() => undefined);
    await leaveCluster(this.sql, this.id).catch((err: unknown) => this.log.warn({ err }, 'cluster: could not leave cleanly; the lease will run out'));
  }
}

/** Resolves when `p` does or after `ms`, whichever is first. */
function waitFor(p: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]).finally(() => clearTimeout(timer));
}
