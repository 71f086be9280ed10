import { Command } from 'commander';
import { act, examples } from './common.js';
import { details, formatBytes, formatDuration, out, printJson, printTable } from './output.js';
import type { Tunnel } from './types.js';
import { resolveTeam, resolveUserId } from './teams.js';
import { CliError, EXIT } from './errors.js';

interface Reservation {
  id: string;
  user_id: string | null;
  team_id: string | null;
  created_at: string;
}

// burrow tunnels list|get|delete: the live tunnels you own, your teams' tunnels, or all (admins).

/** A tunnel's access rules in one line ("-" without any). */
function accessLine(a: Tunnel['access']): string {
  if (!a) return '-';
  const parts = [a.basic_auth ? 'basic auth' : '', a.allow_ip.length ? `allow ${a.allow_ip.join(' ')}` : '', a.deny_ip.length ? `deny ${a.deny_ip.join(' ')}` : '', a.expires_at ? `expires ${a.expires_at}` : ''];
  return parts.filter(Boolean).join(' · ') || '-';
}

const NOT_FOUND = 'no such live tunnel visible to you; `burrow tunnels list` lists them';

/** "Ann Lee <ann@example.com>", or the email alone, or the short id (an older server). */
function ownerOf(t: Tunnel): string {
  if (!t.owner_email) return t.owner_id.slice(0, 8);
  return t.owner_name && t.owner_name !== t.owner_email ? `${t.owner_name} <${t.owner_email}>` : t.owner_email;
}

function teamOf(t: Tunnel): string {
  return t.team_id ? (t.team_name ?? t.team_id.slice(0, 8)) : '-';
}

