import { Command } from 'commander';
import type { ApiClient } from './client.js';
import { act, examples, parseChoice, pickOne, UUID_RE } from './common.js';
import { CliError, EXIT } from './errors.js';
import { formatAge, out, printJson, printTable, type Column } from './output.js';
import type { Team, TeamMember, TeamRole, User } from './types.js';

// burrow teams list|create|delete|members|add-member|remove-member|set-role
// Teams are named by id, a unique id prefix, or their name; users by id or (admins) email.

const TEAM_ROLES: readonly TeamRole[] = ['owner', 'member'];

export async function resolveTeam(client: ApiClient, ref: string): Promise<Team> {
  if (UUID_RE.test(ref)) return { id: ref, name: ref, created_at: '', updated_at: '' };
  let teams: Team[];
  try {
    teams = await client.get<Team[]>('/teams');
  } catch (e) {
    // A tunnels-only key (CI) may bind a tunnel to a team but not list teams.
    if (e instanceof CliError && e.status === 403) {
      // Listing teams needs the management scope on the server; no other route names teams.
      throw new CliError(
        EXIT.auth,
        'team id needed',
        `"${ref}" is not a team id, and this key cannot look teams up by name: listing teams needs a key with the management scope`,
        'pass the team id (`burrow teams list` with a management key shows it), or use a key with the management scope',
        403,
      );
    }
    throw e;
  }
  return pickOne(teams, ref, 'team', 'burrow teams list', (t) => [t.name]);
}

/**
 * A user id from an id or an email. Emails are looked up through GET /users, which only admins
 * may call; others are told to ask for the id (`burrow whoami` shows it).
 */
export async function resolveUserId(client: ApiClient, ref: string): Promise<string> {
  if (UUID_RE.test(ref)) return ref;
  if (ref === 'me') return (await client.get<User>('/me')).id;
  let users: User[];
  try {
    users = await client.get<User[]>('/users', { query: { limit: 1000 } });
  } catch (e) {
    if (e instanceof CliError && e.status === 403) {
      throw new CliError(EXIT.usage, 'user id needed', `only admins can look users up by email ("${ref}")`, 'ask the user for the id that `burrow whoami` prints');
    }
    throw e;
  }
  return pickOne(users, ref, 'user', 'burrow users list', (u) => [u.email]).id;
}

