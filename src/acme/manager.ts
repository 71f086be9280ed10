import type { Dispatcher } from 'undici';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { AcmeConfig } from '../config.js';
import type { Sql } from '../db/sql.js';
import type { Logger } from '../log.js';
import { AcmeClient, type Directory } from './client.js';
import { ariCertId, leaf, validity } from './cert-id.js';
import { DnsSolver } from './dns-solver.js';
import { newAccountKeyPem } from './jws.js';
import { obtain, type Solver } from './order.js';
import { registeredDomain } from './public-suffix.js';
import { LongTimer, fittingWindow, renewAt, retryDelayMs, type Window } from './renewal.js';
import { AcmeStore, type StoredCert } from '../db/acme.js';
import { HttpSolver } from './http-solver.js';
import { domain as customDomainRow } from '../db/custom-domains.js';

// The main thread's certificates (one per node; every node runs one on the shared database):
//
//   start ─▶ account ─▶ LISTEN burrow_certs_<schema> ─▶ ensure(<domain>, *.<domain>) by DNS-01
//   ensure(name) ─▶ [in-process queue per name] ─▶ pg_advisory_lock(name) ─▶ row still fresh? done
//                 ─▶ rate bounds ─▶ order (obtain) ─▶ row saved ─▶ trigger NOTIFYs every node
//   NOTIFY(name) ─▶ row read ─▶ renewal timer ─▶ shards reload (onChange)
//
// Every node keeps a renewal timer per certificate; when they fire together the lock lets one
// order and the others find the fresh row when they get it.

const LOCK_NAMESPACE = 0x61636d65; // "acme"
/** Let's Encrypt's certificates per registered domain per week; we stay at it or below. */
export const ORDERS_PER_REGISTERED_DOMAIN_PER_WEEK = 50;
/** Orders for one user's custom domains per week: past it no new certificate is ordered for them (renewals go on). */
export const ORDERS_PER_USER_PER_WEEK = 20;

export interface ManagerOptions {
  sql: Sql;
  log: Logger;
  acme: AcmeConfig;
  /** The tunnel domain: its certificate covers it and *.<domain>. */
  domain: string;
  /** Without a DNS hook: where the record to create is printed (stdout). */
  say: (text: string) => void;
  /** A certificate was added or replaced: the shards read them again. */
  onChange: () => Promise<void>;
  registry?: Registry;
  /** Tests: trust the test CA's directory certificate; poll DNS faster. */
  dispatcher?: Dispatcher;
  dnsPollMs?: number;
}

export class CertManager {
  readonly store: AcmeStore;
  private client: AcmeClient | null = null;
  private readonly timers = new Map<string, LongTimer>();
  private readonly queues = new Map<string, Promise<unknown>>();
  private readonly solvers = new Map<string, Solver>();
  private readonly http: HttpSolver;
  private listening: { unlisten(): Promise<void> } | null = null;
  private stopped = false;
  private readonly known = new Map<string, StoredCert>();
  private readonly failures: Counter<'name'> | null;
  private readonly overdue = new Set<string>();
  /** Names whose first order failed: how often, and not before when to try again. */
  private readonly firstFailures = new Map<string, { n: number; until: number }>();

  constructor(private readonly opts: ManagerOptions) {
    this.store = new AcmeStore(opts.sql);
    this.http = new HttpSolver(this.store, opts.log);
    const registers = opts.registry ? [opts.registry] : [];
    this.failures = opts.registry ? new Counter({ name: 'burrow_cert_renewal_failures_total', help: 'Failed ACME orders (first issuance or renewal), by certificate name.', labelNames: ['name'], registers }) : null;
    if (opts.registry) {
      const known = this.known;
      const overdue = this.overdue;
      new Gauge({
        name: 'burrow_cert_expiry_seconds',
        help: 'Seconds until each ACME certificate expires (negative: expired).',
        labelNames: ['name'],
        registers,
        collect() {
          this.reset();
          for (const c of known.values()) this.set({ name: c.name }, Math.round((c.notAfter.getTime() - Date.now()) / 1000));
        },
      });
      new Gauge({
        name: 'burrow_cert_renewal_overdue',
        help: '1 for a certificate past its renewal point whose renewals are failing: alert on it.',
        labelNames: ['name'],
        registers,
        collect() {
          this.reset();
          for (const c of known.values()) this.set({ name: c.name }, overdue.has(c.name) ? 1 : 0);
        },
      });
    }
  }

  /** LISTEN, and the certificates already stored (each with its renewal timer). */
  async start(): Promise<void> {
    const [row] = await this.opts.sql<{ s: string }[]>`select current_schema() as s`;
    this.listening = await this.opts.sql.listen(`burrow_certs_${row!.s}`, (name) => void this.reloaded(name).catch((err: unknown) => this.opts.log.warn({ err, name }, 'ACME: could not read a certificate another node stored')));
    for (const c of await this.store.certificates()) this.track(c);
    const wildcard = new DnsSolver({ hook: this.opts.acme.dnsHook, resolvers: this.opts.acme.resolvers, log: this.opts.log, say: this.opts.say, pollMs: this.opts.dnsPollMs });
    this.solvers.set(this.opts.domain, wildcard);
  }

