import { Command } from 'commander';
import { act, examples } from './common.js';
import { details, out, printJson, printTable } from './output.js';
import { resolveTeam } from './teams.js';

// burrow domains add|verify|list|get|remove: a domain of your own for a tunnel. Once its DNS
// record proves you own it, it routes to the tunnel and burrowd gets its certificate by itself.

interface Domain {
  name: string;
  tunnel: string;
  owner_id: string;
  team_id: string | null;
  verified: boolean;
  verified_at: string | null;
  txt_name: string;
  txt_value: string;
  cname_target: string;
  last_check_at: string | null;
  last_error: string | null;
  created_at: string;
}

const NOT_FOUND = 'no such custom domain visible to you; `burrow domains list` lists them';
const path = (name: string): string => `/domains/${encodeURIComponent(name.toLowerCase().replace(/\.$/, ''))}`;

/** What to put in DNS, for a person: either record proves ownership. */
function ownershipRecords(d: Domain): string {
  return [
    `Prove you own ${d.name} with either DNS record:`,
    `  ${d.txt_name}. TXT "${d.txt_value}"`,
    `  ${d.name}. CNAME ${d.cname_target}.`,
    `then run \`burrow domains verify ${d.name}\` (burrowd also checks by itself every minute).`,
  ].join('\n');
}

export function registerDomains(program: Command): void {
  const domains = program.command('domains').description('bring your own domain to a tunnel: add, verify, list, get, remove');
  examples(domains, ['burrow domains add app.example.com --tunnel web', 'burrow domains verify app.example.com', 'burrow domains list']);

  examples(
    domains
      .command('add')
      .description('add a domain for a tunnel id; prints the DNS record that proves you own it')
      .argument('<name>', 'the domain, e.g. app.example.com')
      .requiredOption('--tunnel <id>', 'the tunnel id it routes to (the first label of the tunnel host)')
      .option('--team <team>', 'the team it belongs to (id or name): its members see and verify it')
      .action(
        act(async (ctx, name: string) => {
          const o = ctx.opts as { tunnel: string; team?: string };
          const client = ctx.client();
          const body = { name, tunnel: o.tunnel, ...(o.team !== undefined ? { team_id: (await resolveTeam(client, o.team)).id } : {}) };
          const d = await client.post<Domain>('/domains', body, { hints: { 409: '`burrow domains list` shows the domains you added' } });
          if (ctx.json) return printJson(d);
          out.line(`${out.paint('green', '✓')} added ${d.name} for tunnel ${d.tunnel}`);
          out.line(ownershipRecords(d));
        }),
      ),
    ['burrow domains add app.example.com --tunnel web', 'burrow domains add docs.example.com --tunnel docs --team web --json'],
  );

  examples(
    domains
      .command('verify')
      .description('check the ownership record now; once verified the domain routes to its tunnel and gets a certificate')
      .argument('<name>', 'the domain')
      .action(
        act(async (ctx, name: string) => {
          const d = await ctx.client().post<Domain>(`${path(name)}/verify`, undefined, { hints: { 404: NOT_FOUND } });
          if (ctx.json) return printJson(d);
          out.line(`${out.paint('green', '✓')} ${d.name} is verified: it routes to tunnel ${d.tunnel}; its certificate follows within a minute`);
        }),
      ),
    ['burrow domains verify app.example.com'],
  );

  examples(
    domains
      .command('list')
      .alias('ls')
      .description("list the domains you added and your teams' domains (admins: all)")
      .action(
        act(async (ctx) => {
          const rows = await ctx.client().get<Domain[]>('/domains');
          if (ctx.json) return printJson(rows);
          printTable(
            rows,
            [
              { header: 'NAME', value: (d) => d.name },
              { header: 'TUNNEL', value: (d) => d.tunnel },
              { header: 'VERIFIED', value: (d) => (d.verified ? 'yes' : 'no') },
              { header: 'TEAM', value: (d) => d.team_id ?? '-' },
              { header: 'LAST CHECK', value: (d) => d.last_check_at ?? '-' },
            ],
            'no custom domains: `burrow domains add NAME --tunnel ID` adds one',
          );
        }),
      ),
    ['burrow domains list', 'burrow domains list --json'],
  );

  examples(
    domains
      .command('get')
      .description('show one domain and its ownership check')
      .argument('<name>', 'the domain')
      .action(
        act(async (ctx, name: string) => {
          const d = await ctx.client().get<Domain>(path(name), { hints: { 404: NOT_FOUND } });
          if (ctx.json) return printJson(d);
          out.line(
            details([
              ['name', d.name],
              ['tunnel', d.tunnel],
              ['verified', d.verified ? `yes (${d.verified_at})` : 'no'],
              ['team', d.team_id ?? '-'],
              ['txt record', `${d.txt_name} "${d.txt_value}"`],
              ['or cname', d.cname_target],
              ['last check', d.last_check_at ?? '-'],
              ['last error', d.last_error ?? '-'],
              ['added', d.created_at],
            ]),
          );
        }),
      ),
    ['burrow domains get app.example.com'],
  );

  examples(
    domains
      .command('remove')
      .alias('rm')
      .description('remove a domain: it stops routing and its certificate is dropped')
      .argument('<name>', 'the domain')
      .action(
        act(async (ctx, name: string) => {
          const res = await ctx.client().delete<object>(path(name), { hints: { 404: NOT_FOUND, 403: 'only the user who added it, an owner of its team, or an admin can remove it' } });
          if (ctx.json) return printJson(res);
          out.line(`${out.paint('green', '✓')} removed ${name}`);
        }),
      ),
    ['burrow domains remove app.example.com'],
  );
}
