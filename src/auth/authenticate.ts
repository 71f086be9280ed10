import { addressGroup } from '../protocol/cidr.js';
import type { Sql } from '../db/sql.js';
import { findKeyForAuth, type KeyForAuth } from '../db/api-keys.js';
import type { KeyVerdict, Principal } from '../protocol/messages.js';
import { ApiError } from '../errors.js';
import { keyDigest, keyPrefixOf } from './key-format.js';
import { TICKET_TTL_MS, type TicketBox } from './resume-ticket.js';
import type { Admit, TicketMinter } from '../edge/shard-context.js';

// Per-shard authentication: a key is verified with argon2id once, then served from this
// shard's cache until an invalidation (revoke, deactivate, role change) arrives from main.
// The cache is keyed by SHA-256 of the key: a lookup by digest reveals nothing about how
// close a guess was, and the secret comparison itself is argon2's constant-time verify.
// Every uncached key costs one verification on main, which first admits it against the
// failed-auth limit (per IP and per prefix) and counts the outcome; a key whose row is
// missing or unusable is verified against a dummy hash, so timing does not tell which
// prefixes exist. A control connection that comes back with a resumption ticket for its key
// (resume-ticket.ts) skips the verification: its row is read, and that is all.

export interface AuthDeps {
  sql: Sql;
  /** Main's `verify-key`: `hash` null verifies against the dummy hash. */
  verify(req: { ip: string; prefix: string; hash: string | null; secret: string }): Promise<KeyVerdict>;
  /** A failure main did not see (missing or malformed key, a resumed key no longer usable). */
  reportFailure(ip: string): void;
  tickets: TicketBox;
  /** How long a ticket lives (TICKET_TTL_MS unless a test shortens it). */
  ticketTtlMs?: number;
}

interface CachedKey {
  principal: Principal;
  expiresAtMs: number | null;
}

const MAX_CACHED_KEYS = 50_000;
const MAX_BLOCKED_IPS = 100_000;

function unauthorized(detail: string): ApiError {
  return new ApiError('unauthorized', detail, undefined, { 'www-authenticate': 'Bearer' });
}

function tooMany(what: string, waitS: number): ApiError {
  return new ApiError('too-many-requests', `too many failed authentications ${what}; retry in ${waitS} s`, undefined, {
    'retry-after': String(waitS),
  });
}

// One answer for unknown, expired, revoked and deactivated: nothing to learn from it.
const REJECTED = 'the API key is missing, invalid, expired or revoked, or its user is deactivated';

/** The key of an `Authorization: Bearer <key>` header, or undefined. */
function bearerToken(authorization: string | undefined): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1];
}

function usable(row: KeyForAuth): boolean {
  return !row.revoked_at && !row.deactivated_at && !(row.expires_at && row.expires_at.getTime() <= Date.now());
}

export class Authenticator {
  private readonly cache = new Map<string, CachedKey>();
  private readonly blockedUntil = new Map<string, number>();
  /** Verifications in flight by IP + digest: 64 connections opening with one key cost one argon2 run. */
  private readonly verifying = new Map<string, Promise<Principal | null>>();
  /** Bumped by every invalidation: a verification that raced one is not cached. */
  private epoch = 0;

  constructor(private readonly deps: AuthDeps) {}

  /**
   * `ticket`: a resumption ticket the client was given in Welcome (control connections only).
   * `admit`: asked once the key's row is read, before its verification, whether the key (its
   * prefix existing and usable: `known`) may be verified now; it throws to refuse (the handshake
   * gate, edge/handshake-gate.ts).
   */
  async authenticate(authorization: string | undefined, ip: string, ticket?: string, admit?: Admit): Promise<Principal> {
    const token = bearerToken(authorization);
    const digest = token ? keyDigest(token) : null;
    const hit = digest ? this.cache.get(digest) : undefined;
    if (hit && (hit.expiresAtMs === null || hit.expiresAtMs > Date.now())) return hit.principal;
    if (hit) this.cache.delete(digest!);

    // Blocks are per address group (IPv6: the /64), as main counts them.
    const group = addressGroup(ip);
    const until = this.blockedUntil.get(group);
    if (until !== undefined) {
      const waitS = Math.ceil((until - Date.now()) / 1000);
      if (waitS > 0) throw tooMany(`from ${group === ip ? ip : `${ip} (${group})`}`, waitS);
      this.blockedUntil.delete(group);
    }
    if (!token) return this.fail(ip, authorization ? 'the Authorization header must be "Bearer <API key>"' : 'an Authorization: Bearer <API key> header is required');
    const prefix = keyPrefixOf(token);
    if (!prefix) return this.fail(ip, REJECTED);

    // By IP too: main's verdict (a 429 for this IP) must not answer another client.
    const joinKey = `${ip} ${digest!}`;
    let pending = this.verifying.get(joinKey);
    if (!pending) {
      const resumed = ticket !== undefined && this.deps.tickets.check(ticket, prefix, digest!);
      pending = (resumed ? this.resume(ip, prefix, digest!) : this.verify(ip, prefix, token, digest!, admit)).finally(() => {
        if (this.verifying.get(joinKey) === pending) this.verifying.delete(joinKey);
      });
      this.verifying.set(joinKey, pending);
    }
    const principal = await pending;
    // Main already counted this failure.
    if (!principal) throw unauthorized(REJECTED);
    return principal;
  }