  /** The tunnel domain's certificate (<domain> and *.<domain>, by DNS-01): stored, or ordered now. */
  wildcard(): Promise<StoredCert> {
    return this.ensure(this.opts.domain, [this.opts.domain, `*.${this.opts.domain}`]);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers.values()) t.cancel();
    this.timers.clear();
    await this.listening?.unlisten().catch(() => undefined);
  }

  certificates(): StoredCert[] {
    return [...this.known.values()];
  }

  /**
   * A custom domain's certificate by HTTP-01: only once its ownership is verified, and within
   * the user's weekly bound. Null when it may not be issued (not verified, removed).
   */
  async customDomain(name: string): Promise<StoredCert | null> {
    // A first order that failed waits out its backoff, however often visitors ask for the name.
    const failed = this.firstFailures.get(name);
    if (failed && failed.until > Date.now()) return null;
    const d = await customDomainRow(this.opts.sql, name);
    if (!d || !d.verified_at) return null;
    const stored = this.known.get(name);
    if (!stored && (await this.store.ordersThisWeek({ userId: d.user_id })) >= ORDERS_PER_USER_PER_WEEK) {
      throw new Error(`the user who added ${name} had ${ORDERS_PER_USER_PER_WEEK} certificates ordered this week, the most one user gets`);
    }
    return this.ensure(name, [name], d.user_id);
  }

  /** The certificate of `name` for `names`: the stored one while it is fresh, else a new order. Throws when the order fails. */
  ensure(name: string, names: string[], userId: string | null = null): Promise<StoredCert> {
    // One attempt per name at a time in this process; the advisory lock does it across nodes.
    const prev = this.queues.get(name) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(() => this.ensureLocked(name, names, userId));
    this.queues.set(name, next);
    void next.finally(() => {
      if (this.queues.get(name) === next) this.queues.delete(name);
    }).catch(() => undefined);
    return next;
  }

  private async ensureLocked(name: string, names: string[], userId: string | null): Promise<StoredCert> {
    const conn = await this.opts.sql.reserve();
    try {
      await conn`select pg_advisory_lock(${LOCK_NAMESPACE}, hashtext(${name}))`;
      try {
        const stored = await this.store.certificate(name);
        if (stored && sameNames(stored.names, names) && Date.now() < (await this.freshUntil(stored)).getTime()) {
          // Maybe just stored by another node, its NOTIFY not yet here: the shards load it now.
          await this.adopt(stored);
          return stored;
        }
        return await this.order(name, names, userId, stored);
      } finally {
        await conn`select pg_advisory_unlock(${LOCK_NAMESPACE}, hashtext(${name}))`;
      }
    } finally {
      conn.release();
    }
  }

  private async order(name: string, names: string[], userId: string | null, previous: StoredCert | null): Promise<StoredCert> {
    const solver = this.solvers.get(name) ?? this.http;
    if (solver === this.http && !(await customDomainRow(this.opts.sql, name))?.verified_at) throw new Error(`${name} is not a verified custom domain: not ordering a certificate for it`);
    const domain = registeredDomain(name);
    if ((await this.store.ordersThisWeek({ registeredDomain: domain })) >= ORDERS_PER_REGISTERED_DOMAIN_PER_WEEK) {
      throw new Error(`${ORDERS_PER_REGISTERED_DOMAIN_PER_WEEK} certificates were ordered for ${domain} this week (the CA's limit): not ordering ${name} again before the oldest is a week old`);
    }
    const log = this.opts.log.child({ certificate: name });
    log.info({ names, renewal: previous !== null }, 'ACME: ordering a certificate');
    try {
      const client = await this.accountClient();
      await this.store.recordOrder(name, domain, userId);
      const issued = await obtain(client, names, solver, previous?.ariId ?? null);
      const cert = leaf(issued.certPem);
      const { notBefore, notAfter } = validity(cert);
      const saved: StoredCert = { name, names, certPem: issued.certPem, keyPem: issued.keyPem, notBefore, notAfter, ariId: ariCertId(cert), failures: 0 };
      await this.store.saveCertificate(saved);
      log.info({ notAfter: notAfter.toISOString(), serial: cert.serialNumber }, 'ACME: certificate issued');
      this.overdue.delete(name);
      this.firstFailures.delete(name);
      this.track(saved);
      await this.opts.onChange();
      return saved;
    } catch (err) {
      const message = (err as Error).message;
      log.error({ err: message }, 'ACME: the order failed');
      this.failures?.inc({ name });
      if (!previous) {
        const n = (this.firstFailures.get(name)?.n ?? 0) + 1;
        this.firstFailures.set(name, { n, until: Date.now() + retryDelayMs(n, new Date(8.64e15)) });
      } else {
        await this.store.recordFailure(name, message).catch(() => undefined);
        previous.failures++;
        if (Date.now() >= (await this.freshUntil(previous)).getTime()) this.overdue.add(name);
        this.scheduleRetry(previous);
      }
      throw err;
    }
  }

  /** The client of this node's account key (made and stored on first use), registered or not. */
  private async directoryClient(): Promise<AcmeClient> {
    if (this.client) return this.client;
    const dirUrl = this.opts.acme.directoryUrl;
    const stored = (await this.store.account(dirUrl)) ?? { keyPem: await this.store.saveAccountKey(dirUrl, newAccountKeyPem()), accountUrl: null };
    this.client = new AcmeClient({ directoryUrl: dirUrl, accountKeyPem: stored.keyPem, accountUrl: stored.accountUrl, ...(this.opts.dispatcher ? { dispatcher: this.opts.dispatcher } : {}) });
    return this.client;
  }

  private async accountClient(): Promise<AcmeClient> {
    const client = await this.directoryClient();
    if (client.accountUrl) return client;
    const dir: Directory = await client.directory();
    if (dir.meta?.externalAccountRequired && !this.opts.acme.eab) throw new Error(`the CA ${this.opts.acme.directoryUrl} requires external account binding: give --acme-eab-kid and --acme-eab-hmac`);
    await this.store.saveAccountUrl(this.opts.acme.directoryUrl, await client.register(this.opts.acme.email, this.opts.acme.eab));
    return client;
  }

  /** The CA's suggested renewal window (RFC 9773), or null where it offers none. */
  private async window(c: StoredCert): Promise<Window | null> {
    if (!c.ariId) return null;
    try {
      const offered = await (await this.directoryClient()).renewalInfo(c.ariId);
      const ari = fittingWindow(c.notAfter, offered);
      if (offered && !ari) this.opts.log.debug({ certificate: c.name }, 'ACME: the renewal window closes after expiry; the lifetime rule applies');
      return ari;
    } catch (err) {
      this.opts.log.debug({ err: (err as Error).message, certificate: c.name }, 'ACME: no renewal information; the lifetime rule applies');
      return null;
    }
  }

  /** Until when the stored certificate needs no renewal: the ARI window's start, or the lifetime rule. */
  private async freshUntil(c: StoredCert): Promise<Date> {
    return (await this.window(c))?.start ?? renewAt(c.notBefore, c.notAfter, null);
  }

  /** When the timer fires: a random moment of the ARI window, or the lifetime rule. */
  private async renewalPoint(c: StoredCert): Promise<Date> {
    return renewAt(c.notBefore, c.notAfter, await this.window(c));
  }

  /** Another node (or this one) stored `name`: read it, reschedule, and reload the shards. */
  private async reloaded(name: string): Promise<void> {
    // A custom domain verified or removed somewhere: the shards' routes (and certificates) again.
    if (name.startsWith('domain:')) {
      const gone = name.slice('domain:'.length);
      if (!(await this.store.certificate(gone))) this.forget(gone);
      return this.opts.onChange();
    }
    const c = await this.store.certificate(name);
    if (!c || this.stopped) return;
    this.overdue.delete(name);
    await this.adopt(c);
  }

  /** A certificate read from the database: tracked, and the shards reload when it is new to this node. */
  private async adopt(c: StoredCert): Promise<void> {
    const known = this.known.get(c.name);
    this.track(c);
    if (!known || known.certPem !== c.certPem) await this.opts.onChange();
  }

  private forget(name: string): void {
    this.timers.get(name)?.cancel();
    this.timers.delete(name);
    this.known.delete(name);
  }

  private track(c: StoredCert): void {
    this.known.set(c.name, c);
    if (this.stopped) return;
    void this.renewalPoint(c).then((at) => this.arm(c, at));
  }

  private scheduleRetry(c: StoredCert): void {
    this.arm(c, new Date(Date.now() + retryDelayMs(c.failures, c.notAfter)));
  }

  private arm(c: StoredCert, at: Date): void {
    if (this.stopped) return;
    this.timers.get(c.name)?.cancel();
    this.timers.set(
      c.name,
      new LongTimer(at, () => {
        this.timers.delete(c.name);
        (this.solvers.has(c.name) ? this.ensure(c.name, c.names) : this.customDomain(c.name)).catch(() => undefined);
      }),
    );
  }

  /** Tests and metrics: when `name` is next looked at. */
  nextAttempt(name: string): Date | null {
    return this.timers.get(name)?.at ?? null;
  }
}

function sameNames(a: string[], b: string[]): boolean {
  return a.length === b.length && [...a].sort().join(',') === [...b].sort().join(',');
}
