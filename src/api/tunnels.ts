import { Type } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { Empty, Tunnel } from './schemas.js';
import { getMembership, teamIdsOf, teamNames } from '../db/teams.js';
import { userNames } from '../db/users.js';
import type { Sql } from '../db/sql.js';
import { ApiError } from '../errors.js';
import type { TunnelInfo } from '../protocol/messages.js';

// Tunnels are live state: the RegistryActor on the main thread answers, not the database.
const REGISTRY_TIMEOUT_MS = 5_000;
const CLOSE_TIMEOUT_MS = 10_000;

/** The owner's and team's names next to their ids (the caller already may see the tunnel). */
async function named(sql: Sql, tunnels: TunnelInfo[]) {
  const [users, teams] = await Promise.all([
    userNames(sql, [...new Set(tunnels.map((t) => t.owner_id))]),
    teamNames(sql, [...new Set(tunnels.flatMap((t) => (t.team_id ? [t.team_id] : [])))]),
  ]);
  return tunnels.map((t) => ({
    ...t,
    owner_name: users.get(t.owner_id)?.name ?? null,
    owner_email: users.get(t.owner_id)?.email ?? null,
    team_name: t.team_id ? (teams.get(t.team_id) ?? null) : null,
  }));
}

async function list({ shard, principal }: ApiCall) {
  const teamIds = principal.role === 'admin' ? [] : await teamIdsOf(shard.sql, principal.userId);
  return named(shard.sql, await shard.main.ask({ type: 'tunnels-list', principal, teamIds }, REGISTRY_TIMEOUT_MS));
}

/** The tunnel if the caller may see it (admin, owner, or member of its team), else 404. */
async function visible({ shard, principal, params }: ApiCall): Promise<{ t: TunnelInfo; teamRole: string | null }> {
  const t = await shard.main.ask({ type: 'tunnels-get', id: params.id! }, REGISTRY_TIMEOUT_MS);
  if (t) {
    const m = t.team_id ? await getMembership(shard.sql, t.team_id, principal.userId) : null;
    if (principal.role === 'admin' || t.owner_id === principal.userId || m) return { t, teamRole: m?.role ?? null };
  }
  throw new ApiError('not-found', `no live tunnel "${params.id}"`);
}

async function get(call: ApiCall) {
  return (await named(call.shard.sql, [(await visible(call)).t]))[0];
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
