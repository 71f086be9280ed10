import type { Sql } from './sql.js';

// The oauth_pending_logins and oauth_login_codes tables. Rows are keyed by a hash of the
// secret (the caller hashes); taking a row deletes it in the same statement, so of two racing
// uses exactly one wins. Expiry is judged by the database clock.

export interface PendingLoginRow {
  provider: string;
  cli_port: number;
  cli_challenge: string;
  provider_verifier: string;
  nonce: string | null;
  cli_state: string | null;
}

export interface PendingLoginBounds {
  /** Live pending logins server-wide. */
  server: number;
  /** Live pending logins from one address group. */
  perGroup: number;
}

/**
 * Stores a pending login unless a bound is reached; the counts and the insert are one decision.
 * Counted and inserted apart, concurrent starts all counted the same rows and all inserted (25
 * pending against a bound of 20). Under a transaction-scoped advisory lock each start counts
 * after the previous one committed; every shard and every node takes the same lock. Logins are
 * rare and the transaction is a few index lookups, so one lock for all of them costs nothing.
 */
export async function insertPendingLoginWithin(
  sql: Sql,
  stateHash: string,
  p: PendingLoginRow,
  ttlSecs: number,
  clientGroup: string,
  bounds: PendingLoginBounds,
): Promise<'ok' | 'address' | 'server'> {
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext('burrow:oauth_pending_logins'))`;
    // Sweep here rather than on a timer: logins are rare and the index makes this cheap.
    await tx`delete from oauth_pending_logins where expires_at < now()`;
    const [all] = await tx<{ n: number }[]>`select count(*)::int as n from oauth_pending_logins`;
    if (all!.n >= bounds.server) return 'server' as const;
    const [mine] = await tx<{ n: number }[]>`select count(*)::int as n from oauth_pending_logins where client_group = ${clientGroup} and expires_at > now()`;
    if (mine!.n >= bounds.perGroup) return 'address' as const;
    await tx`insert into oauth_pending_logins
        (state_hash, provider, cli_port, cli_challenge, provider_verifier, nonce, expires_at, client_group, cli_state)
      values (${stateHash}, ${p.provider}, ${p.cli_port}, ${p.cli_challenge},
        ${p.provider_verifier}, ${p.nonce}, now() + make_interval(secs => ${ttlSecs}), ${clientGroup}, ${p.cli_state})`;
    return 'ok' as const;
  }) as Promise<'ok' | 'address' | 'server'>;
}

/** Deletes the pending login; returns it with whether it was still live, or null if unknown. */
export async function deletePendingLogin(sql: Sql, provider: string, stateHash: string): Promise<(PendingLoginRow & { live: boolean }) | null> {
  const [r] = await sql<(PendingLoginRow & { live: boolean })[]>`delete from oauth_pending_logins where state_hash = ${stateHash} and provider = ${provider}
    returning provider, cli_port, cli_challenge, provider_verifier, nonce, cli_state, expires_at > now() as live`;
  return r ?? null;
}

/** Sweeps expired codes, then stores this one. */
export async function insertLoginCode(sql: Sql, codeHash: string, userId: string, provider: string, cliChallenge: string, ttlSecs: number): Promise<void> {
  await sql`delete from oauth_login_codes where expires_at < now()`;
  await sql`insert into oauth_login_codes (code_hash, user_id, provider, cli_challenge, expires_at)
    values (${codeHash}, ${userId}, ${provider}, ${cliChallenge}, now() + make_interval(secs => ${ttlSecs}))`;
}

/** Deletes the code's row; returns it with whether it was still live, or null if unknown. */
export async function deleteLoginCode(
  sql: Sql,
  codeHash: string,
): Promise<{ user_id: string; provider: string; cli_challenge: string; live: boolean } | null> {
  const [r] = await sql<{ user_id: string; provider: string; cli_challenge: string; live: boolean }[]>`
    delete from oauth_login_codes where code_hash = ${codeHash}
    returning user_id, provider, cli_challenge, expires_at > now() as live`;
  return r ?? null;
}