export function registerTeams(program: Command): void {
  const teams = program.command('teams').description('teams share tunnels; owners manage members');
  examples(teams, ['burrow teams create web', 'burrow teams add-member web 5b1c…', 'burrow teams members web']);

  examples(
    teams
      .command('list')
      .alias('ls')
      .description('list your teams (admins: all teams)')
      .action(
        act(async (ctx) => {
          const rows = await ctx.client().get<Team[]>('/teams');
          if (ctx.json) return printJson(rows);
          printTable(
            rows,
            [
              { header: 'ID', value: (t) => t.id },
              { header: 'NAME', value: (t) => t.name },
              { header: 'CREATED', value: (t) => formatAge(t.created_at) },
            ],
            'no teams: create one with `burrow teams create NAME`',
          );
        }),
      ),
    ['burrow teams list', 'burrow teams list --json'],
  );

  examples(
    teams
      .command('create')
      .description('create a team; you become its owner')
      .argument('<name>', 'team name, unique on the server')
      .option('--owner <user>', 'make another user the owner (admins only): user id or email')
      .action(
        act<{ owner?: string }>(async (ctx, name) => {
          const client = ctx.client();
          const owner_id = ctx.opts.owner ? await resolveUserId(client, ctx.opts.owner) : null;
          const team = await client.post<Team>(
            '/teams',
            { name, owner_id },
            { hints: { 409: 'team names are unique on the server: pick another (`burrow teams list` shows yours)', 403: 'only admins can create a team for another owner' } },
          );
          if (ctx.json) return printJson(team);
          out.line(`${out.paint('green', '✓')} created team ${out.paint('bold', team.name)} (${team.id})`);
          out.line(out.paint('dim', `add people with: burrow teams add-member ${team.name} USER_ID`));
        }),
      ),
    ['burrow teams create web', 'burrow teams create ops --owner alice@example.com'],
  );

  examples(
    teams
      .command('delete')
      .description('delete a team: removes its members and closes its live tunnels')
      .argument('<team>', 'team id, id prefix or name')
      .action(
        act(async (ctx, ref) => {
          const client = ctx.client();
          const team = await resolveTeam(client, ref);
          const res = await client.delete<object>(`/teams/${team.id}`, { hints: { 404: 'no such team visible to you; `burrow teams list`', 403: 'only team owners and admins can delete a team' } });
          if (ctx.json) return printJson(res);
          out.line(`${out.paint('green', '✓')} deleted team ${team.name}`);
        }),
      ),
    ['burrow teams delete web'],
  );

  examples(
    teams
      .command('members')
      .description('list the members of a team')
      .argument('<team>', 'team id, id prefix or name')
      .action(
        act(async (ctx, ref) => {
          const client = ctx.client();
          const team = await resolveTeam(client, ref);
          const rows = await client.get<TeamMember[]>(`/teams/${team.id}/members`, { hints: { 404: 'no such team visible to you; `burrow teams list`' } });
          if (ctx.json) return printJson(rows);
          // Admins can see who the ids are; for others the column is left out (GET /users is admin only).
          const emails = await client
            .get<User[]>('/users', { query: { limit: 1000 } })
            .then((users) => new Map(users.map((u) => [u.id, u.email])))
            .catch(() => null);
          const cols: Column<TeamMember>[] = [
            { header: 'USER ID', value: (m) => m.user_id },
            { header: 'ROLE', value: (m) => m.role, style: (m) => (m.role === 'owner' ? 'cyan' : undefined) },
            { header: 'ADDED', value: (m) => formatAge(m.created_at) },
          ];
          if (emails) cols.splice(1, 0, { header: 'EMAIL', value: (m) => emails.get(m.user_id) ?? '-' });
          printTable(
            rows,
            cols,
            'no members',
          );
        }),
      ),
    ['burrow teams members web'],
  );

  examples(
    teams
      .command('add-member')
      .description('add a user to a team (team owners and admins)')
      .argument('<team>', 'team id, id prefix or name')
      .argument('<user>', 'user id (from their `burrow whoami`), "me", or email for admins')
      .action(
        act(async (ctx, teamRef, userRef) => {
          const client = ctx.client();
          const team = await resolveTeam(client, teamRef);
          const userId = await resolveUserId(client, userRef);
          const m = await client.post<TeamMember>(
            `/teams/${team.id}/members`,
            { user_id: userId },
            { hints: { 409: 'that user is already a member', 404: 'no such team or user; `burrow teams list`', 403: 'only team owners and admins can add members' } },
          );
          if (ctx.json) return printJson(m);
          out.line(`${out.paint('green', '✓')} added ${m.user_id} to ${team.name} as ${m.role}`);
        }),
      ),
    ['burrow teams add-member web 5b1c2d3e-0000-4000-8000-000000000001', 'burrow teams add-member web bob@example.com   # admins'],
  );

  examples(
    teams
      .command('remove-member')
      .description('remove a user from a team (owners, admins, or yourself)')
      .argument('<team>', 'team id, id prefix or name')
      .argument('<user>', 'user id, or email for admins')
      .action(
        act(async (ctx, teamRef, userRef) => {
          const client = ctx.client();
          const team = await resolveTeam(client, teamRef);
          const userId = await resolveUserId(client, userRef);
          const res = await client.delete<object>(`/teams/${team.id}/members/${userId}`, {
            hints: { 409: 'a team keeps at least one owner: make someone else owner first', 404: 'no such team or member; `burrow teams members TEAM`' },
          });
          if (ctx.json) return printJson(res);
          out.line(`${out.paint('green', '✓')} removed ${userId} from ${team.name}`);
        }),
      ),
    ['burrow teams remove-member web 5b1c2d3e-0000-4000-8000-000000000001', 'burrow teams remove-member web me   # leave the team'],
  );

  examples(
    teams
      .command('set-role')
      .description("change a member's role in a team (owners and admins)")
      .argument('<team>', 'team id, id prefix or name')
      .argument('<user>', 'user id, or email for admins')
      .argument('<role>', 'owner or member', parseChoice('role', TEAM_ROLES))
      .action(
        act<Record<string, unknown>, [string, string, TeamRole]>(async (ctx, teamRef, userRef, role) => {
          const client = ctx.client();
          const team = await resolveTeam(client, teamRef);
          const userId = await resolveUserId(client, userRef);
          const m = await client.put<TeamMember>(`/teams/${team.id}/members/${userId}/role`, { role }, {
            hints: { 409: 'a team keeps at least one owner: promote someone else first', 404: 'no such team or member; `burrow teams members TEAM`' },
          });
          if (ctx.json) return printJson(m);
          out.line(`${out.paint('green', '✓')} ${m.user_id} is now ${m.role} of ${team.name}`);
        }),
      ),
    ['burrow teams set-role web 5b1c2d3e-0000-4000-8000-000000000001 owner'],
  );
}