  /** A key whose ticket proved it was verified before: its row is read, not its hash. */
  private async resume(ip: string, prefix: string, digest: string): Promise<Principal | null> {
    const epoch = this.epoch;
    const row = await findKeyForAuth(this.deps.sql, prefix);
    if (!row || !usable(row)) {
      this.deps.reportFailure(ip);
      return null;
    }
    return this.remember(row, digest, epoch);
  }

  /** Reads the key's row and argon2-verifies it; caches and returns the principal, or null. */
  private async verify(ip: string, prefix: string, token: string, digest: string, admit?: Admit): Promise<Principal | null> {
    const epoch = this.epoch;
    const row = await findKeyForAuth(this.deps.sql, prefix);
    const ok = row !== undefined && usable(row);
    admit?.(ok);
    const answer = await this.deps.verify({ ip, prefix, hash: ok ? row.key_hash : null, secret: token });
    switch (answer.verdict) {
      case 'limited':
        throw tooMany(answer.kind === 'ip' ? `from ${ip}` : 'with this key', answer.retryAfterS);
      case 'busy':
        throw new ApiError('unavailable', 'key verification is overloaded; retry shortly', undefined, { 'retry-after': '1' });
      case 'invalid':
        return null;
      case 'valid':
        break;
    }
    if (!ok) return null;
    return this.remember(row, digest, epoch);
  }

  /** Caches the principal of a verified key, unless an invalidation came in since `epoch`. */
  private remember(row: KeyForAuth, digest: string, epoch: number): Principal {
    const principal: Principal = { keyId: row.id, userId: row.user_id, role: row.role, scopes: row.scopes, keyExpiresAtMs: row.expires_at?.getTime() ?? null };
    if (epoch === this.epoch) {
      if (this.cache.size >= MAX_CACHED_KEYS) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(digest, { principal, expiresAtMs: row.expires_at?.getTime() ?? null });
    }
    return principal;
  }

  /**
   * Issues resumption tickets for the key in `authorization` (which authenticated as
   * `principal`), a fresh one each call: Welcome's, then the refreshes of a long-lived
   * connection. It keeps the key's prefix and digest, not the key.
   */
  resumeTickets(authorization: string, principal: Principal): TicketMinter | null {
    const token = bearerToken(authorization);
    const prefix = token ? keyPrefixOf(token) : null;
    if (!token || !prefix) return null;
    const digest = keyDigest(token);
    const ttlMs = this.deps.ticketTtlMs ?? TICKET_TTL_MS;
    return () => {
      const untilMs = Math.min(Date.now() + ttlMs, principal.keyExpiresAtMs ?? Infinity);
      return { ticket: this.deps.tickets.issue(prefix, digest, untilMs), untilMs };
    };
  }

  /**
   * True when authenticating this header costs no new argon2 verification: the key is cached,
   * or a verification of it for this address is under way (the request would join it), or the
   * address is blocked (answered 429 at once). What a reconnect storm sheds first is the rest
   * (edge/handshake-gate.ts).
   */
  isCheap(authorization: string | undefined, ip: string, ticket?: string): boolean {
    const until = this.blockedUntil.get(addressGroup(ip));
    if (until !== undefined && until > Date.now()) return true;
    const token = bearerToken(authorization);
    if (!token) return false;
    const digest = keyDigest(token);
    const prefix = keyPrefixOf(token);
    if (ticket !== undefined && prefix && this.deps.tickets.check(ticket, prefix, digest)) return true;
    const hit = this.cache.get(digest);
    if (hit && (hit.expiresAtMs === null || hit.expiresAtMs > Date.now())) return true;
    return this.verifying.has(`${ip} ${digest}`);
  }

  /** Drops cached keys by key id or user id. Synchronous: done when it returns. */
  invalidate(keyIds: readonly string[], userIds: readonly string[]): void {
    this.epoch++;
    // A request arriving after this must not join a verification that read the row before.
    this.verifying.clear();
    const keys = new Set(keyIds);
    const users = new Set(userIds);
    for (const [digest, c] of this.cache) {
      if (keys.has(c.principal.keyId) || users.has(c.principal.userId)) this.cache.delete(digest);
    }
  }

  block(ip: string, untilMs: number): void {
    if (this.blockedUntil.size >= MAX_BLOCKED_IPS) this.blockedUntil.clear();
    this.blockedUntil.set(ip, untilMs);
  }

  private fail(ip: string, detail: string): never {
    this.deps.reportFailure(ip);
    throw unauthorized(detail);
  }
}
