import type { Logger } from '../log.js';
import type { Sql } from '../db/sql.js';
import { closingMembers } from '../db/cluster.js';
import { unrevokedKeys } from '../db/api-keys.js';
import { memberships } from '../db/teams.js';
import { activeUsers } from '../db/users.js';
import type { ClusterEvent, ClusterHint } from './node.js';

// Checks the cluster notifications that would end something before any node acts on them. Any
// role that may connect to the database can NOTIFY the cluster's channel with no grant on any
// table, so a notification is a hint: the change it names is read back (committed by then: the
// triggers notify from the changing transaction), and what clients are told is our own text
// or the reason burrowd wrote on the rows, never the payload's.
//
// Hints are checked in batches (one query per kind for everything waiting, at most BATCH), one
// batch at a time, so a flood (a role sending them in a loop) costs each node a few queries per
// thousand hints and delays a real one by little; the same hint waiting twice is checked once,
// past MAX_QUEUED a hint is dropped, and what was dropped or not borne out is logged once a second.

export type EndingHint = Extract<ClusterHint, { t: 'key' | 'user' | 'member' | 'close' }>;

const MAX_QUEUED = 10_000;
const BATCH = 1_000;
const REPORT_MS = 1_000;

export class HintChecker {
  private readonly queued = new Map<string, EndingHint>();
  private running = false;
  private ignored = 0;
  private dropped = 0;
  private reportTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly sql: Sql,
    private readonly log: Logger,
    /** this node's id: a close concerns only its own members */
    private readonly nodeId: string,
    private readonly confirmed: (e: ClusterEvent) => void,
  ) {}

  /** Queues `hint` for its check; `confirmed` is called with what the database bears out. */
  check(hint: EndingHint): void {
    const key = JSON.stringify(hint);
    if (this.queued.has(key)) return;
    if (this.queued.size >= MAX_QUEUED) {
      this.dropped++;
      return this.report();
    }
    this.queued.set(key, hint);
    this.pump();
  }

  private pump(): void {
    if (this.running || this.queued.size === 0) return;
    const batch: EndingHint[] = [];
    for (const [key, hint] of this.queued) {
      this.queued.delete(key);
      batch.push(hint);
      if (batch.length >= BATCH) break;
    }
    this.running = true;
    void this.confirm(batch)
      .then(
        (events) => {
          const borneOut = events.reduce((n, e) => n + (e.t === 'keys' ? e.ids.length : e.t === 'users' ? e.ended.length + e.changed.length : 1), 0);
          this.ignored += batch.length - borneOut;
          if (borneOut < batch.length) this.report();
          for (const e of events) this.confirmed(e);
        },
        (err: unknown) => this.log.warn({ err, hints: batch.length }, 'cluster: notifications could not be checked against the database; ignored'),
      )
      .finally(() => {
        this.running = false;
        this.pump();
      });
  }

  /** The database's word on each hint: the events to act on (hints it does not bear out are left out). */
  private async confirm(batch: EndingHint[]): Promise<ClusterEvent[]> {
    const of = <T extends EndingHint['t']>(t: T) => batch.filter((h): h is Extract<EndingHint, { t: T }> => h.t === t);
    const [keys, users, members, closes] = [of('key'), of('user'), of('member'), of('close')];
    const [liveKeys, liveUsers, liveMembers, closing] = await Promise.all([
      keys.length > 0 ? unrevokedKeys(this.sql, keys.map((h) => h.id)) : new Set<string>(),
      users.length > 0 ? activeUsers(this.sql, users.map((h) => h.id)) : new Set<string>(),
      members.length > 0 ? memberships(this.sql, members) : new Set<string>(),
      closes.length > 0 ? closingMembers(this.sql, closes.map((h) => h.id), this.nodeId) : new Map<string, { sessionId: string; reason: string }[]>(),
    ]);
    const out: ClusterEvent[] = [];
    // Revoked or deleted: a key still usable ends nothing. One event for the batch: one
    // invalidation round to the shards however many hints came.
    const revoked = [...new Set(keys.filter((h) => !liveKeys.has(h.id)).map((h) => h.id))];
    if (revoked.length > 0) out.push({ t: 'keys', ids: revoked });
    // Deactivated or deleted ends the user's connections; anything else (a role change) only
    // empties the caches, whatever the payload's `end` said.
    const ended = [...new Set(users.filter((h) => !liveUsers.has(h.id)).map((h) => h.id))];
    const changed = [...new Set(users.filter((h) => liveUsers.has(h.id)).map((h) => h.id))];
    if (ended.length + changed.length > 0) out.push({ t: 'users', ended, changed });
    for (const h of members) if (!liveMembers.has(`${h.team} ${h.user}`)) out.push(h);
    for (const h of closes) {
      const m = closing.get(h.id);
      if (m) out.push({ t: 'close', id: h.id, members: m });
    }
    return out;
  }

  private report(): void {
    if (this.reportTimer) return;
    this.reportTimer = setTimeout(() => {
      this.reportTimer = null;
      if (this.ignored + this.dropped > 0) {
        this.log.warn({ ignored: this.ignored, dropped: this.dropped }, 'cluster: notifications the database does not bear out were ignored (sent by a role other than burrowd? see docs/operations.md)');
      }
      this.ignored = 0;
      this.dropped = 0;
    }, REPORT_MS);
    this.reportTimer.unref();
  }

  stop(): void {
    if (this.reportTimer) clearTimeout(this.reportTimer);
    this.queued.clear();
  }
}
