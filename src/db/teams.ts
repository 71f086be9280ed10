import { nameKey } from '../names.js';
import type { Sql } from './sql.js';
import { isoRequired } from './sql.js';
import type { Team, TeamMember } from '../protocol/api-views.js';
import type { TeamRole } from '../protocol/roles.js';

interface TeamRow {
  id: string;
  name: string;
  created_at: Date;
  updated_at: Date;
}
interface MemberRow {
  id: string;
  team_id: string;
  user_id: string;
  role: TeamRole;
  created_at: Date;
}

export const toTeam = (r: TeamRow): Team => ({
  id: r.id,
  name: r.name,
  created_at: isoRequired(r.created_at),
  updated_at: isoRequired(r.updated_at),
});

export const toMember = (r: MemberRow): TeamMember => ({
  id: r.id,
  team_id: r.team_id,
  user_id: r.user_id,
  role: r.role,
  created_at: isoRequired(r.created_at),
});

export async function getTeam(sql: Sql, id: string): Promise<Team | null> {
  const [r] = await sql<TeamRow[]>`select * from teams where id = ${id}`;
  return r ? toTeam(r) : null;
}

export async function listTeams(sql: Sql, userId: string | null): Promise<Team[]> {
  const rows =
    userId === null
      ? await sql<TeamRow[]>`select * from teams order by name`
      : await sql<TeamRow[]>`select t.* from teams t join team_members m on m.team_id = t.id and m.user_id = ${userId} order by t.name`;
  return rows.map(toTeam);
}

/** The id of the team called `name` if the user belongs to it (a tunnel bound by team name). */
export async function memberTeamIdByName(sql: Sql, userId: string, name: string): Promise<string | null> {
  const [r] = await sql<{ id: string }[]>`select t.id from teams t join team_members m on m.team_id = t.id and m.user_id = ${userId} where t.name_key = ${nameKey(name)}`;
  return r?.id ?? null;
}

/** Names of these teams (tunnel listings show them), by id. */
export async function teamNames(sql: Sql, ids: readonly string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await sql<{ id: string; name: string }[]>`select id, name from teams where id = any(${sql.array([...ids])}::uuid[])`;
  return new Map(rows.map((r) => [r.id, r.name]));
}

/** Team ids the user belongs to (tunnel visibility). */
export async function teamIdsOf(sql: Sql, userId: string): Promise<string[]> {
  const rows = await sql<{ team_id: string }[]>`select team_id from team_members where user_id = ${userId}`;
  return rows.map((r) => r.team_id);
}

export async function createTeamWithOwner(sql: Sql, name: string, ownerId: string): Promise<Team> {
  return sql.begin(async (tx) => {
    const [t] = await tx<TeamRow[]>`insert into teams (name, name_key) values (${name}, ${nameKey(name)}) returning *`;
    await tx`insert into team_members (team_id, user_id, role) values (${t!.id}, ${ownerId}, 'owner')`;
    return toTeam(t!);
  }) as Promise<Team>;
}

export async function deleteTeam(sql: Sql, id: string): Promise<boolean> {
  const rows = await sql`delete from teams where id = ${id} returning id`;
  return rows.length > 0;
}

/** Which of these (team, user) pairs are memberships, as "team user" (a cluster node checks `member` notifications against them). */
export async function memberships(sql: Sql, pairs: readonly { team: string; user: string }[]): Promise<Set<string>> {
  const rows = await sql<{ team_id: string; user_id: string }[]>`
    select m.team_id, m.user_id from team_members m
    join unnest(${pairs.map((p) => p.team)}::uuid[], ${pairs.map((p) => p.user)}::uuid[]) as q(team_id, user_id)
      on m.team_id = q.team_id and m.user_id = q.user_id`;
  return new Set(rows.map((r) => `${r.team_id} ${r.user_id}`));
}

export async function getMembership(sql: Sql, teamId: string, userId: string): Promise<TeamMember | null> {
  const [r] = await sql<MemberRow[]>`select * from team_members where team_id = ${teamId} and user_id = ${userId}`;
  return r ? toMember(r) : null;
}

export async function listMembers(sql: Sql, teamId: string): Promise<TeamMember[]> {
  const rows = await sql<MemberRow[]>`select * from team_members where team_id = ${teamId} order by created_at, id`;
  return rows.map(toMember);
}

export async function addMember(sql: Sql, teamId: string, userId: string): Promise<TeamMember> {
  const [r] = await sql<MemberRow[]>`insert into team_members (team_id, user_id, role) values (${teamId}, ${userId}, 'member') returning *`;
  return toMember(r!);
}

/**
 * Removes a member or changes their role, refusing to leave the team without an owner.
 * Locks the team's owner rows first so two concurrent demotions cannot both pass the check.
 */
export async function changeMember(
  sql: Sql,
  teamId: string,
  userId: string,
  change: { remove: true } | { role: TeamRole },
): Promise<TeamMember | 'last-owner' | null> {
  return sql.begin(async (tx) => {
    const owners = await tx<{ user_id: string }[]>`select user_id from team_members where team_id = ${teamId} and role = 'owner' for update`;
    const [m] = await tx<MemberRow[]>`select * from team_members where team_id = ${teamId} and user_id = ${userId} for update`;
    if (!m) return null;
    const losesOwner = m.role === 'owner' && ('remove' in change || change.role !== 'owner');
    if (losesOwner && owners.length <= 1) return 'last-owner' as const;
    if ('remove' in change) {
      await tx`delete from team_members where id = ${m.id}`;
      return toMember(m);
    }
    const [r] = await tx<MemberRow[]>`update team_members set role = ${change.role} where id = ${m.id} returning *`;
    return toMember(r!);
  }) as Promise<TeamMember | 'last-owner' | null>;
}
