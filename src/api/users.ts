import { canonicalName, nameProblem } from '../names.js';
import { Type, type Static } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { CreateUserBody, RoleBody, User, UsersQuery } from './schemas.js';
import * as users from '../db/users.js';
import { invalidateKeys } from '../auth/api-keys.js';
import { ApiError } from '../errors.js';
import type { Sql } from '../db/sql.js';
import type { Role } from '../protocol/roles.js';

const DEFAULT_LIMIT = 50;
const CLOSE_TIMEOUT_MS = 10_000;

async function list({ shard, query }: ApiCall<unknown, Static<typeof UsersQuery>>) {
  return users.listUsers(shard.sql, query.limit ?? DEFAULT_LIMIT);
}

async function create({ shard, body }: ApiCall<Static<typeof CreateUserBody>>) {
  const email = canonicalName(body.email);
  const problem = nameProblem(email, 'the email address') ?? (body.name === undefined ? null : nameProblem(canonicalName(body.name), 'the name'));
  if (problem) throw new ApiError('bad-request', problem);
  // Without a name the address's local part stands in: tables always show something.
  const u = await users.createUser(shard.sql, { email, name: body.name === undefined ? email.split('@')[0]! : canonicalName(body.name), role: body.role ?? 'member' });
  if (u === 'taken') throw new ApiError('conflict', `a user with email ${email} already exists (emails are compared case-insensitively, in Unicode NFKC form)`);
  return u;
}

async function existing(sql: Sql, id: string) {
  const u = await users.getUser(sql, id);
  if (!u) throw new ApiError('not-found', `no user ${id}`);
  return u;
}

/** The change must leave at least one active admin, or nobody could ever manage users again. */
async function changeKeepingAnAdmin(sql: Sql, id: string, change: { role: Role } | { deactivate: true }) {
  const u = await users.changeUserKeepingAnAdmin(sql, id, change);
  if (u === null) throw new ApiError('not-found', `no user ${id}`);
  if (u === 'last-admin') throw new ApiError('conflict', 'this is the last active admin; promote another user to admin first');
  return u;
}

async function deactivate({ shard, principal, params }: ApiCall) {
  if (params.id === principal.userId) throw new ApiError('conflict', 'you cannot deactivate yourself; ask another admin');
  const u = await changeKeepingAnAdmin(shard.sql, params.id!, { deactivate: true });
  // Keys stop working at once on every shard, the user's control connections end (their
  // tunnels with them), and tunnels left elsewhere close.
  await invalidateKeys(shard, [], [u.id], 'the user was deactivated');
  await shard.main.ask({ type: 'tunnels-close-owner', userId: u.id, teamId: null, reason: 'the user was deactivated' }, CLOSE_TIMEOUT_MS);
  return u;
}

async function reactivate({ shard, params }: ApiCall) {
  await existing(shard.sql, params.id!);
  return (await users.setUserDeactivated(shard.sql, params.id!, false))!;
}

async function setRole({ shard, params, body }: ApiCall<Static<typeof RoleBody>>) {
  const target = await existing(shard.sql, params.id!);
  if (target.role === body.role) return target;
  const u = await changeKeepingAnAdmin(shard.sql, params.id!, { role: body.role });
  // Cached principals carry the role. Live control connections stay: holding a tunnel needs
  // the key's `tunnels` scope (and team membership), which no role grants or removes.
  await invalidateKeys(shard, [], [u.id]);
  return u;
}

const user = { id: 'uuid' } as const;

export const userRoutes: ApiRoute[] = [
  { operationId: 'List_users', summary: 'All users, newest first', method: 'get', path: '/users', adminOnly: true,
    scope: 'management', query: UsersQuery, status: 200, response: Type.Array(User), errors: ['bad-request', 'forbidden'], handle: list },
  { operationId: 'Create_user', summary: 'Add a user (member unless role says admin); they log in with a key or a provider vouching for that email',
    method: 'post', path: '/users', adminOnly: true, scope: 'management', body: CreateUserBody, status: 201, response: User,
    errors: ['bad-request', 'forbidden', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: create },
  { operationId: 'Deactivate_user', summary: 'Deactivate a user: keys stop working, live tunnels close', method: 'post', path: '/users/{id}/deactivate', adminOnly: true,
    scope: 'management', params: user, status: 200, response: User, errors: ['bad-request', 'forbidden', 'not-found', 'conflict'], handle: deactivate },
  { operationId: 'Reactivate_user', summary: 'Reactivate a user; their unrevoked keys work again', method: 'post', path: '/users/{id}/reactivate', adminOnly: true,
    scope: 'management', params: user, status: 200, response: User, errors: ['bad-request', 'forbidden', 'not-found'], handle: reactivate },
  { operationId: 'Set_user_role', summary: 'Make a user admin or member', method: 'put', path: '/users/{id}/role', adminOnly: true,
    scope: 'management', params: user, body: RoleBody, status: 200, response: User,
    errors: ['bad-request', 'forbidden', 'not-found', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: setRole },
];
