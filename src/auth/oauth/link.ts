import type { Sql } from '../../db/sql.js';
import type { Identity } from './provider.js';
import { nameKey } from '../../names.js';
import { countAccounts, findUserByAccount, insertAccount, refreshAccountEmail, type LoginUserRow } from '../../db/accounts.js';
import { insertLoginUser, lockLinkableUserByEmail, promoteToAdmin, setAvatarIfMissing } from '../../db/users.js';

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

/** --signup closed: the identity is no user's and no new user may be made for it. */
export class SignupClosed extends Error {}

export interface LoginUser {
  id: string;
  email: string;
  role: 'admin' | 'member';
  deactivated: boolean;
  /** The user existed before this login and changed role: shards must drop cached keys. */
  roleChanged: boolean;
  how: 'account' | 'linked' | 'created';
}

type Row = LoginUserRow;

/**
 * --signup: a user this login would create is created active (open), deactivated until an admin
 * reactivates them (deactivated), or not at all (closed: SignupClosed). Logins of existing
 * users and links to them are not affected. The --initial-admin-email user (verified) is
 * always created active: the operator named them.
 */
export type SignupMode = 'open' | 'deactivated' | 'closed';

export async function userForIdentity(sql: Sql, provider: string, who: Identity & { email: string }, initialAdminEmail: string | null, signup: SignupMode = 'open'): Promise<LoginUser> {
  // Two first logins of one subject can race (two shards); the loser finds the winner's account.
  for (let attempt = 0; ; attempt++) {
    try {
      return await sql.begin((tx) => resolve(tx as unknown as Sql, provider, who, initialAdminEmail, signup));
    } catch (err) {
      if (attempt === 0 && (err as { code?: string }).code === '23505') continue;
      throw err;
    }
  }
}

async function resolve(tx: Sql, provider: string, who: Identity & { email: string }, initialAdminEmail: string | null, signup: SignupMode): Promise<LoginUser> {
  const existing = await findUserByAccount(tx, provider, who.subject);
  if (existing) {
    await refreshAccountEmail(tx, provider, who.subject, who.email, who.emailVerified);
    return view(existing, existing.role, false, 'account');
  }

  let user: Row | null = null;
  let how: LoginUser['how'] = 'created';
  if (who.emailVerified) {
    user = await lockLinkableUserByEmail(tx, who.email);
    if (user) how = 'linked';
  }
  if (!user) {
    const named = who.emailVerified && initialAdminEmail !== null && nameKey(who.email) === nameKey(initialAdminEmail);
    if (signup === 'closed' && !named) throw new SignupClosed('sign-up is closed');
    user = await insertLoginUser(tx, { email: who.email, name: who.name, avatarUrl: who.avatarUrl, deactivated: signup === 'deactivated' && !named });
  } else if (who.avatarUrl) {
    await setAvatarIfMissing(tx, user.id, who.avatarUrl);
  }
  const earlierAccounts = await countAccounts(tx, user.id);
  await insertAccount(tx, { userId: user.id, provider, subject: who.subject, email: who.email, emailVerified: who.emailVerified });

  let role = user.role;
  const promote = earlierAccounts === 0 && who.emailVerified && initialAdminEmail !== null && nameKey(who.email) === nameKey(initialAdminEmail) && role !== 'admin';
  if (promote) {
    await promoteToAdmin(tx, user.id);
    role = 'admin';
  }
  return view(user, role, promote && how === 'linked', how);
}

function view(r: Row, role: LoginUser['role'], roleChanged: boolean, how: LoginUser['how']): LoginUser {
  return { id: r.id, email: r.email, role, deactivated: r.deactivated_at !== null, roleChanged, how };
}
