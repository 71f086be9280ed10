import type { ApiCall, ApiRoute } from './route.js';
import { API_PREFIX } from './route.js';
import { keyRoutes } from './keys.js';
import { profileRoutes } from './profile.js';
import { teamRoutes } from './teams.js';
import { userRoutes } from './users.js';
import { tunnelRoutes } from './tunnels.js';
import { reservationRoutes } from './reservations.js';
import { domainRoutes } from './domains.js';
import { isUuid } from './schemas.js';
import { validate, validateQuery } from './validate.js';
import { scopeAllows } from '../protocol/roles.js';
import { ApiError, unavailableError } from '../errors.js';
import { isDatabaseDown } from '../db/sql.js';
import { jsonReply, problemReply, route, type RequestData } from '../http/uws.js';
import type { ShardContext } from '../edge/shard-context.js';

// The route table: every operation with the scope and role it needs. Who may do what is
// read here (and in each resource file's table), never buried in handlers.
export const ROUTES: readonly ApiRoute[] = [...keyRoutes, ...profileRoutes, ...teamRoutes, ...userRoutes, ...tunnelRoutes, ...reservationRoutes, ...domainRoutes];

const SCOPE_WORDS = {
  management: 'the management scope',
  tunnels: 'the tunnels scope',
  'tunnels-or-management': 'the tunnels or management scope',
  any: 'a valid key',
} as const;

const VERB_ING: Record<string, string> = {
  List: 'listing', Create: 'creating', Revoke: 'revoking', Get: 'reading', Delete: 'deleting', Add: 'adding',
  Remove: 'removing', Set: 'setting', Deactivate: 'deactivating', Reactivate: 'reactivating',
};
const ACTION_WORDS: Record<string, string> = {
  Create_user_key: "creating a key for another user",
  List_user_keys: "listing another user's keys",
  Get_user_key: "reading another user's key",
  Revoke_user_key: "revoking another user's key",
  Get_current_user: 'reading your user',
  Get_tunnel: 'reading a tunnel',
  Delete_tunnel: 'deleting a tunnel',
  Reserve_tunnel_id: 'reserving a tunnel id',
  Release_tunnel_id: 'releasing a tunnel id',
  Verify_domain: 'verifying a custom domain',
};

/**
 * What a route does, in words, for error details people read ("listing keys needs ..."):
 * operation ids like "List_keys" are for machines.
 */
export function actionWords(r: Pick<ApiRoute, 'operationId'>): string {
  const fixed = ACTION_WORDS[r.operationId];
  if (fixed) return fixed;
  const [verb, ...rest] = r.operationId.split('_');
  return [VERB_ING[verb!] ?? verb!.toLowerCase(), ...rest.map((w) => w.toLowerCase())].join(' ');
}

function parseJsonBody(req: RequestData): unknown {
  if (req.body.length === 0) throw new ApiError('bad-request', 'a JSON request body is required');
  const type = (req.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json' && !type.endsWith('+json')) {
    throw new ApiError('unsupported-media-type', `the request body must be application/json, got ${type ? `"${type}"` : 'no Content-Type'}`);
  }
  try {
    return JSON.parse(req.body.toString('utf8'));
  } catch (err) {
    throw new ApiError('bad-request', `the request body is not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * The longest an API caller waits. The pool fails faster on its own (connect timeout, statement
 * timeout, response watchdog: src/db/sql.ts); this also covers queries queued behind them.
 */
export const CALL_BOUND_MS = 6_000;

async function call(shard: ShardContext, r: ApiRoute, names: string[], req: RequestData) {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(unavailableError(`the server could not answer within ${CALL_BOUND_MS / 1000} s (its database is unreachable or overloaded); try again shortly`)), CALL_BOUND_MS);
  });
  try {
    return await Promise.race([callUnbounded(shard, r, names, req), bound]);
  } catch (err) {
    if (isDatabaseDown(err)) {
      shard.log.warn({ err: { code: (err as { code?: string }).code, message: (err as Error).message }, path: req.path }, 'database unavailable');
      throw unavailableError('the database is unreachable; try again shortly');
    }
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

async function callUnbounded(shard: ShardContext, r: ApiRoute, names: string[], req: RequestData) {
  const principal = await shard.authenticate(req.headers.get('authorization'), req.ip);
  if (!scopeAllows(r.scope, principal.scopes)) {
    throw new ApiError('forbidden', `${actionWords(r)} needs a key with ${SCOPE_WORDS[r.scope]}; this key has ${principal.scopes.join(', ')}`);
  }
  if (r.adminOnly && principal.role !== 'admin') throw new ApiError('forbidden', `${actionWords(r)} needs the admin role`);
  const params: Record<string, string> = {};
  names.forEach((name, i) => {
    const v = req.params[i] ?? '';
    if (r.params?.[name] === 'uuid' && !isUuid(v)) throw new ApiError('bad-request', `path parameter "${name}" must be a UUID, got "${v}"`);
    params[name] = r.params?.[name] === 'uuid' ? v.toLowerCase() : v;
  });
  if (!r.query && [...req.query.keys()].length > 0) {
    throw new ApiError('bad-request', `${actionWords(r)} takes no query parameters, got "${[...req.query.keys()].join('", "')}"`);
  }
  const query = r.query ? validateQuery(r.query, req.query) : {};
  const body = r.body ? validate(r.body, parseJsonBody(req), 'body') : undefined;
  const c: ApiCall = { shard, principal, params, query, body, ip: req.ip };
  return jsonReply(r.status, await r.handle(c));
}

const UWS_METHOD = { get: 'get', post: 'post', put: 'put', delete: 'del' } as const;

export function installApi(shard: ShardContext): void {
  const allowed = new Map<string, string[]>();
  for (const r of ROUTES) {
    const names = [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);
    const pattern = API_PREFIX + r.path.replace(/\{(\w+)\}/g, ':$1');
    allowed.set(pattern, [...(allowed.get(pattern) ?? []), r.method.toUpperCase()]);
    route(shard.http, UWS_METHOD[r.method], pattern, names.length, (req) => call(shard, r, names, req));
  }
  for (const [pattern, methods] of allowed) {
    const count = (pattern.match(/:/g) ?? []).length;
    route(shard.http, 'any', pattern, count, () => ({
      ...problemReply('method-not-allowed', `this path accepts ${methods.join(', ')}`),
      headers: { 'content-type': 'application/problem+json', allow: methods.join(', ') },
    }));
  }
}
