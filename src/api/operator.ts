import { ApiError } from '../errors.js';
import { scopeAllows } from '../protocol/roles.js';
import type { Principal } from '../protocol/messages.js';
import type { RequestData } from '../http/uws.js';
import type { ShardContext } from '../edge/shard-context.js';

/**
 * Operator endpoints outside the API's route table (readiness detail, metrics): an admin's key
 * with the management scope. 401 without a valid key, 403 naming what is missing.
 */
export async function authenticateOperator(shard: ShardContext, req: RequestData, what: string): Promise<Principal> {
  const principal = await shard.authenticate(req.headers.get('authorization'), req.ip);
  if (!scopeAllows('management', principal.scopes)) {
    throw new ApiError('forbidden', `${what} needs the management scope; this key has ${principal.scopes.join(', ')}`);
  }
  if (principal.role !== 'admin') throw new ApiError('forbidden', `${what} needs the admin role`);
  return principal;
}
