import type { Sql } from '../../db/sql.js';
import type { Identity } from './provider.js';

// Which burrow user a provider identity is (README "Browser login"):
//  1. an account (provider, subject) already exists → its user;
//  2. else, when the provider says the email is verified, the oldest user with that email
//     (case-insensitive) gets the new account linked;
//  3. else a new member user is created with the account.
// A user's first OAuth login (no account before) with the verified email equal to
// --initial-admin-email promotes them to admin. An unverified email never links, never promotes:
// anyone can type any address into a provider that does not verify it. For the same reason a
// user is a link target only if their email is backed: they have no account (seed, created by
// an admin) or an account whose provider verified that very address. Otherwise whoever logged
// in first with an unverified address would receive the real owner's later logins.
// Logins of an existing account refresh accounts.email/email_verified from the provider.

export interface LoginUser {
  id: string;
  email: string;
  role: 'admin' | 'member';
  deactivated: boolean;
  /** The user existed before this login and changed role: shards must drop cached keys. */
  roleChanged: boolean;
  how: 'account' | 'linked' | 'created';
}

interface Row {
  id: string;
  email: string;
  role: 'admin' | 'member';
  deactivated_at: Date | null;
}

export async function userForIdentity(sql: Sql, provider: string, who: Identity & { email: string }, initialAdminEmail: string | null): Promise<LoginUser> {
  // Two first logins of one subject can race (two shards); the loser finds the winner's account.
  for (let attempt = 0; ; attempt++) {
    try {
      return await sql.begin((tx) => resolve(tx as unknown as Sql, provider, who, initialAdminEmail));
    } catch (err) {
      if (attempt === 0 && (err as { code?: string }).code === '23505') continue;
      throw err;
    }
  }
}

async function resolve(tx: Sql, provider: string, who: Identity & { email: string }, initialAdminEmail: string | null): Promise<LoginUser> {
  const [existing] = await tx<Row[]>`select u.id, u.email, u.role, u.deactivated_at from accounts a join users u on u.id = a.user_id
    where a.provider = ${provider} and a.subject = ${who.subject}`;
  if (existing) {
    await tx`update accounts set email = ${who.email}, email_verified = ${who.emailVerified}
      where provider = ${provider} and subject = ${who.subject}`;
    return view(existing, existing.role, false, 'account');
  }

  let user: Row | undefined;
  let how: LoginUser['how'] = 'created';
  if (who.emailVerified) {
    [user] = await tx<Row[]>`select u.id, u.email, u.role, u.deactivated_at from users u
      where lower(u.email) = lower(${who.email})
        and (not exists (select 1 from accounts a where a.user_id = u.id)
             or exists (select 1 from accounts a where a.user_id = u.id and a.email_verified and lower(a.email) = lower(u.email)))
      order by u.created_at, u.id limit 1 for update of u`;
    if (user) how = 'linked';
  }
  if (!user) {
    [user] = await tx<Row[]>`insert into users (email, name, avatar_url) values (${who.email}, ${who.name}, ${who.avatarUrl})
      returning id, email, role, deactivated_at`;
  } else if (who.avatarUrl) {
    await tx`update users set avatar_url = ${who.avatarUrl}, updated_at = now() where id = ${user.id} and avatar_url is null`;
  }
  const [counted] = await tx<{ n: number }[]>`select count(*)::int as n from accounts where user_id = ${user!.id}`;
  const earlierAccounts = counted!.n;
  await tx`insert into accounts (user_id, provider, subject, email, email_verified)
    values (${user!.id}, ${provider}, ${who.subject}, ${who.email}, ${who.emailVerified})`;

  let role = user!.role;
  const promote = earlierAccounts === 0 && who.emailVerified && initialAdminEmail !== null && who.email.toLowerCase() === initialAdminEmail && role !== 'admin';
  if (promote) {
    await tx`update users set role = 'admin', updated_at = now() where id = ${user!.id}`;
    role = 'admin';
  }
  return view(user!, role, promote && how === 'linked', how);
}

function view(r: Row, role: LoginUser['role'], roleChanged: boolean, how: LoginUser['how']): LoginUser {
  return { id: r.id, email: r.email, role, deactivated: r.deactivated_at !== null, roleChanged, how };
}
