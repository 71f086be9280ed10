import type { ShardContext } from '../edge/shard-context.js';
import type { CreatedKey } from '../protocol/api-views.js';
import type { Scope } from '../protocol/roles.js';
import { generateKey } from './key-format.js';
import { insertKey, revokeByName } from '../db/api-keys.js';
import { ApiError } from '../errors.js';
import { uniqueViolation } from '../db/sql.js';

const HASH_TIMEOUT_MS = 15_000;
export const INVALIDATE_TIMEOUT_MS = 5_000;

export interface IssueKeyRequest {
  userId: string;
  name: string;
  scopes: Scope[];
  expiresAt: Date | null;
  /** Revoke the user's active key of the same name first (seed and login keys). */
  replaceSameName: boolean;
}

/** Creates a key: hashes it on main's argon2 pool, stores the hash, returns the plaintext once. */
export async function issueKey(shard: Pick<ShardContext, 'sql' | 'main'>, req: IssueKeyRequest): Promise<CreatedKey> {
  const { key, prefix } = generateKey();
  const hash = await shard.main.ask({ type: 'hash-secret', secret: key }, HASH_TIMEOUT_MS);
  let revoked: string[] = [];
  try {
    const info = await shard.sql.begin(async (tx) => {
      if (req.replaceSameName) {
        // Two replacements of one name at once (nodes starting together with --seed-api-key on
        // one database) take turns: the later one revokes the earlier key instead of failing on
        // the active-name index.
        await tx`select pg_advisory_xact_lock(hashtext('burrow-key-name'), hashtext(${`${req.userId}/${req.name}`}))`;
        revoked = await revokeByName(tx as never, req.userId, req.name);
      }
      return insertKey(tx as never, { userId: req.userId, name: req.name, prefix, hash, scopes: req.scopes, expiresAt: req.expiresAt });
    });
    if (revoked.length) await invalidateKeys(shard, revoked, [], 'the API key was revoked (replaced by a new key of the same name)');
    return { info: info as CreatedKey['info'], key };
  } catch (err) {
    if (uniqueViolation(err) === 'api_keys_active_name') {
      throw new ApiError('conflict', `you already have an active key named "${req.name}"; revoke it or choose another name`);
    }
    throw err;
  }
}

/**
 * Every shard drops these keys/users from its cache before this resolves. With
 * `endConnections` (the reason the client is told), their tunnel control connections end too.
 */
export async function invalidateKeys(shard: Pick<ShardContext, 'main'>, keyIds: string[], userIds: string[], endConnections: string | null = null): Promise<void> {
  await shard.main.ask({ type: 'auth-invalidate', keyIds, userIds, endConnections }, INVALIDATE_TIMEOUT_MS);
}
