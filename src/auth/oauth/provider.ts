import * as client from 'openid-client';

// What browser login needs of a provider (GitHub or a generic OpenID Connect one), and the
// openid-client Configuration both build on (explicit endpoints, no discovery).

/** Who the provider says logged in, mapped to burrow's fields. */
export interface Identity {
  /** Stable id at the provider (accounts are keyed by provider + subject). */
  subject: string;
  email: string | null;
  /** Only a verified email may link to an existing user or promote the initial admin. */
  emailVerified: boolean;
  name: string;
  avatarUrl: string | null;
}

export interface AuthorizeParams {
  state: string;
  /** S256 challenge of our own verifier toward the provider (not the CLI's). */
  codeChallenge: string;
  nonce: string | null;
}

export interface CallbackChecks {
  state: string;
  verifier: string;
  nonce: string | null;
}

export interface LoginProvider {
  readonly name: string;
  /** An ID token is expected: a nonce is sent with the authorization request and checked. */
  readonly usesNonce: boolean;
  authorizationUrl(p: AuthorizeParams): URL;
  /**
   * Redeems the callback's code (with our PKCE verifier), validates what comes back and maps it.
   * `callbackUrl` is the public callback URL with the provider's query (its origin and path are
   * the redirect_uri). Throws LoginFailure or an openid-client error.
   */
  identify(callbackUrl: URL, checks: CallbackChecks): Promise<Identity>;
}

/** A login that cannot go on for a reason the user can act on; `message` is shown to them. */
export class LoginFailure extends Error {
  constructor(
    message: string,
    /** OAuth-style error code carried to the CLI (access_denied, server_error, ...). */
    readonly code = 'access_denied',
  ) {
    super(message);
  }
}

/** How long one request to a provider may take (token exchange, userinfo, GitHub API). */
const PROVIDER_TIMEOUT_SECS = 10;

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/**
 * Provider endpoints must be https; plain http is accepted only on loopback (a test provider
 * on this machine), where nothing on the network can read or alter the exchange.
 */
export function checkEndpoint(url: string, what: string): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`${what} must be an absolute URL, got "${url}"`);
  }
  if (u.protocol === 'https:') return u;
  if (u.protocol === 'http:' && LOOPBACK_HOSTS.has(u.hostname)) return u;
  throw new Error(`${what} must be https:// (http:// is accepted only on 127.0.0.1/localhost), got "${url}"`);
}

/** An openid-client Configuration from explicit endpoints; http loopback endpoints allowed (see checkEndpoint). */
export function clientConfiguration(
  server: client.ServerMetadata,
  endpoints: Record<string, string>,
  clientId: string,
  clientSecret: string,
  /** How the secret is sent to the token endpoint; no secret: a public client (PKCE only). */
  secretIn: 'basic' | 'post',
): client.Configuration {
  let insecure = false;
  for (const [what, url] of Object.entries(endpoints)) insecure ||= checkEndpoint(url, what).protocol === 'http:';
  const auth = !clientSecret ? client.None() : secretIn === 'basic' ? client.ClientSecretBasic(clientSecret) : client.ClientSecretPost(clientSecret);
  const config = new client.Configuration(server, clientId, clientSecret || undefined, auth);
  if (insecure) client.allowInsecureRequests(config);
  config.timeout = PROVIDER_TIMEOUT_SECS;
  return config;
}

/** An avatar URL worth keeping: http(s) and of sane length; anything else is dropped. */
export function safeAvatarUrl(v: unknown): string | null {
  if (typeof v !== 'string' || v.length > 2048) return null;
  try {
    const u = new URL(v);
    return u.protocol === 'https:' || u.protocol === 'http:' ? u.toString() : null;
  } catch {
    return null;
  }
}

/** Text fields from a provider are clipped and stripped of control characters before storing. */
export function cleanText(v: unknown, maxLength: number): string | null {
  if (typeof v !== 'string') return null;
  // eslint-disable-next-line no-control-regex
  const s = v.replace(/[\u0000-\u001f\u007f]/g, '').trim().slice(0, maxLength);
  return s === '' ? null : s;
}

/** A plausible email address (the provider vouches for it; this only rejects junk). */
export function cleanEmail(v: unknown): string | null {
  const s = cleanText(v, 320);
  return s && /^[^\s@]+@[^\s@]+$/.test(s) ? s : null;
}
