import { createHash, randomBytes } from 'node:crypto';

// Key = "bk_" + 12 base62 (public id, stored as key_prefix, used to find the row)
//        + "_" + 43 base62 (32 random bytes: the secret; only an argon2id hash is kept).
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const ID_CHARS = 12;
const SECRET_BYTES = 32;
const SECRET_CHARS = 43; // ceil(256 / log2(62))
const KEY_RE = /^(bk_[0-9A-Za-z]{12})_([0-9A-Za-z]{43})$/;

function base62(bytes: Buffer, chars: number): string {
  let n = BigInt('0x' + bytes.toString('hex'));
  let out = '';
  for (let i = 0; i < chars; i++) {
    out = ALPHABET[Number(n % 62n)]! + out;
    n /= 62n;
  }
  return out;
}

export interface GeneratedKey {
  key: string;
  prefix: string;
}

export function generateKey(): GeneratedKey {
  // 9 random bytes give 72 bits for the 12-char id: collisions are not a practical concern
  // and the unique index catches one anyway.
  const prefix = 'bk_' + base62(randomBytes(9), ID_CHARS);
  return { key: `${prefix}_${base62(randomBytes(SECRET_BYTES), SECRET_CHARS)}`, prefix };
}

/** The public prefix of a well-formed key, or null. */
export function keyPrefixOf(key: string): string | null {
  return KEY_RE.exec(key)?.[1] ?? null;
}

/** Cache key: SHA-256 of the whole key, so the plaintext is never held in the cache. */
export function keyDigest(key: string): string {
  return createHash('sha256').update(key).digest('base64url');
}
