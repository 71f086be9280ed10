import type { Sql } from '../../db/sql.js';
import type { Identity } from './provider.js';
import { nameKey } from '../../names.js';
import { countAccounts, findUserByAccount, insertAccount, refreshAccountEmail, type LoginUserRow } from '../../db/accounts.js';
import { insertLoginUser, lockLinkableUserByEmail, promoteToAdmin, setAvatarIfMissing } from '../../db/users.js';
import { SEED_EMAIL } from '../../seed-key.js';
import { isDeliverableEmail } from './deliverable.js';

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
// A link target found in step 2 is refused (LinkRefused, the login fails) rather than linked when:
//  - it is the seed admin, or its email cannot receive mail (src/auth/oauth/deliverable.ts):
//    a provider's "verified" is worthless for seed@burrow.local, anyone's IdP can say it;
//  - it is an admin and --oauth-link-admins is off: an admin's power must not hang on every
//    provider the server trusts vouching correctly for that address. The --initial-admin-email
//    address is the exception: its first login makes an admin in any case.
// Refused, not turned into a new user: a second user with that email would be another person
// the operator never meant to create.

/** --signup closed: the identity is no user's and no new user may be made for it. */
export class SignupClosed extends Error {}

/** The identity's verified email is an existing user's, who must not be linked to a login. */
export class LinkRefused extends Error {
  constructor(readonly why: 'seed' | 'undeliverable' | 'admin', message: string) {
    super(message);
  }
}

export interface LinkOptions {
  /** --oauth-link-admins: a first login may link to an existing admin with that verified email. */
  linkAdmins: boolean;
}

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

export async function userForIdentity(sql: Sql, provider: string, who: Identity & { email: string }, initialAdminEmail: string | null, signup: SignupMode = 'open', link: LinkOptions = { linkAdmins: false }): Promise<LoginUser> {
  // Two first logins of one subject can race (two shards); the loser finds the winner's account.
  for (let attempt = 0; ; attempt++) {
    try {
      return await sql.begin((tx) => resolve(tx as unknown as Sql, provider, who, initialAdminEmail, signup, link));
    } catch (err) {
      if (attempt === 0 && (err as { code?: string }).code === '23505') continue;
      throw err;
    }
  }
}

async function resolve(tx: Sql, provider: string, who: Identity & { email: string }, initialAdminEmail: string | null, signup: SignupMode, link: LinkOptions): Promise<LoginUser> {
  const existing = await findUserByAccount(tx, provider, who.subject);
  if (existing) {
    await refreshAccountEmail(tx, provider, who.subject, who.email, who.emailVerified);
    return view(existing, existing.role, false, 'account');
  }

  let user: Row | null = null;
  let how: LoginUser['how'] = 'created';
  if (who.emailVerified) {
    user = await lockLinkableUserByEmail(tx, who.email);
    if (user) {
      refuseLinkTo(user, link, initialAdminEmail !== null && nameKey(who.email) === nameKey(initialAdminEmail));
      how = 'linked';
    }
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

/** `named`: the address is --initial-admin-email, whose first login the operator made an admin anyway. */
function refuseLinkTo(user: Row, link: LinkOptions, named: boolean): void {
  if (nameKey(user.email) === nameKey(SEED_EMAIL)) {
    throw new LinkRefused('seed', `${user.email} is the seed admin, which no browser login can claim; log in with its key`);
  }
  if (!isDeliverableEmail(user.email)) {
    throw new LinkRefused('undeliverable', `the burrow user ${user.email} has an address no mail can reach, so no provider can vouch for it; an administrator can give them a key (burrow keys create NAME --user ${user.email})`);
  }
  if (user.role === 'admin' && !link.linkAdmins && !named) {
    throw new LinkRefused('admin', `${user.email} is a burrow administrator, and this server links browser logins to administrators only with --oauth-link-admins; log in with an API key instead`);
  }
}

function view(r: Row, role: LoginUser['role'], roleChanged: boolean, how: LoginUser['how']): LoginUser {
  return { id: r.id, email: r.email, role, deactivated: r.deactivated_at !== null, roleChanged, how };
}
