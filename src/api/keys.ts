import { Type } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { ApiKey, CreateKeyBody, CreatedKey, Empty } from './schemas.js';
import type { Static } from '@sinclair/typebox';
import { getKey, listKeys, revokeKey } from '../db/api-keys.js';
import { issueKey, invalidateKeys } from '../auth/api-keys.js';
import { ApiError } from '../errors.js';
import { SCOPES } from '../protocol/roles.js';
import { getUser } from '../db/users.js';

async function listMyKeys({ shard, principal }: ApiCall) {
  return listKeys(shard.sql, principal.userId);
}

async function createKey(call: ApiCall<Static<typeof CreateKeyBody>>) {
  return issueFor(call, call.principal.userId);
}

/** Create_user_key (admin): a key for another user, e.g. one an admin just created. */
async function createUserKey(call: ApiCall<Static<typeof CreateKeyBody>>) {
  const u = await getUser(call.shard.sql, call.params.id!);
  if (!u) throw new ApiError('not-found', `no user ${call.params.id}`);
  // 409, not 400: the request is well-formed, the user's state refuses it (as other state conflicts).
  if (u.deactivated_at) throw new ApiError('conflict', `${u.email} is deactivated: reactivate them first (POST /users/${u.id}/reactivate)`);
  try {
    return await issueFor(call, u.id);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'conflict') {
      throw new ApiError('conflict', `${u.email} already has an active key named "${call.body.name.trim()}"; choose another name`);
    }
    throw err;
  }
}

async function issueFor({ shard, principal, body }: ApiCall<Static<typeof CreateKeyBody>>, userId: string) {
  const scopes = body.scopes ?? [...SCOPES];
  const missing = scopes.filter((s) => !principal.scopes.includes(s));
  if (missing.length) {
    throw new ApiError('forbidden', `a key can only create keys within its own scopes; this key lacks ${missing.join(', ')}`);
  }
  let expiresAt: Date | null = null;
  if (body.expires_at) {
    expiresAt = new Date(body.expires_at);
    if (expiresAt.getTime() <= Date.now()) throw new ApiError('bad-request', `expires_at ${body.expires_at} is in the past`);
  }
  // A key cannot mint one that outlives it (a short-lived CI key must not leave a permanent one
  // behind): no expiry, or a later one, becomes the creator's. Only an admin's key without
  // expiry creates keys without that bound.
  const creatorEndsMs = principal.keyExpiresAtMs;
  if (creatorEndsMs !== null && (expiresAt === null || expiresAt.getTime() > creatorEndsMs)) expiresAt = new Date(creatorEndsMs);
  return issueKey(shard, { userId, name: body.name.trim(), scopes, expiresAt, replaceSameName: false });
}

async function revokeMyKey({ shard, principal, params }: ApiCall) {
  if (!(await revokeAndEnd(shard, principal.userId, params.id!))) throw new ApiError('not-found', `no active key ${params.id} among your keys`);
  return {};
}

/**
 * The one way a key is revoked through the API: the key stops working on every shard, and its
 * control connections end (their tunnels with them), before the call answers.
 */
async function revokeAndEnd(shard: ApiCall['shard'], userId: string, keyId: string): Promise<boolean> {
  const revoked = await revokeKey(shard.sql, userId, keyId);
  if (!revoked) return false;
  await invalidateKeys(shard, [revoked.id], [], 'the API key was revoked');
  return true;
}

async function existingUser(call: ApiCall) {
  const u = await getUser(call.shard.sql, call.params.id!);
  if (!u) throw new ApiError('not-found', `no user ${call.params.id}`);
  return u;
}

/** List_user_keys (admin): what List_keys shows that user, e.g. to find a leaked key. */
async function listUserKeys(call: ApiCall) {
  const u = await existingUser(call);
  return listKeys(call.shard.sql, u.id);
}

async function getUserKey(call: ApiCall) {
  const u = await existingUser(call);
  const k = await getKey(call.shard.sql, u.id, call.params.key!);
  if (!k) throw new ApiError('not-found', `${u.email} has no key ${call.params.key}`);
  return k;
}

/**
 * Revoke_user_key (admin): the answer to a member's leaked key. Deactivating the user is not
 * one: reactivation brings every unrevoked key back, the leaked one too.
 */
async function revokeUserKey(call: ApiCall) {
  const u = await existingUser(call);
  if (!(await revokeAndEnd(call.shard, u.id, call.params.key!))) throw new ApiError('not-found', `${u.email} has no active key ${call.params.key}`);
  return {};
}

const userKey = { id: 'uuid', key: 'uuid' } as const;

export const keyRoutes: ApiRoute[] = [
  { operationId: 'List_keys', summary: 'List your active and expired keys, newest first', method: 'get', path: '/keys',
    scope: 'management', status: 200, response: Type.Array(ApiKey), errors: ['forbidden'], handle: listMyKeys },
  { operationId: 'Create_key', summary: 'Create a key; the plaintext is returned only here', method: 'post', path: '/keys',
    scope: 'management', body: CreateKeyBody, status: 201, response: CreatedKey,
    errors: ['bad-request', 'forbidden', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: createKey },
  { operationId: 'Create_user_key', summary: "Create a key for another user (admin); the plaintext is returned only here", method: 'post',
    path: '/users/{id}/keys', adminOnly: true, scope: 'management', params: { id: 'uuid' }, body: CreateKeyBody, status: 201, response: CreatedKey,
    errors: ['bad-request', 'forbidden', 'not-found', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: createUserKey },
  { operationId: 'List_user_keys', summary: "List another user's active and expired keys, newest first (admin)", method: 'get', path: '/users/{id}/keys',
    adminOnly: true, scope: 'management', params: { id: 'uuid' }, status: 200, response: Type.Array(ApiKey), errors: ['bad-request', 'forbidden', 'not-found'], handle: listUserKeys },
  { operationId: 'Get_user_key', summary: "One key of another user, revoked or not (admin)", method: 'get', path: '/users/{id}/keys/{key}',
    adminOnly: true, scope: 'management', params: userKey, status: 200, response: ApiKey, errors: ['bad-request', 'forbidden', 'not-found'], handle: getUserKey },
  { operationId: 'Revoke_user_key', summary: "Revoke another user's key (admin): it stops working and its tunnel connections end on every shard before this answers",
    method: 'delete', path: '/users/{id}/keys/{key}', adminOnly: true, scope: 'management', params: userKey, status: 200, response: Empty,
    errors: ['bad-request', 'forbidden', 'not-found'], handle: revokeUserKey },
  { operationId: 'Revoke_key', summary: 'Revoke one of your keys (effective on every shard before this answers)', method: 'delete', path: '/keys/{id}',
    scope: 'management', params: { id: 'uuid' }, status: 200, response: Empty, errors: ['bad-request', 'forbidden', 'not-found'], handle: revokeMyKey },
];
