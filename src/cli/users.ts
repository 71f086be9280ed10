import { Command } from 'commander';
import { act, examples, parseChoice, positiveInt } from './common.js';
import { out, formatAge, printJson, printTable } from './output.js';
import { resolveUserId } from './teams.js';
import type { Role, User } from './types.js';

// burrow users list|create|deactivate|reactivate|set-role (admin only on the server side).

const ROLES: readonly Role[] = ['admin', 'member'];
const ADMIN_HINT = 'user management needs an admin key with the `management` scope';

export function userStatus(u: User): 'active' | 'deactivated' {
  return u.deactivated_at ? 'deactivated' : 'active';
}

export function registerUsers(program: Command): void {
  const users = program.command('users').description('manage users (admins)');
  examples(users, [
    'burrow users list',
    'burrow users create bob@example.com --name Bob',
    'burrow keys create laptop --user bob@example.com',
    'burrow keys list --user bob@example.com',
    'burrow keys revoke laptop --user bob@example.com',
    'burrow users set-role bob@example.com admin',
    'burrow users deactivate bob@example.com',
  ]);

  examples(
    users
      .command('list')
      .alias('ls')
      .description('list users, newest first')
      .option('--limit <n>', 'at most this many (1-1000, default 50)', positiveInt('--limit', 1000))
      .action(
        act<{ limit?: number }>(async (ctx) => {
          const rows = await ctx.client().get<User[]>('/users', { query: { limit: ctx.opts.limit }, hints: { 403: ADMIN_HINT } });
          if (ctx.json) return printJson(rows);
          printTable(
            rows,
            [
              { header: 'ID', value: (u) => u.id },
              { header: 'EMAIL', value: (u) => u.email },
              { header: 'NAME', value: (u) => u.name ?? '-' },
              { header: 'ROLE', value: (u) => u.role, style: (u) => (u.role === 'admin' ? 'cyan' : undefined) },
              { header: 'STATUS', value: userStatus, style: (u) => (u.deactivated_at ? 'red' : 'green') },
              { header: 'CREATED', value: (u) => formatAge(u.created_at) },
            ],
            'no users',
          );
        }),
      ),
    ['burrow users list', 'burrow users list --limit 500 --json'],
  );

  examples(
    users
      .command('create')
      .description('add a user (no identity provider needed); give them a key with `burrow keys create NAME --user EMAIL`')
      .argument('<email>', "the user's email: a provider login that vouches for it later is this same user")
      .option('--name <name>', 'display name (default: the part of the email before @)')
      .option('--role <role>', 'admin or member (default: member)', parseChoice('role', ROLES))
      .action(
        act<{ name?: string; role?: Role }>(async (ctx, email) => {
          const u = await ctx.client().post<User>(
            '/users',
            { email, ...(ctx.opts.name !== undefined ? { name: ctx.opts.name } : {}), ...(ctx.opts.role ? { role: ctx.opts.role } : {}) },
            { hints: { 403: ADMIN_HINT, 409: `a user with that email exists; \`burrow users list\`` } },
          );
          if (ctx.json) return printJson(u);
          out.line(`${out.paint('green', '✓')} created ${u.role} ${u.email} (${u.id})`);
          out.line(`  give them a key: burrow keys create NAME --user ${u.email}`);
        }),
      ),
    [
      'burrow users create bob@example.com',
      'burrow users create alice@example.com --name "Alice Liddell" --role admin',
      'burrow users create bob@example.com --json | jq -r .id',
    ],
  );

  for (const [verb, effect] of [
    ['deactivate', 'their keys stop working at once and their live tunnels close (keys are kept)'],
    ['reactivate', 'their keys work again'],
  ] as const) {
    examples(
      users
        .command(verb)
        .description(`${verb} a user: ${effect}`)
        .argument('<user>', 'user id or email')
        .action(
          act(async (ctx, ref) => {
            const client = ctx.client();
            const id = await resolveUserId(client, ref);
            const u = await client.post<User>(`/users/${id}/${verb}`, undefined, {
              hints: { 403: ADMIN_HINT, 409: 'you cannot deactivate yourself, nor the last admin', 404: 'no such user; `burrow users list`' },
            });
            if (ctx.json) return printJson(u);
            out.line(`${out.paint('green', '✓')} ${u.email} is ${userStatus(u)}`);
          }),
        ),
      [`burrow users ${verb} bob@example.com`, `burrow users ${verb} 5b1c2d3e-0000-4000-8000-000000000001`],
    );
  }

  examples(
    users
      .command('set-role')
      .description("set a user's role")
      .argument('<user>', 'user id or email')
      .argument('<role>', 'admin or member', parseChoice('role', ROLES))
      .action(
        act<Record<string, unknown>, [string, Role]>(async (ctx, ref, role) => {
          const client = ctx.client();
          const id = await resolveUserId(client, ref);
          const u = await client.put<User>(`/users/${id}/role`, { role }, { hints: { 403: ADMIN_HINT, 409: 'the server keeps at least one admin', 404: 'no such user; `burrow users list`' } });
          if (ctx.json) return printJson(u);
          out.line(`${out.paint('green', '✓')} ${u.email} is now ${u.role}`);
        }),
      ),
    ['burrow users set-role bob@example.com admin'],
  );
}
