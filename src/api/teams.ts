import { canonicalName, nameProblem } from '../names.js';
import { Type, type Static } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { AddMemberBody, CreateTeamBody, Empty, Team, TeamMember, TeamRoleBody } from './schemas.js';
import * as teams from '../db/teams.js';
import { getUser } from '../db/users.js';
import { uniqueViolation } from '../db/sql.js';
import { ApiError } from '../errors.js';
import type { Principal } from '../protocol/messages.js';
import type { ShardContext } from '../edge/shard-context.js';

const CLOSE_TIMEOUT_MS = 10_000;

type Access = 'admin' | 'owner' | 'member';

/** The caller's standing in a team; a team they cannot see does not exist for them (404). */
async function access(shard: ShardContext, p: Principal, teamId: string): Promise<Access> {
  const [team, m] = await Promise.all([teams.getTeam(shard.sql, teamId), teams.getMembership(shard.sql, teamId, p.userId)]);
  if (!team || (!m && p.role !== 'admin')) throw new ApiError('not-found', `no team ${teamId}`);
  if (p.role === 'admin') return 'admin';
  return m!.role;
}

function requireManager(a: Access, what: string): void {
  if (a === 'member') throw new ApiError('forbidden', `${what} needs the team's owner role or the admin role`);
}

async function list({ shard, principal }: ApiCall) {
  return teams.listTeams(shard.sql, principal.role === 'admin' ? null : principal.userId);
}

async function create({ shard, principal, body }: ApiCall<Static<typeof CreateTeamBody>>) {
  // Lower-case as path uuids are: an owner_id that is your own id in capitals is still you.
  const ownerId = (body.owner_id ?? principal.userId).toLowerCase();
  if (ownerId !== principal.userId) {
    if (principal.role !== 'admin') throw new ApiError('forbidden', 'creating a team for another owner needs the admin role');
    if (!(await getUser(shard.sql, ownerId))) throw new ApiError('not-found', `no user ${ownerId} to own the team`);
  }
  const name = canonicalName(body.name);
  const problem = nameProblem(name, 'the team name');
  if (problem) throw new ApiError('bad-request', problem);
  try {
    return await teams.createTeamWithOwner(shard.sql, name, ownerId);
  } catch (err) {
    if (uniqueViolation(err)) throw new ApiError('conflict', `a team named "${name}" (or one that looks the same: names are compared case-insensitively, in Unicode NFKC form) already exists`);
    throw err;
  }
}

async function remove({ shard, principal, params }: ApiCall) {
  requireManager(await access(shard, principal, params.id!), 'deleting a team');
  if (!(await teams.deleteTeam(shard.sql, params.id!))) throw new ApiError('not-found', `no team ${params.id}`);
  await shard.main.ask({ type: 'tunnels-close-owner', userId: null, teamId: params.id!, reason: 'the team was deleted' }, CLOSE_TIMEOUT_MS);
  return {};
}

async function members({ shard, principal, params }: ApiCall) {
  await access(shard, principal, params.id!);
  return teams.listMembers(shard.sql, params.id!);
}

async function addMember({ shard, principal, params, body }: ApiCall<Static<typeof AddMemberBody>>) {
  requireManager(await access(shard, principal, params.id!), 'adding members');
  if (!(await getUser(shard.sql, body.user_id))) throw new ApiError('not-found', `no user ${body.user_id}`);
  try {
    return await teams.addMember(shard.sql, params.id!, body.user_id);
  } catch (err) {
    if (uniqueViolation(err)) throw new ApiError('conflict', `user ${body.user_id} is already a member of team ${params.id}`);
    throw err;
  }
}

function lastOwner(teamId: string): ApiError {
  return new ApiError('conflict', `team ${teamId} would be left without an owner; make another member owner first`);
}

async function removeMember({ shard, principal, params }: ApiCall) {
  const a = await access(shard, principal, params.id!);
  if (params.user_id !== principal.userId) requireManager(a, 'removing other members');
  const r = await teams.changeMember(shard.sql, params.id!, params.user_id!, { remove: true });
  if (r === null) throw new ApiError('not-found', `user ${params.user_id} is not a member of team ${params.id}`);
  if (r === 'last-owner') throw lastOwner(params.id!);
  // Their tunnels bound to the team end before this answers (admission re-checks membership).
  const reason = params.user_id === principal.userId ? `you left team ${params.id}` : `you were removed from team ${params.id}`;
  await shard.main.ask({ type: 'tunnels-close-member', teamId: params.id!, userId: params.user_id!, reason }, CLOSE_TIMEOUT_MS);
  return {};
}

async function setRole({ shard, principal, params, body }: ApiCall<Static<typeof TeamRoleBody>>) {
  requireManager(await access(shard, principal, params.id!), 'changing member roles');
  const r = await teams.changeMember(shard.sql, params.id!, params.user_id!, { role: body.role });
  if (r === null) throw new ApiError('not-found', `user ${params.user_id} is not a member of team ${params.id}`);
  if (r === 'last-owner') throw lastOwner(params.id!);
  return r;
}

const team = { id: 'uuid' } as const;
const teamMember = { id: 'uuid', user_id: 'uuid' } as const;

export const teamRoutes: ApiRoute[] = [
  { operationId: 'List_teams', summary: 'Teams you belong to (admins: all teams)', method: 'get', path: '/teams',
    scope: 'management', status: 200, response: Type.Array(Team), errors: ['forbidden'], handle: list },
  { operationId: 'Create_team', summary: 'Create a team; you (or owner_id, admins only) become its owner', method: 'post', path: '/teams',
    scope: 'management', body: CreateTeamBody, status: 201, response: Team,
    errors: ['bad-request', 'forbidden', 'not-found', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: create },
  { operationId: 'Delete_team', summary: 'Delete a team (owners, admins); closes its live tunnels', method: 'delete', path: '/teams/{id}',
    scope: 'management', params: team, status: 200, response: Empty, errors: ['bad-request', 'forbidden', 'not-found'], handle: remove },
  { operationId: 'List_team_members', summary: 'Members of a team (its members, admins)', method: 'get', path: '/teams/{id}/members',
    scope: 'management', params: team, status: 200, response: Type.Array(TeamMember), errors: ['bad-request', 'forbidden', 'not-found'], handle: members },
  { operationId: 'Add_team_member', summary: 'Add a user as member (owners, admins)', method: 'post', path: '/teams/{id}/members',
    scope: 'management', params: team, body: AddMemberBody, status: 201, response: TeamMember,
    errors: ['bad-request', 'forbidden', 'not-found', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: addMember },
  { operationId: 'Remove_team_member', summary: 'Remove a member (owners, admins, or yourself)', method: 'delete', path: '/teams/{id}/members/{user_id}',
    scope: 'management', params: teamMember, status: 200, response: Empty, errors: ['bad-request', 'forbidden', 'not-found', 'conflict'], handle: removeMember },
  { operationId: 'Set_team_member_role', summary: 'Set a member\'s team role (owners, admins)', method: 'put', path: '/teams/{id}/members/{user_id}/role',
    scope: 'management', params: teamMember, body: TeamRoleBody, status: 200, response: TeamMember,
    errors: ['bad-request', 'forbidden', 'not-found', 'conflict', 'payload-too-large', 'unsupported-media-type'], handle: setRole },
];
