import type { Sql } from './sql.js';
import { iso, isoRequired } from './sql.js';
import type { ApiKey } from '../protocol/api-views.js';
import type { Role, Scope } from '../protocol/roles.js';

interface KeyRow {
  id: string;
  name: string;
  key_prefix: string;
  scopes: Scope[];
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
}

export function toApiKey(r: KeyRow): ApiKey {
  return {
    id: r.id,
    name: r.name,
    key_prefix: r.key_prefix,
    scopes: r.scopes,
    created_at: isoRequired(r.created_at),
    expires_at: iso(r.expires_at),
    revoked_at: iso(r.revoked_at),
  };
}

const COLUMNS = 'id, name, key_prefix, scopes, created_at, expires_at, revoked_at';

/** Active and expired keys of a user, newest first; revoked ones are left out. */
export async function listKeys(sql: Sql, userId: string): Promise<ApiKey[]> {
  const rows = await sql<KeyRow[]>`select ${sql.unsafe(COLUMNS)} from api_keys
    where user_id = ${userId} and revoked_at is null order by created_at desc, id desc`;
  return rows.map(toApiKey);
}

/** One key of a user, revoked ones included (revoked_at says so); null when it is not theirs. */
export async function getKey(sql: Sql, userId: string, id: string): Promise<ApiKey | null> {
  const [r] = await sql<KeyRow[]>`select ${sql.unsafe(COLUMNS)} from api_keys where id = ${id} and user_id = ${userId}`;
  return r ? toApiKey(r) : null;
}

export interface NewKey {
  userId: string;
  name: string;
  prefix: string;
  hash: string;
  scopes: Scope[];
  expiresAt: Date | null;
}

export async function insertKey(sql: Sql, k: NewKey): Promise<ApiKey> {
  const [r] = await sql<KeyRow[]>`insert into api_keys (user_id, name, key_prefix, key_hash, scopes, expires_at)
    values (${k.userId}, ${k.name}, ${k.prefix}, ${k.hash}, ${sql.array(k.scopes)}, ${k.expiresAt})
    returning ${sql.unsafe(COLUMNS)}`;
  return toApiKey(r!);
}

/** Revokes that user's active key; null when it is not theirs or already revoked. */
export async function revokeKey(sql: Sql, userId: string, id: string): Promise<ApiKey | null> {
  const [r] = await sql<KeyRow[]>`update api_keys set revoked_at = now()
    where id = ${id} and user_id = ${userId} and revoked_at is null returning ${sql.unsafe(COLUMNS)}`;
  return r ? toApiKey(r) : null;
}

/** Revokes the active key of that name (seed and login keys replace their predecessor). */
export async function revokeByName(sql: Sql, userId: string, name: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`update api_keys set revoked_at = now()
    where user_id = ${userId} and name = ${name} and revoked_at is null returning id`;
  return rows.map((r) => r.id);
}

/** A key's name and public prefix, to name it in messages (a takeover names the key that took over). */
export async function keyLabel(sql: Sql, id: string): Promise<{ name: string; key_prefix: string } | null> {
  const [r] = await sql<{ name: string; key_prefix: string }[]>`select name, key_prefix from api_keys where id = ${id}`;
  return r ?? null;
}

/** Which of these keys exist and are not revoked (a cluster node checks `key` notifications against them). */
export async function unrevokedKeys(sql: Sql, ids: readonly string[]): Promise<Set<string>> {
  const rows = await sql<{ id: string }[]>`select id from api_keys where id = any(${ids as string[]}::uuid[]) and revoked_at is null`;
  return new Set(rows.map((r) => r.id));
}

export interface StoredKey {
  id: string;
  userId: string;
  name: string;
  keyHash: string;
  scopes: Scope[];
  expiresAt: Date | null;
  revokedAt: Date | null;
}

/** The row of a key by its public prefix (with its hash, for a caller that verifies it). */
export async function findKeyByPrefix(sql: Sql, prefix: string): Promise<StoredKey | null> {
  const [r] = await sql<(KeyRow & { user_id: string; key_hash: string })[]>`select ${sql.unsafe(COLUMNS)}, user_id, key_hash
    from api_keys where key_prefix = ${prefix}`;
  return r ? { id: r.id, userId: r.user_id, name: r.name, keyHash: r.key_hash, scopes: r.scopes, expiresAt: r.expires_at, revokedAt: r.revoked_at } : null;
}

/** What authentication decides with: the key's row and its user's role and state, by the key's prefix. */
export interface KeyForAuth {
  id: string;
  key_hash: string;
  scopes: Scope[];
  expires_at: Date | null;
  revoked_at: Date | null;
  user_id: string;
  role: Role;
  deactivated_at: Date | null;
}

export async function findKeyForAuth(sql: Sql, prefix: string): Promise<KeyForAuth | undefined> {
  const [row] = await sql<KeyForAuth[]>`select k.id, k.key_hash, k.scopes, k.expires_at, k.revoked_at, u.id as user_id, u.role, u.deactivated_at
      from api_keys k join users u on u.id = k.user_id where k.key_prefix = ${prefix}`;
  return row;
}
