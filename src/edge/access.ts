import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type net from 'node:net';
import type { ProblemCode } from '../errors.js';
import { type AccessRules, type AccessWire } from '../protocol/access.js';
import { CidrSet, addressGroup } from '../protocol/cidr.js';
import { countAccessRefusal, countHttpAnswer, type VisitorProtocol } from './metrics.js';

// Access rules at the edge: checked where the visitor arrives, before anything is sent toward
// the tunnel (no Open stream, no mesh message), so a refused visitor never reaches the client.
//
//   Open{access} ─▶ shard of the control connection: hashAccess (credentials → HMAC digests)
//                ─▶ registry (tunnel-admit) ─▶ tunnel-route{access} to EVERY shard ─▶ AccessGate
//   visitor on any shard ─▶ admitHttpVisitor / admitTcpVisitor ─▶ refuse() or on to the tunnel
//
// Every shard holds every tunnel's gate (it arrives with the route), so the check is a local
// lookup wherever the kernel put the visitor, with no round trip to the tunnel's shard.
//
// Credentials: the client sends USER:PASS over the authenticated control connection; the
// shard that receives the Open keeps only HMAC-SHA-256(key, "USER:PASS") under a random
// per-tunnel key, and forgets the password. A slow hash (argon2, scrypt) would cost every
// visitor request milliseconds of CPU, or a cache of verified headers that is a plaintext
// oracle in memory; an HMAC costs about a microsecond. Guessing is bounded instead by
// GuessLimit (per visitor address), and digests are compared with timingSafeEqual, all of
// them every time, so the answer's timing does not tell which user matched.

/**
 * Hashes a client's rules (at Open, once); null when there are none. `tagKey` (a server secret)
 * keys the credentials' tag a pool compares joiners with (AccessWire.credentialsTag).
 */
export function hashAccess(rules: AccessRules | null | undefined, tagKey: Uint8Array): AccessWire | null {
  if (!rules) return null;
  const creds = rules.basicAuth ?? [];
  const key = creds.length > 0 ? randomBytes(32) : null;
  const tag = createHmac('sha256', tagKey).update('burrow credentials tag v1');
  for (const c of [...new Set(creds)].sort()) tag.update('\0').update(c, 'utf8');
  const wire: AccessWire = {
    key,
    digests: key ? creds.map((c) => createHmac('sha256', key).update(c, 'utf8').digest()) : [],
    allowIp: [...(rules.allowIp ?? [])],
    denyIp: [...(rules.denyIp ?? [])],
    expiresAt: rules.expiresAt ?? null,
    credentialsTag: key ? tag.digest() : null,
  };
  return wire.key || wire.allowIp.length || wire.denyIp.length || wire.expiresAt !== null ? wire : null;
}

/** The rules that concern visitors, ready to check (BlockList: v4, v6 and v4-mapped v6). */
export class AccessGate {
  private readonly key: Buffer | null;
  private readonly digests: Buffer[];
  private readonly allow: CidrSet | null;
  private readonly deny: CidrSet | null;

  constructor(wire: AccessWire) {
    this.key = wire.key ? Buffer.from(wire.key) : null;
    this.digests = wire.digests.map((d) => Buffer.from(d));
    this.allow = wire.allowIp.length > 0 ? CidrSet.parse(wire.allowIp) : null;
    this.deny = wire.denyIp.length > 0 ? CidrSet.parse(wire.denyIp) : null;
  }

  /** A gate when `wire` has a visitor rule, else null (no check at all on the hot path). */
  static of(wire: AccessWire | null): AccessGate | null {
    if (!wire || (wire.digests.length === 0 && wire.allowIp.length === 0 && wire.denyIp.length === 0)) return null;
    return new AccessGate(wire);
  }

  get basicAuth(): boolean {
    return this.key !== null;
  }

  /** The rule refusing address `ip`, or null. Deny wins over allow. */
  refusesAddress(ip: string): 'deny_ip' | 'allow_ip' | null {
    if (this.deny?.has(ip)) return 'deny_ip';
    if (this.allow && !this.allow.has(ip)) return 'allow_ip';
    return null;
  }

  /** Whether an Authorization header value carries one of the credentials. */
  authorized(header: string): boolean {
    if (!this.key) return true;
    const m = /^basic[ ]+([A-Za-z0-9+/]+={0,2})[ ]*$/i.exec(header);
    if (!m || header.length > MAX_AUTHORIZATION_CHARS) return false;
    const digest = createHmac('sha256', this.key).update(Buffer.from(m[1]!, 'base64')).digest();
    let ok = false;
    for (const d of this.digests) ok = timingSafeEqual(d, digest) || ok;
    return ok;
  }
}

/** Longer Authorization values cannot hold a credential of the allowed sizes. */
const MAX_AUTHORIZATION_CHARS = 2048;

/** Why a visitor was refused: the label refusals are counted by. */
export type AccessRefusal = 'basic_auth' | 'allow_ip' | 'deny_ip' | 'guess_limit';

