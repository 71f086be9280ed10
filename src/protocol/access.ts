import { parseCidr } from './cidr.js';

export { parseCidr };

// Access rules of one tunnel, as the client asks for them (`burrow http|tcp --basic-auth
// --allow-ip --deny-ip --expires`, or a tunnel entry of burrow.yml) and as the Open frame
// carries them. The edge turns them into an AccessGate (src/edge/access.ts): credentials are
// hashed there at once and never stored, logged or returned in clear.

/** What a client asks for; every field optional (absent = no such rule). */
export interface AccessRules {
  /** "USER:PASS" credentials a visitor may present (HTTP Basic); http tunnels only. */
  basicAuth?: string[];
  /** CIDRs (or single addresses) a visitor must come from; empty or absent = anyone. */
  allowIp?: string[];
  /** CIDRs (or single addresses) refused; deny wins over allow. */
  denyIp?: string[];
  /** When the tunnel ends (Unix epoch milliseconds); absent or null = never. */
  expiresAt?: number | null;
}

/** Credentials per tunnel (a handful of people; more belongs in a real identity provider). */
export const MAX_BASIC_AUTH = 16;
/** User name characters (RFC 7617: no colon). */
export const MAX_USER_CHARS = 128;
/** Password characters. */
export const MAX_PASSWORD_CHARS = 256;
/** CIDRs per list. */
export const MAX_CIDRS = 64;
/** The longest a CIDR can be written (a full IPv6 address with an IPv4 tail and /128). */
/** An expiry later than this from now is refused (a typo, not a plan). */
export const MAX_EXPIRY_MS = 366 * 24 * 3600 * 1000;

// Visible ASCII and spaces except ":" in the user; any visible character in the password.
// No control characters: they would not survive a browser prompt or a header.
const USER_RE = /^[^\x00-\x1f\x7f:]+$/;
const PASSWORD_RE = /^[^\x00-\x1f\x7f]+$/;

/** Why `cred` is not a valid "USER:PASS" (never echoes the password), or null. */
export function basicAuthProblem(cred: string): string | null {
  const colon = cred.indexOf(':');
  if (colon < 0) return 'a credential must be USER:PASS';
  const user = cred.slice(0, colon);
  const password = cred.slice(colon + 1);
  if (user.length === 0 || user.length > MAX_USER_CHARS || !USER_RE.test(user)) {
    return `the user of a credential must be 1-${MAX_USER_CHARS} characters without ":" or control characters`;
  }
  if (password.length === 0 || password.length > MAX_PASSWORD_CHARS || !PASSWORD_RE.test(password)) {
    return `the password for user "${user}" must be 1-${MAX_PASSWORD_CHARS} characters without control characters`;
  }
  return null;
}

/** The public view of a tunnel's rules (`access` in GET /api/v1/tunnels): never a credential. */
export interface AccessView {
  basic_auth: boolean;
  allow_ip: string[];
  deny_ip: string[];
  /** ISO 8601, or null */
  expires_at: string | null;
}

/** The rules as they travel between threads, credentials already hashed (made at Open by
 *  hashAccess in src/edge/access.ts; the password itself never leaves that shard's Open handler). */
export interface AccessWire {
  /** HMAC key of this tunnel's digests (null: no basic auth) */
  key: Uint8Array | null;
  /** HMAC-SHA-256(key, "USER:PASS") per credential */
  digests: Uint8Array[];
  allowIp: string[];
  denyIp: string[];
  /** epoch ms, or null */
  expiresAt: number | null;
  /**
   * HMAC-SHA-256 under a server secret of the credentials as a set (null or absent: no basic
   * auth): the same for the same credentials in any Open, so a pool can tell whether a joining
   * client asks for the pool's credentials without anyone keeping a password.
   */
  credentialsTag?: Uint8Array | null;
}

/** How far apart two `--expires` of one pool may be: clients started with `--expires 1h` a few seconds apart agree. */
export const POOL_EXPIRY_SLACK_MS = 60_000;

/**
 * Why a client asking for `asked` may not join a pool serving under `inForce`, or null when the
 * rules agree. Names the rules in force, never a credential: a member serves under the pool's
 * rules, so one that asked for others would print rules nobody applies.
 */
export function poolRulesProblem(inForce: AccessWire | null, asked: AccessWire | null): string | null {
  const tag = (a: AccessWire | null): string => (a?.credentialsTag ? Buffer.from(a.credentialsTag).toString('base64') : '');
  const cidrs = (l: string[] | undefined): string => [...new Set(l ?? [])].sort().join(', ');
  const differ: string[] = [];
  if (tag(inForce) !== tag(asked)) differ.push(`basic auth differs (the pool has ${inForce?.credentialsTag ? 'basic auth' : 'none'})`);
  for (const [flag, a, b] of [['allow-ip', inForce?.allowIp, asked?.allowIp], ['deny-ip', inForce?.denyIp, asked?.denyIp]] as const) {
    if (cidrs(a) !== cidrs(b)) differ.push(`${flag} differs (the pool's: ${cidrs(a) || 'none'})`);
  }
  const poolExpiry = inForce?.expiresAt ?? null;
  const askedExpiry = asked?.expiresAt ?? null;
  if ((poolExpiry === null) !== (askedExpiry === null) || (poolExpiry !== null && askedExpiry !== null && Math.abs(poolExpiry - askedExpiry) > POOL_EXPIRY_SLACK_MS)) {
    differ.push(`expiry differs (the pool's: ${poolExpiry === null ? 'none' : new Date(poolExpiry).toISOString()})`);
  }
  return differ.length === 0 ? null : differ.join('; ');
}

/** The `access` field of the API's tunnel view: whether there is basic auth, never what. */
export function accessView(wire: AccessWire | null): AccessView {
  return {
    basic_auth: wire !== null && wire.digests.length > 0,
    allow_ip: wire ? [...wire.allowIp] : [],
    deny_ip: wire ? [...wire.denyIp] : [],
    expires_at: wire?.expiresAt != null ? new Date(wire.expiresAt).toISOString() : null,
  };
}

/** Why `expiresAt` cannot be a tunnel's expiry at `now` (past, over a year away), or null. */
export function expiryProblem(expiresAt: number, now = Date.now()): string | null {
  if (expiresAt <= now) return `the expiry ${new Date(expiresAt).toISOString()} is in the past`;
  if (expiresAt - now > MAX_EXPIRY_MS) return `the expiry ${new Date(expiresAt).toISOString()} is more than a year away`;
  return null;
}

/**
 * Why `rules` cannot be applied to a `type` tunnel at `now`, or null: the checks a value
 * passing the frame's syntax checks can still fail (both the CLI, as a usage error, and the
 * edge, as a bad-request refusal, run them).
 */
export function accessRulesProblem(rules: AccessRules, type: 'http' | 'tcp', now = Date.now()): string | null {
  if (type === 'tcp' && rules.basicAuth && rules.basicAuth.length > 0) return 'basic auth applies to http tunnels only';
  if (rules.expiresAt !== undefined && rules.expiresAt !== null) return expiryProblem(rules.expiresAt, now);
  return null;
}
