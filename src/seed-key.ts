// --seed-api-key: the admin key `burrowd --seed-api-key | head -1` prints on every start.
// The plaintext is kept (mode 0600) in the data directory so that a restart prints the same
// key: contexts and running tunnels made with it keep working. A new key is issued (and the
// earlier `seed` key revoked) only when that copy is missing or no longer verifies.
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Sql } from './db/sql.js';
import type { Logger } from './log.js';
import { ensureUser } from './db/users.js';
import { findKeyByPrefix } from './db/api-keys.js';
import { issueKey } from './auth/api-keys.js';
import { keyPrefixOf } from './auth/key-format.js';
import type { ShardToMain } from './protocol/messages.js';

export const SEED_EMAIL = 'seed@burrow.local';
export const SEED_KEY_NAME = 'seed';
export const SEED_KEY_FILE = 'seed-api-key';

export interface SeedDeps {
  sql: Sql;
  log: Logger;
  /** argon2 on main's pool. */
  hash(secret: string): Promise<string>;
  verify(hash: string, secret: string): Promise<boolean>;
}

export interface SeedKey {
  key: string;
  /** false: the kept key was printed again. */
  issued: boolean;
  /** Where the plaintext is kept; null for a memory:// data dir. */
  file: string | null;
}

/** The file that keeps the key, or null when the data dir keeps nothing. */
export function seedKeyFile(dataDir: string): string | null {
  return dataDir.startsWith('memory://') ? null : join(dataDir, SEED_KEY_FILE);
}

/** Runs before the shards start: no shard holds a cached key yet, so nothing needs invalidating. */
export async function ensureSeedKey(deps: SeedDeps, dataDir: string): Promise<SeedKey> {
  const user = await ensureUser(deps.sql, SEED_EMAIL, 'Seed admin', 'admin');
  const file = seedKeyFile(dataDir);
  const kept = file ? readKept(file, deps.log) : null;
  if (kept && file && (await stillValid(deps, kept, user.id))) {
    // A copy made readable by others (restored from a backup, say) goes back to owner-only.
    if (statSync(file).mode & 0o077) chmodSync(file, 0o600);
    deps.log.info({ file, prefix: keyPrefixOf(kept) }, 'seed key kept');
    return { key: kept, issued: false, file };
  }
  const main = {
    ask: <R>(m: ShardToMain, _timeoutMs: number): Promise<R> =>
      m.type === 'hash-secret' ? (deps.hash(m.secret) as Promise<R>) : Promise.resolve({} as R),
  };
  const created = await issueKey({ sql: deps.sql, main } as never, {
    userId: user.id, name: SEED_KEY_NAME, scopes: ['tunnels', 'management'], expiresAt: null, replaceSameName: true,
  });
  if (file) {
    try {
      writeKept(dataDir, file, created.key);
    } catch (err) {
      // The key works for this run; the next start issues another one.
      deps.log.warn({ err, file }, 'cannot keep the seed key; the next start will issue a new one');
    }
  }
  deps.log.info({ file, prefix: created.info.key_prefix, reason: kept ? 'kept key no longer valid' : 'no kept key' }, 'seed key issued');
  return { key: created.key, issued: true, file };
}

function readKept(file: string, log: Logger): string | null {
  if (!existsSync(file)) return null;
  try {
    const key = readFileSync(file, 'utf8').trim();
    return keyPrefixOf(key) ? key : null;
  } catch (err) {
    log.warn({ err, file }, 'cannot read the kept seed key; issuing a new one');
    return null;
  }
}

async function stillValid(deps: SeedDeps, key: string, seedUserId: string): Promise<boolean> {
  const row = await findKeyByPrefix(deps.sql, keyPrefixOf(key)!);
  if (!row || row.userId !== seedUserId || row.name !== SEED_KEY_NAME || row.revokedAt) return false;
  if (row.expiresAt && row.expiresAt.getTime() <= Date.now()) return false;
  // The file may come from another database (a new --database-url, a restored data dir).
  return deps.verify(row.keyHash, key);
}

function writeKept(dataDir: string, file: string, key: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // Written whole under another name, then renamed: a crash never leaves half a key behind.
  const part = `${file}.${process.pid}.part`;
  try {
    writeFileSync(part, `${key}\n`, { mode: 0o600 });
    renameSync(part, file);
  } finally {
    rmSync(part, { force: true });
  }
}

/** For a person at a terminal (stderr): what the first stdout line is and how to use it. */
export function seedKeyHint(seed: SeedKey, baseUrl: string): string {
  // The plaintext stays off stderr: it is on stdout, and in the kept file.
  const token = seed.file ? `"$(cat ${shellQuote(seed.file)})"` : '<the key>';
  return [
    `The first stdout line is an admin API key (user ${SEED_EMAIL}, both scopes, no expiry); ` +
      (seed.file ? `it is kept in ${seed.file} and printed again at every start.` : 'with a memory:// data dir each start prints a new one.'),
    `Use it with the CLI:  burrow context create local --server ${baseUrl} --token ${token}`,
    `or for one shell:     export BURROW_SERVER=${baseUrl} BURROW_TOKEN=${token}`,
    '',
  ].join('\n');
}

function shellQuote(s: string): string {
  return /^[\w./+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * The start-up warning of a burrowd nobody can administer: no user in the database, no seed key
 * asked for, no --initial-admin-email. Every admin route would answer 401 to every key there is.
 */
export function noAdminWarning(): string {
  return (
    'no user exists and neither --seed-api-key (BURROW_SEED_API_KEY=1) nor --initial-admin-email (BURROW_INITIAL_ADMIN_EMAIL) is set: nobody can become an admin. ' +
    'Set BURROW_SEED_API_KEY=1 (under systemd: in /etc/burrow/burrowd.env) and restart: the admin key is the first stdout line (journalctl -u burrowd) and is kept in the data dir as seed-api-key; ' +
    'or, with a login provider configured, set BURROW_INITIAL_ADMIN_EMAIL to the address whose first browser login becomes admin'
  );
}
