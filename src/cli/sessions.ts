import { Command } from 'commander';
import { act, examples, positiveInt } from './common.js';
import { formatBytes, formatDuration, formatTime, printJson, printTable } from './output.js';
import type { Session } from './types.js';

// burrow sessions [--all] [--limit N]: one row per tunnel registration, newest first.

export function sessionDurationSecs(s: Session, now = Date.now()): number {
  const end = s.disconnected_at ? new Date(s.disconnected_at).getTime() : now;
  return (end - new Date(s.connected_at).getTime()) / 1000;
}

export function registerSessions(program: Command): void {
  examples(
    program
      .command('sessions')
      .description('list tunnel sessions (one per tunnel connection) with their traffic')
      .option('--all', "every user's sessions (admins)")
      .option('--limit <n>', 'at most this many (1-1000, default 50)', positiveInt('--limit', 1000))
      .action(
        act<{ all?: boolean; limit?: number }>(async (ctx) => {
          const rows = await ctx.client().get<Session[]>('/sessions', {
            query: { limit: ctx.opts.limit, all: ctx.opts.all ? true : undefined },
            hints: { 403: '--all needs an admin key' },
          });
          if (ctx.json) return printJson(rows);
          const cols = [
            { header: 'TUNNEL', value: (s: Session) => s.tunnel_id },
            { header: 'CLIENT', value: (s: Session) => s.client_ip ?? '-' },
            { header: 'CONNECTED', value: (s: Session) => formatTime(s.connected_at) },
            { header: 'DURATION', value: (s: Session) => formatDuration(sessionDurationSecs(s)) },
            {
              header: 'STATE',
              value: (s: Session) => (s.disconnected_at ? 'closed' : 'live'),
              style: (s: Session) => (s.disconnected_at ? undefined : ('green' as const)),
            },
            { header: 'REQUESTS', value: (s: Session) => String(s.requests), align: 'right' as const },
            { header: 'IN', value: (s: Session) => formatBytes(s.bytes_in), align: 'right' as const },
            { header: 'OUT', value: (s: Session) => formatBytes(s.bytes_out), align: 'right' as const },
          ];
          if (ctx.opts.all) cols.unshift({ header: 'USER', value: (s: Session) => s.user_id.slice(0, 8) });
          printTable(rows, cols, 'no sessions yet: start a tunnel with `burrow http 3000`');
        }),
      ),
    ['burrow sessions', 'burrow sessions --limit 10', 'burrow sessions --all --json   # admins'],
  );
}
