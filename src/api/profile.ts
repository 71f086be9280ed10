import { Type, type Static } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { Account, Session, SessionsQuery, User } from './schemas.js';
import { listAccounts } from '../db/accounts.js';
import { getUser } from '../db/users.js';
import { listSessions } from '../db/sessions.js';
import { ApiError } from '../errors.js';

const DEFAULT_LIMIT = 50;

async function me({ shard, principal }: ApiCall) {
  const user = await getUser(shard.sql, principal.userId);
  if (!user) throw new ApiError('not-found', 'your user no longer exists');
  return user;
}

async function accounts({ shard, principal }: ApiCall) {
  return listAccounts(shard.sql, principal.userId);
}

async function sessions({ shard, principal, query }: ApiCall<unknown, Static<typeof SessionsQuery>>) {
  if (query.all && principal.role !== 'admin') throw new ApiError('forbidden', 'all=true lists every user\'s sessions and needs the admin role');
  return listSessions(shard.sql, query.all ? null : principal.userId, query.limit ?? DEFAULT_LIMIT);
}

export const profileRoutes: ApiRoute[] = [
  { operationId: 'List_accounts', summary: 'Login accounts linked to you', method: 'get', path: '/accounts',
    scope: 'any', status: 200, response: Type.Array(Account), errors: [], handle: accounts },
  { operationId: 'Get_current_user', summary: 'The user the key belongs to', method: 'get', path: '/me',
    scope: 'any', status: 200, response: User, errors: ['not-found'], handle: me },
  { operationId: 'List_sessions', summary: 'Tunnel sessions, newest first (all=true: everyone\'s, admins only)', method: 'get', path: '/sessions',
    scope: 'management', query: SessionsQuery, status: 200, response: Type.Array(Session), errors: ['bad-request', 'forbidden'], handle: sessions },
];
