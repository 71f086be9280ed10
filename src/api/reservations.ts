import { Type } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { Empty, Reservation, ReserveBody } from './schemas.js';
import type { Static } from '@sinclair/typebox';

// Reserved tunnel ids (admin): an id kept for one user or one team, and the release of an id
// held for its last user (--id-grace). The RegistryActor owns them: it admits Opens against them.
const REGISTRY_TIMEOUT_MS = 5_000;

async function list({ shard }: ApiCall) {
  return shard.main.ask({ type: 'tunnel-reservations' }, REGISTRY_TIMEOUT_MS);
}

async function reserve({ shard, params, body }: ApiCall<Static<typeof ReserveBody>>) {
  return shard.main.ask({ type: 'tunnel-reserve', id: params.id!, userId: body.user_id ?? null, teamId: body.team_id ?? null }, REGISTRY_TIMEOUT_MS);
}

async function release({ shard, params }: ApiCall) {
  return shard.main.ask({ type: 'tunnel-release', id: params.id! }, REGISTRY_TIMEOUT_MS);
}

const id = { id: 'string' } as const;

export const reservationRoutes: ApiRoute[] = [
  { operationId: 'List_reservations', summary: 'Tunnel ids reserved for a user or a team', method: 'get', path: '/reservations',
    scope: 'management', adminOnly: true, status: 200, response: Type.Array(Reservation), errors: ['forbidden'], handle: list },
  { operationId: 'Reserve_tunnel_id', summary: 'Reserve a tunnel id for one user or one team (exactly one of user_id, team_id); a live tunnel keeps running',
    method: 'put', path: '/reservations/{id}', scope: 'management', adminOnly: true, params: id, body: ReserveBody, status: 200, response: Reservation,
    errors: ['bad-request', 'forbidden', 'not-found', 'payload-too-large', 'unsupported-media-type'], handle: reserve },
  { operationId: 'Release_tunnel_id', summary: 'Drop the reservation of a tunnel id and the hold of its last user (--id-grace), so anyone may take it',
    method: 'delete', path: '/reservations/{id}', scope: 'management', adminOnly: true, params: id, status: 200, response: Empty,
    errors: ['forbidden', 'not-found'], handle: release },
];