export function registerTunnels(program: Command): void {
  const tunnels = program.command('tunnels').description('list, inspect and close live tunnels');
  examples(tunnels, ['burrow tunnels list', 'burrow tunnels get myapp', 'burrow tunnels delete myapp', 'burrow tunnels reserve shop --team web']);

  examples(
    tunnels
      .command('list')
      .alias('ls')
      .description("list live tunnels visible to you; uptime and counts are the tunnel's session's, since its client last connected")
      .action(
        act(async (ctx) => {
          const client = ctx.client();
          const rows = await client.get<Tunnel[]>('/tunnels');
          if (ctx.json) return printJson(rows);
          printTable(
            rows,
            [
              { header: 'ID', value: (t) => t.id },
              { header: 'URL', value: (t) => t.url ?? (t.remote_port === null ? '-' : `:${t.remote_port}`) },
              { header: 'LOCAL', value: (t) => t.local_target ?? '-' },
              { header: 'OWNER', value: (t) => ownerOf(t) },
              { header: 'TEAM', value: (t) => teamOf(t) },
              // The server counts per session (since the client last connected); the client's
              // own screen counts since it started: the headings say which span this is.
              { header: 'SESSION UP', value: (t) => formatDuration(t.uptime_secs) },
              { header: 'SESSION REQS', value: (t) => String(t.stats.requests), align: 'right' },
              { header: 'SESSION IN', value: (t) => formatBytes(t.stats.bytes_in), align: 'right' },
              { header: 'SESSION OUT', value: (t) => formatBytes(t.stats.bytes_out), align: 'right' },
            ],
            'no live tunnels: start one with `burrow http 3000`',
          );
        }),
      ),
    ['burrow tunnels list', 'burrow tunnels list --json'],
  );

  examples(
    tunnels
      .command('get')
      .description('show one tunnel')
      .argument('<id>', 'tunnel id (the first label of its host name)')
      .action(
        act(async (ctx, id) => {
          const t = await ctx.client().get<Tunnel>(`/tunnels/${encodeURIComponent(id)}`, { hints: { 404: NOT_FOUND } });
          if (ctx.json) return printJson(t);
          out.line(
            details([
              ['id', t.id],
              ['url', t.url ?? '-'],
              ['local', t.local_target ?? '-'],
              ['type', t.tunnel_type],
              ['remote port', t.remote_port === null ? '-' : String(t.remote_port)],
              ['owner', t.owner_email ? `${ownerOf(t)} (${t.owner_id})` : t.owner_id],
              ['team', t.team_id ? (t.team_name ? `${t.team_name} (${t.team_id})` : t.team_id) : '-'],
              ['session uptime', `${formatDuration(t.uptime_secs)} (since its client last connected)`],
              ['access', accessLine(t.access)],
              ['session requests', String(t.stats.requests)],
              ['session bytes in', formatBytes(t.stats.bytes_in)],
              ['session bytes out', formatBytes(t.stats.bytes_out)],
            ]),
          );
        }),
      ),
    ['burrow tunnels get myapp'],
  );

  examples(
    tunnels
      .command('delete')
      .description('close a tunnel; its client is told why and does not reconnect')
      .argument('<id>', 'tunnel id')
      .action(
        act(async (ctx, id) => {
          const res = await ctx.client().delete<object>(`/tunnels/${encodeURIComponent(id)}`, {
            hints: { 404: NOT_FOUND, 403: "only the tunnel's owner, an owner of its team, or an admin can close it" },
          });
          if (ctx.json) return printJson(res);
          out.line(`${out.paint('green', '✓')} closed tunnel ${id}`);
        }),
      ),
    ['burrow tunnels delete myapp'],
  );

  examples(
    tunnels
      .command('reserve')
      .description('admins: keep a tunnel id for one user or the members of one team; nobody else may register it')
      .argument('<id>', 'tunnel id')
      .option('--user <id|email>', 'the user who may use it')
      .option('--team <team>', 'the team whose members may use it (id or name)')
      .action(
        act(async (ctx, id: string) => {
          const o = ctx.opts as { user?: string; team?: string };
          if ((o.user === undefined) === (o.team === undefined)) throw new CliError(EXIT.usage, 'usage', 'give exactly one of --user and --team');
          const client = ctx.client();
          const body = o.user !== undefined ? { user_id: await resolveUserId(client, o.user) } : { team_id: (await resolveTeam(client, o.team!)).id };
          const r = await client.put<Reservation>(`/reservations/${encodeURIComponent(id)}`, body, { hints: { 403: 'reserving tunnel ids needs an admin' } });
          if (ctx.json) return printJson(r);
          out.line(`${out.paint('green', '✓')} reserved ${r.id} for ${r.user_id ? `user ${r.user_id}` : `team ${r.team_id}`}`);
        }),
      ),
    ['burrow tunnels reserve shop --user ann@example.com', 'burrow tunnels reserve docs-preview --team web'],
  );

  examples(
    tunnels
      .command('release')
      .description("admins: drop a tunnel id's reservation, and the hold its last user keeps for --id-grace, so anyone may take it")
      .argument('<id>', 'tunnel id')
      .action(
        act(async (ctx, id: string) => {
          const res = await ctx.client().delete<object>(`/reservations/${encodeURIComponent(id)}`, { hints: { 404: 'that id is neither reserved nor held', 403: 'releasing tunnel ids needs an admin' } });
          if (ctx.json) return printJson(res);
          out.line(`${out.paint('green', '✓')} released ${id}`);
        }),
      ),
    ['burrow tunnels release shop'],
  );

  examples(
    tunnels
      .command('reservations')
      .description('admins: list reserved tunnel ids')
      .action(
        act(async (ctx) => {
          const rows = await ctx.client().get<Reservation[]>('/reservations');
          if (ctx.json) return printJson(rows);
          printTable(
            rows,
            [
              { header: 'ID', value: (r) => r.id },
              { header: 'USER', value: (r) => r.user_id ?? '-' },
              { header: 'TEAM', value: (r) => r.team_id ?? '-' },
              { header: 'CREATED', value: (r) => r.created_at },
            ],
            'no reserved ids: `burrow tunnels reserve ID --user U` adds one',
          );
        }),
      ),
    ['burrow tunnels reservations --json'],
  );
}
