import type { Sql } from '../../db/sql.js';
import { randomToken, sha256Hex } from './secrets.js';
import { addressGroup } from '../../protocol/cidr.js';
import { deleteLoginCode, deletePendingLogin, insertLoginCode, insertPendingLoginWithin } from '../../db/oauth-logins.js';

// The two short-lived, single-use records of a browser login (migration 002_oauth.sql):
//   authorize ──PendingLogin (10 min)──▶ callback ──LoginCode (2 min)──▶ POST /auth/v1/token
// Taking a record deletes it in the same statement (src/db/oauth-logins.ts), so of two racing
// uses exactly one wins, whichever shard or burrowd serves them.

export const PENDING_LOGIN_TTL_SECS = 10 * 60;
export const LOGIN_CODE_TTL_SECS = 2 * 60;
/**
 * Logins in progress at once, server-wide. Starting a login needs no credentials, so without a
 * bound anyone could grow the table for 10 minutes at a time; past it, new logins wait (503).
 */
export const MAX_PENDING_LOGINS = 10_000;
/**
 * Logins in progress at once from one client address (IPv6: one /64). A person starts a few;
 * without this one address could take all MAX_PENDING_LOGINS and lock every user out.
 */
export const MAX_PENDING_LOGINS_PER_ADDRESS = 20;

export interface PendingLogin {
  provider: string;
  cliPort: number;
  cliChallenge: string;
  providerVerifier: string;
  nonce: string | null;
  /** The CLI's own state for its loopback callback, echoed back to it (null: an older CLI). */
  cliState: string | null;
}

/**
 * Stores a pending login started from `clientIp`; 'address' when that address (group) has
 * MAX_PENDING_LOGINS_PER_ADDRESS in progress, 'server' when MAX_PENDING_LOGINS are.
 */
export async function savePendingLogin(sql: Sql, state: string, p: PendingLogin, clientIp: string): Promise<'ok' | 'address' | 'server'> {
  const row = { provider: p.provider, cli_port: p.cliPort, cli_challenge: p.cliChallenge, provider_verifier: p.providerVerifier, nonce: p.nonce, cli_state: p.cliState };
  return insertPendingLoginWithin(sql, sha256Hex(state), row, PENDING_LOGIN_TTL_SECS, addressGroup(clientIp), { server: MAX_PENDING_LOGINS, perGroup: MAX_PENDING_LOGINS_PER_ADDRESS });
}

/** Deletes and returns the pending login of `state` for `provider`; null if unknown, used or expired. */
export async function takePendingLogin(sql: Sql, provider: string, state: string): Promise<PendingLogin | null> {
  const r = await deletePendingLogin(sql, provider, sha256Hex(state));
  if (!r || !r.live) return null;
  return {
    provider: r.provider,
    cliPort: r.cli_port,
    cliChallenge: r.cli_challenge,
    providerVerifier: r.provider_verifier,
    nonce: r.nonce,
    cliState: r.cli_state,
  };
}

/** Creates the one-time code the browser carries to the CLI; returns it (only its hash is kept). */
export async function createLoginCode(sql: Sql, userId: string, provider: string, cliChallenge: string): Promise<string> {
  const code = randomToken();
  await insertLoginCode(sql, sha256Hex(code), userId, provider, cliChallenge, LOGIN_CODE_TTL_SECS);
  return code;
}

export interface LoginCode {
  userId: string;
  provider: string;
  cliChallenge: string;
}

/**
 * Deletes and returns the code's record; null if unknown, used or expired. The code is burnt
 * even when the caller's verifier then turns out wrong: a stolen code gets one guess, not many.
 */
export async function takeLoginCode(sql: Sql, code: string): Promise<LoginCode | null> {
  const r = await deleteLoginCode(sql, sha256Hex(code));
  if (!r || !r.live) return null;
  return { userId: r.user_id, provider: r.provider, cliChallenge: r.cli_challenge };
}