/** The answer an HTTP visitor gets for each refusal (counted with the other visitor answers). */
const REFUSAL_STATUS: Record<AccessRefusal, number> = { basic_auth: 401, guess_limit: 429, allow_ip: 403, deny_ip: 403 };

/** Every refused visitor, HTTP or TCP, passes here once: the place to count refusals (GET /metrics). */
function refuse(type: 'http' | 'tcp', rule: AccessRefusal, protocol?: VisitorProtocol): void {
  countAccessRefusal(rule === 'allow_ip' || rule === 'deny_ip' ? 'ip' : 'basic_auth');
  if (type === 'http') countHttpAnswer(REFUSAL_STATUS[rule], protocol);
}

/**
 * Failed credential guesses per visitor address, per shard: past GUESS_LIMIT failures in
 * GUESS_WINDOW_MS an address gets 429 until its window ends, so a password is not guessed
 * at the speed of HTTP requests. Bounded: the oldest addresses are forgotten first.
 */
class GuessLimit {
  private readonly failures = new Map<string, { count: number; until: number }>();
  /** Seconds `ip` must wait (0: it may guess). IPv6 addresses count by /64: one host has a whole /64. */
  blocked(ip: string, now: number): number {
    const key = addressGroup(ip);
    const f = this.failures.get(key);
    if (!f) return 0;
    if (f.until <= now) {
      this.failures.delete(key);
      return 0;
    }
    return f.count >= GUESS_LIMIT ? Math.ceil((f.until - now) / 1000) : 0;
  }
  fail(ip: string, now: number): void {
    const key = addressGroup(ip);
    const f = this.failures.get(key);
    if (f && f.until > now) f.count++;
    else {
      this.failures.delete(key);
      if (this.failures.size >= GUESS_TRACKED) this.failures.delete(this.failures.keys().next().value!);
      this.failures.set(key, { count: 1, until: now + GUESS_WINDOW_MS });
    }
  }
}
export const GUESS_LIMIT = 20;
const GUESS_WINDOW_MS = 60_000;
const GUESS_TRACKED = 10_000;
const guesses = new GuessLimit();

const CHALLENGE = { 'www-authenticate': 'Basic realm="burrow"' };

/** An HTTP visitor's verdict: admitted (with basic auth the Authorization header held the
 *  tunnel's password and is not passed on to the client), or refused with the answer to give. */
export type HttpAdmission =
  | { verdict: 'admitted' | 'drop-authorization' }
  | { verdict: 'refused'; code: ProblemCode; detail: string; headers: Record<string, string> };

const ADMITTED: HttpAdmission = { verdict: 'admitted' };
const DROP_AUTHORIZATION: HttpAdmission = { verdict: 'drop-authorization' };

/**
 * Checks a public HTTP request (plain or WebSocket upgrade) of client `ip` against its tunnel's
 * gate before it goes anywhere: 403 address, 401 + challenge credentials, 429 too many wrong
 * guesses. `authorization`: the request's Authorization header ('' when absent); `protocol`: the
 * request's (RequestHead.protocol), for the refusal's count.
 */
export function admitHttpVisitor(gate: AccessGate | null, ip: string, authorization: string, protocol?: VisitorProtocol): HttpAdmission {
  if (!gate) return ADMITTED;
  const rule = gate.refusesAddress(ip);
  if (rule) {
    refuse('http', rule, protocol);
    return { verdict: 'refused', code: 'forbidden', detail: `visitors from ${ip} may not reach this tunnel`, headers: {} };
  }
  if (!gate.basicAuth) return ADMITTED;
  if (authorization === '') {
    refuse('http', 'basic_auth', protocol);
    return { verdict: 'refused', code: 'unauthorized', detail: 'this tunnel needs a user name and password', headers: CHALLENGE };
  }
  const now = Date.now();
  const wait = guesses.blocked(ip, now);
  if (wait > 0) {
    refuse('http', 'guess_limit', protocol);
    return { verdict: 'refused', code: 'too-many-requests', detail: `too many wrong passwords from ${ip}; retry in ${wait} s`, headers: { 'retry-after': String(wait) } };
  }
  if (!gate.authorized(authorization)) {
    guesses.fail(ip, now);
    refuse('http', 'basic_auth', protocol);
    return { verdict: 'refused', code: 'unauthorized', detail: 'wrong user name or password for this tunnel', headers: CHALLENGE };
  }
  return DROP_AUTHORIZATION;
}

/** Checks a public TCP connection's address; a refused one is reset at once (nothing read). */
export function admitTcpVisitor(gate: AccessGate | null, sock: net.Socket): boolean {
  if (!gate) return true;
  // remoteAddress is undefined once the peer is already gone: nothing to admit then.
  const rule = sock.remoteAddress === undefined ? 'deny_ip' : gate.refusesAddress(sock.remoteAddress);
  if (!rule) return true;
  refuse('tcp', rule);
  sock.resetAndDestroy();
  return false;
}
