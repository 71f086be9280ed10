import { Command } from 'commander';
import { act, examples } from './common.js';
import { details, formatAge, formatTime, out, printJson, printTable, tokenPrefix } from './output.js';
import type { Account, User } from './types.js';

// burrow whoami, burrow accounts: the caller's own profile.

export function registerProfile(program: Command): void {
  examples(
    program
      .command('whoami')
      .description('show who the current key belongs to, and where it is used')
      .action(
        act(async (ctx) => {
          const target = ctx.target();
          const me = await ctx.client().get<User>('/me');
          if (ctx.json) return printJson(me);
          out.line(
            details([
              ['user', `${me.email}${me.name ? ` (${me.name})` : ''}`, 'bold'],
              ['id', me.id],
              ['role', me.role],
              ['status', me.deactivated_at ? `deactivated ${formatTime(me.deactivated_at)}` : 'active'],
              ['since', formatTime(me.created_at)],
              ['server', target.server],
              ['context', target.contextName ?? '-'],
              ['key', tokenPrefix(target.token)],
            ]),
          );
        }),
      ),
    ['burrow whoami', 'burrow whoami --json | jq -r .id', 'burrow whoami --context prod'],
  );

  examples(
    program
      .command('accounts')
      .description('list the login accounts (OAuth providers) linked to you')
      .action(
        act(async (ctx) => {
          const rows = await ctx.client().get<Account[]>('/accounts');
          if (ctx.json) return printJson(rows);
          printTable(
            rows,
            [
              { header: 'PROVIDER', value: (a) => a.provider },
              { header: 'ID', value: (a) => a.id },
              { header: 'LINKED', value: (a) => formatAge(a.created_at) },
            ],
            'no linked accounts: this user was made with a key, not a browser login (`burrow login` links one)',
          );
        }),
      ),
    ['burrow accounts'],
  );
}
