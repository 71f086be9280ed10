import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

// The random values and hashes of browser login. Everything that travels through a browser
// (state, binding cookie, one-time code) is 32 random bytes and stored only as its SHA-256.

/** 32 random bytes, base64url (43 chars): unguessable, URL-safe. */
export function randomToken(): string {
  return randomBytes(32).toString('base64url');
}

export function sha256Hex(value: string): string {
  return createHash('sha256').update(value, 'utf8').digest('hex');
}

/** RFC 7636 S256: base64url(sha256(verifier)). */
export function s256(verifier: string): string {
  return createHash('sha256').update(verifier, 'ascii').digest('base64url');
}

/** A CLI's code_challenge: the 43-char base64url of a SHA-256 (S256 is the only method). */
export const CHALLENGE_RE = /^[A-Za-z0-9_-]{43}$/;
/** RFC 7636 §4.1 code_verifier: 43–128 unreserved characters. */
export const VERIFIER_RE = /^[A-Za-z0-9._~-]{43,128}$/;

/** Does `verifier` hash to `challenge`? Compared in constant time. */
export function verifierMatches(verifier: string, challenge: string): boolean {
  if (!VERIFIER_RE.test(verifier) || !CHALLENGE_RE.test(challenge)) return false;
  const a = Buffer.from(s256(verifier));
  const b = Buffer.from(challenge);
  return a.length === b.length && timingSafeEqual(a, b);
}
