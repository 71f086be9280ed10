import { nameKey } from '../names.js';
import type { Sql } from './sql.js';
import { iso, isoRequired } from './sql.js';
import type { User } from '../protocol/api-views.js';
import type { Role } from '../protocol/roles.js';
import type { LoginUserRow } from './accounts.js';

interface UserRow {
  id: string;
  email: string;
  name: string;
  avatar_url: string | null;
  role: Role;
  metadata: Record<string, unknown> | null;
  created_at: Date;
  updated_at: Date;
  deactivated_at: Date | null;
}

export function toUser(r: UserRow): User {
  return {
    id: r.id,
    email: r.email,
    name: r.name,
    avatar_url: r.avatar_url,
    role: r.role,
    metadata: r.metadata ?? {},
    created_at: isoRequired(r.created_at),
    updated_at: isoRequired(r.updated_at),
    deactivated_at: iso(r.deactivated_at),
  };
}

export async function getUser(sql: Sql, id: string): Promise<User | null> {
  const [r] = await sql<UserRow[]>`select * from users where id = ${id}`;
  return r ? toUser(r) : null;
}

/** Which of these users exist and are not deactivated (a cluster node checks `user` notifications against them). */
export async function activeUsers(sql: Sql, ids: readonly string[]): Promise<Set<string>> {
  const rows = await sql<{ id: string }[]>`select id from users where id = any(${ids as string[]}::uuid[]) and deactivated_at is null`;
  return new Set(rows.map((r) => r.id));
}

/** Names and emails of these users (tunnel listings show the owner), by id. */
export async function userNames(sql: Sql, ids: readonly string[]): Promise<Map<string, { name: string; email: string }>> {
  if (ids.length === 0) return new Map();
  const rows = await sql<{ id: string; name: string; email: string }[]>`select id, name, email from users where id = any(${sql.array([...ids])}::uuid[])`;
  return new Map(rows.map((r) => [r.id, { name: r.name, email: r.email }]));
}

/** True when the database holds no user at all (a first start). */
export async function noUserExists(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ any: boolean }[]>`select exists (select 1 from users) as any`;
  return !row?.any;
}

export async function listUsers(sql: Sql, limit: number): Promise<User[]> {
  const rows = await sql<UserRow[]>`select * from users order by created_at desc, id desc limit ${limit}`;
  return rows.map(toUser);
}

export async function setUserRole(sql: Sql, id: string, role: Role): Promise<User | null> {
  const [r] = await sql<UserRow[]>`update users set role = ${role}, updated_at = now() where id = ${id} returning *`;
  return r ? toUser(r) : null;
}

export async function setUserDeactivated(sql: Sql, id: string, deactivated: boolean): Promise<User | null> {
  const [r] = deactivated
    ? await sql<UserRow[]>`update users set deactivated_at = coalesce(deactivated_at, now()), updated_at = now() where id = ${id} returning *`
    : await sql<UserRow[]>`update users set deactivated_at = null, updated_at = now() where id = ${id} returning *`;
  return r ? toUser(r) : null;
}

/**
 * Sets a role or deactivates, refusing to leave no active admin (role admin, not deactivated).
 * Locks the active admins' rows first so two concurrent demotions (A demotes B while B demotes
 * A) cannot both see the other as still admin: the second waits, re-reads, and is refused.
 */
export async function changeUserKeepingAnAdmin(
  sql: Sql,
  id: string,
  change: { role: Role } | { deactivate: true },
): Promise<User | 'last-admin' | null> {
  return sql.begin(async (tx) => {
    const admins = await tx<{ id: string }[]>`select id from users where role = 'admin' and deactivated_at is null order by id for update`;
    const [target] = await tx<UserRow[]>`select * from users where id = ${id} for update`;
    if (!target) return null;
    const losesAdmin = target.role === 'admin' && target.deactivated_at === null && ('deactivate' in change || change.role !== 'admin');
    if (losesAdmin && admins.length <= 1) return 'last-admin' as const;
    const [r] =
      'deactivate' in change
        ? await tx<UserRow[]>`update users set deactivated_at = coalesce(deactivated_at, now()), updated_at = now() where id = ${id} returning *`
        : await tx<UserRow[]>`update users set role = ${change.role}, updated_at = now() where id = ${id} returning *`;
    return toUser(r!);
  }) as Promise<User | 'last-admin' | null>;
}

/** Creates the user once (by email) or returns the existing one; used by --seed-api-key. */
export async function ensureUser(sql: Sql, email: string, name: string, role: Role): Promise<User> {
  const [found] = await sql<UserRow[]>`select * from users where email_key = ${nameKey(email)} order by created_at limit 1`;
  if (found) {
    if (found.role === role && !found.deactivated_at) return toUser(found);
    const [r] = await sql<UserRow[]>`update users set role = ${role}, deactivated_at = null, updated_at = now() where id = ${found.id} returning *`;
    return toUser(r!);
  }
  const [r] = await sql<UserRow[]>`insert into users (email, email_key, name, role) values (${email}, ${nameKey(email)}, ${name}, ${role}) returning *`;
  return toUser(r!);
}

/**
 * Creates a user unless one with that email (case-insensitive) exists. Emails are not unique in
 * the table (an unverified login may share one), so the check and the insert run under a lock
 * on the lower-cased address: two concurrent creates of one email cannot both insert.
 */
export async function createUser(sql: Sql, u: { email: string; name: string; role: Role }): Promise<User | 'taken'> {
  return sql.begin(async (tx) => {
    const key = nameKey(u.email);
    await tx`select pg_advisory_xact_lock(hashtext(${key}))`;
    const [taken] = await tx<{ id: string }[]>`select id from users where email_key = ${key} limit 1`;
    if (taken) return 'taken' as const;
    const [r] = await tx<UserRow[]>`insert into users (email, email_key, name, role) values (${u.email}, ${key}, ${u.name}, ${u.role}) returning *`;
    return toUser(r!);
  }) as Promise<User | 'taken'>;
}

/**
 * The oldest user with that email whose address is backed (no account, or an account whose
 * provider verified that very address), locked for the caller's transaction: a login may link to it.
 */
export async function lockLinkableUserByEmail(tx: Sql, email: string): Promise<LoginUserRow | null> {
  const [r] = await tx<LoginUserRow[]>`select u.id, u.email, u.role, u.deactivated_at from users u
      where u.email_key = ${nameKey(email)}
        and (not exists (select 1 from accounts a where a.user_id = u.id)
             or exists (select 1 from accounts a where a.user_id = u.id and a.email_verified and lower(a.email) = lower(u.email)))
      order by u.created_at, u.id limit 1 for update of u`;
  return r ?? null;
}

/** A new member user made by a login. */
export async function insertLoginUser(sql: Sql, u: { email: string; name: string; avatarUrl: string | null; deactivated?: boolean }): Promise<LoginUserRow> {
  const deactivatedAt = u.deactivated ? new Date() : null;
  const [r] = await sql<LoginUserRow[]>`insert into users (email, email_key, name, avatar_url, deactivated_at) values (${u.email}, ${nameKey(u.email)}, ${u.name}, ${u.avatarUrl}, ${deactivatedAt})
      returning id, email, role, deactivated_at`;
  return r!;
}

export async function setAvatarIfMissing(sql: Sql, id: string, avatarUrl: string): Promise<void> {
  await sql`update users set avatar_url = ${avatarUrl}, updated_at = now() where id = ${id} and avatar_url is null`;
}

export async function promoteToAdmin(sql: Sql, id: string): Promise<void> {
  await sql`update users set role = 'admin', updated_at = now() where id = ${id}`;
}
