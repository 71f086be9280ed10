import type { Sql } from '../db/sql.js';
import type { Logger } from '../log.js';
import type { DnsServer } from './dns-wait.js';
import { domainsWithoutCertificate, pendingDomains, recordCheck } from '../db/custom-domains.js';
import { checkOwnership } from './ownership.js';

// Every minute, on each node (the work is idempotent; the advisory lock keeps orders single):
// pending custom domains have their ownership checked, and verified ones without a certificate
// (just verified here or on another node, or a failed order) are handed to the manager.

const EVERY_MS = 60_000;
/** Domains looked at per round: a flood of additions is worked through over several minutes. */
const BATCH = 50;

export interface DomainWatchOptions {
  sql: Sql;
  log: Logger;
  tunnelDomain: string;
  resolvers: DnsServer[] | null;
  /** A domain became verified here: route it on every shard. */
  verified(name: string): Promise<void>;
  /** A verified domain needs its certificate (null: no ACME on this server). */
  issue: ((name: string) => Promise<unknown>) | null;
  everyMs?: number;
}

export class DomainWatch {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  /** Names whose order failed, and when to try again (the manager's own backoff covers renewals). */
  private readonly retryAt = new Map<string, number>();

  constructor(private readonly opts: DomainWatchOptions) {}

  start(): void {
    this.timer = setInterval(() => void this.round(), this.opts.everyMs ?? EVERY_MS);
    this.timer.unref();
    void this.round();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  /** One pass; concurrent calls share it. */
  round(): Promise<void> {
    this.running ??= this.pass()
      .catch((err: unknown) => this.opts.log.warn({ err }, 'custom domains: the background check failed'))
      .finally(() => (this.running = null));
    return this.running;
  }

  private async pass(): Promise<void> {
    for (const d of await pendingDomains(this.opts.sql, BATCH)) {
      const why = await checkOwnership(d.name, d.token, `${d.tunnel}.${this.opts.tunnelDomain}`, this.opts.resolvers);
      await recordCheck(this.opts.sql, d.name, why);
      if (why === null) {
        this.opts.log.info({ domain: d.name }, 'custom domain verified by the background check');
        await this.opts.verified(d.name);
      }
    }
    if (!this.opts.issue) return;
    for (const d of await domainsWithoutCertificate(this.opts.sql, BATCH)) {
      if ((this.retryAt.get(d.name) ?? 0) > Date.now()) continue;
      await this.opts.issue(d.name).then(
        () => this.retryAt.delete(d.name),
        // Logged by the manager; an hour before this round tries the name again.
        () => this.retryAt.set(d.name, Date.now() + 3600_000),
      );
    }
  }
}
