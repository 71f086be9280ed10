import { Type } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { ApiKey, CreateKeyBody, CreatedKey, Empty } from './schemas.js';
import type { Static } from '@sinclair/typebox';
import { listKeys, revokeKey } from '../db/api-keys.js';
import { issueKey, invalidateKeys } from '../auth/api-keys.js';
import { ApiError } from '../errors.js';
import { SCOPES } from '../auth/scopes.js';

async function listMyKeys({ shard, principal }: ApiCall) {
  return listKeys(shard.sql, principal.userId);
}

async function createKey({ shard, principal, body }: ApiCall<Static<typeof CreateKeyBody>>) {
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
  return issueKey(shard, { userId: principal.userId, name: body.name.trim(), scopes, expiresAt, replaceSameName: false });
}

async function revokeMyKey({ shard, principal, params }: ApiCall) {
  const revoked = await revokeKey(shard.sql, principal.userId, params.id!);
  if (!revoked) throw new ApiError('not-found', `no active key ${params.id} among your keys`);
  await invalidateKeys(shard, [revoked.id], [], 'the API key was revoked');
  return {};
}

export const keyRoutes: ApiRoute[] = [
  { operationId: 'List_keys', summary: 'List your active and expired keys, newest first', method: 'get', path: '/keys',
    scope: 'management', status: 200, response: Type.Array(ApiKey), errors: ['forbidden'], handle: listMyKeys },
  { operationId: 'Create_key', summary: 'Create a key; the plaintext is returned only here', method: 'post', path: '/keys',
    scope: 'management', body: CreateKeyBody, status: 201, response: CreatedKey,
    errors: ['bad-request', 'forbidden', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: createKey },
  { operationId: 'Revoke_key', summary: 'Revoke one of your keys (effective on every shard before this answers)', method: 'delete', path: '/keys/{id}',
    scope: 'management', params: { id: 'uuid' }, status: 200, response: Empty, errors: ['bad-request', 'forbidden', 'not-found'], handle: revokeMyKey },
];
