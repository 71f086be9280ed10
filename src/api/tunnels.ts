import { Type } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { Empty, Tunnel } from './schemas.js';
import { getMembership, teamIdsOf } from '../db/teams.js';
import { ApiError } from '../errors.js';
import type { TunnelInfo } from '../protocol/messages.js';

// Tunnels are live state: the RegistryActor on the main thread answers, not the database.
const REGISTRY_TIMEOUT_MS = 5_000;
const CLOSE_TIMEOUT_MS = 10_000;

async function list({ shard, principal }: ApiCall) {
  const teamIds = principal.role === 'admin' ? [] : await teamIdsOf(shard.sql, principal.userId);
  return shard.main.ask<TunnelInfo[]>({ type: 'tunnels-list', principal, teamIds }, REGISTRY_TIMEOUT_MS);
}

/** The tunnel if the caller may see it (admin, owner, or member of its team), else 404. */
async function visible({ shard, principal, params }: ApiCall): Promise<{ t: TunnelInfo; teamRole: string | null }> {
  const t = await shard.main.ask<TunnelInfo | null>({ type: 'tunnels-get', id: params.id! }, REGISTRY_TIMEOUT_MS);
  if (t) {
    const m = t.team_id ? await getMembership(shard.sql, t.team_id, principal.userId) : null;
    if (principal.role === 'admin' || t.owner_id === principal.userId || m) return { t, teamRole: m?.role ?? null };
  }
  throw new ApiError('not-found', `no live tunnel "${params.id}"`);
}

async function get(call: ApiCall) {
  return (await visible(call)).t;
}

async function remove(call: ApiCall) {
  const { t, teamRole } = await visible(call);
  const p = call.principal;
  if (!(p.role === 'admin' || t.owner_id === p.userId || teamRole === 'owner')) {
    throw new ApiError('forbidden', 'deleting a tunnel needs its owner, an owner of its team, or an admin');
  }
  await call.shard.main.ask({ type: 'tunnels-close', id: t.id, reason: 'deleted through the API' }, CLOSE_TIMEOUT_MS);
  return {};
}

const tunnel = { id: 'string' } as const;

export const tunnelRoutes: ApiRoute[] = [
  { operationId: 'List_tunnels', summary: 'Live tunnels you own or that belong to your teams (admins: all)', method: 'get', path: '/tunnels',
    scope: 'tunnels-or-management', status: 200, response: Type.Array(Tunnel), errors: ['forbidden'], handle: list },
  { operationId: 'Get_tunnel', summary: 'One live tunnel', method: 'get', path: '/tunnels/{id}',
    scope: 'tunnels-or-management', params: tunnel, status: 200, response: Tunnel, errors: ['forbidden', 'not-found'], handle: get },
  { operationId: 'Delete_tunnel', summary: 'Close a tunnel; its client is told not to reconnect', method: 'delete', path: '/tunnels/{id}',
    scope: 'tunnels-or-management', params: tunnel, status: 200, response: Empty, errors: ['forbidden', 'not-found'], handle: remove },
];
