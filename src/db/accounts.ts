import type { Sql } from './sql.js';
import { isoRequired } from './sql.js';
import type { Account } from '../protocol/api-views.js';

export async function listAccounts(sql: Sql, userId: string): Promise<Account[]> {
  const rows = await sql<{ id: string; provider: string; created_at: Date }[]>`
    select id, provider, created_at from accounts where user_id = ${userId} order by created_at, id`;
  return rows.map((r) => ({ id: r.id, provider: r.provider, created_at: isoRequired(r.created_at) }));
}

/** The columns of a user that a login decides with. */
export interface LoginUserRow {
  id: string;
  email: string;
  role: 'admin' | 'member';
  deactivated_at: Date | null;
}

/** The user owning the provider account (provider, subject), if any. */
export async function findUserByAccount(sql: Sql, provider: string, subject: string): Promise<LoginUserRow | null> {
  const [r] = await sql<LoginUserRow[]>`select u.id, u.email, u.role, u.deactivated_at from accounts a join users u on u.id = a.user_id
    where a.provider = ${provider} and a.subject = ${subject}`;
  return r ?? null;
}

/** The provider's current view of the account's address; refreshed on every login. */
export async function refreshAccountEmail(sql: Sql, provider: string, subject: string, email: string, emailVerified: boolean): Promise<void> {
  await sql`update accounts set email = ${email}, email_verified = ${emailVerified}
    where provider = ${provider} and subject = ${subject}`;
}

export async function countAccounts(sql: Sql, userId: string): Promise<number> {
  const [counted] = await sql<{ n: number }[]>`select count(*)::int as n from accounts where user_id = ${userId}`;
  return counted!.n;
}

export async function insertAccount(sql: Sql, a: { userId: string; provider: string; subject: string; email: string; emailVerified: boolean }): Promise<void> {
  await sql`insert into accounts (user_id, provider, subject, email, email_verified)
    values (${a.userId}, ${a.provider}, ${a.subject}, ${a.email}, ${a.emailVerified})`;
}
