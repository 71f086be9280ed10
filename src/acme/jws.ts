import { createHash, createHmac, createPrivateKey, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';

// The account key and the JSON Web Signatures of RFC 8555 §6.2: ES256 (P-256), the key as a JWK
// on newAccount and by its account URL (kid) afterwards; HS256 for external account binding.

export interface AccountKey {
  key: KeyObject;
  jwk: { crv: string; kty: string; x: string; y: string };
  /** RFC 7638 thumbprint: the key authorization's second half. */
  thumbprint: string;
}

export function newAccountKeyPem(): string {
  return generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
}

export function accountKey(pem: string): AccountKey {
  const key = createPrivateKey(pem);
  const { crv, kty, x, y } = key.export({ format: 'jwk' }) as { crv: string; kty: string; x: string; y: string };
  const jwk = { crv, kty, x, y };
  // Members in lexicographic order, no spaces (RFC 7638 §3).
  const thumbprint = createHash('sha256').update(JSON.stringify(jwk)).digest('base64url');
  return { key, jwk, thumbprint };
}

const b64 = (v: unknown): string => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

export interface Jws {
  protected: string;
  payload: string;
  signature: string;
}

/** A request body: `payload` null is POST-as-GET (an empty payload). */
export function jws(account: AccountKey, header: { nonce: string; url: string; kid?: string }, payload: unknown | null): Jws {
  const prot = b64({ alg: 'ES256', nonce: header.nonce, url: header.url, ...(header.kid ? { kid: header.kid } : { jwk: account.jwk }) });
  const body = payload === null ? '' : b64(payload);
  const signature = sign('sha256', Buffer.from(`${prot}.${body}`), { key: account.key, dsaEncoding: 'ieee-p1363' }).toString('base64url');
  return { protected: prot, payload: body, signature };
}

/** RFC 8555 §7.3.4: the account's JWK signed with the CA-issued MAC key. */
export function externalAccountBinding(account: AccountKey, kid: string, hmacB64url: string, url: string): Jws {
  const prot = b64({ alg: 'HS256', kid, url });
  const payload = b64(account.jwk);
  const signature = createHmac('sha256', Buffer.from(hmacB64url, 'base64url')).update(`${prot}.${payload}`).digest('base64url');
  return { protected: prot, payload, signature };
}

export function keyAuthorization(account: AccountKey, token: string): string {
  return `${token}.${account.thumbprint}`;
}

/** The TXT value of a DNS-01 challenge (RFC 8555 §8.4). */
export function dnsValue(keyAuth: string): string {
  return createHash('sha256').update(keyAuth).digest('base64url');
}
