import { Command, InvalidArgumentError } from 'commander';
import { act, examples, pickOne, UUID_RE } from './common.js';
import { CliError, EXIT } from './errors.js';
import { err, formatAge, formatTime, out, printJson, printTable } from './output.js';
import type { ApiKey, ApiScope, CreatedKey } from './types.js';
import { resolveUserId } from './teams.js';

// burrow keys create|list|revoke

/** Shortest id prefix `keys revoke` accepts (the list shows 8). */
const MIN_ID_PREFIX = 8;

const SCOPES: readonly ApiScope[] = ['tunnels', 'management'];

export function parseScopes(v: string): ApiScope[] {
  const scopes = v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (scopes.length === 0) throw new InvalidArgumentError('give at least one scope: tunnels, management');
  for (const s of scopes) {
    if (!(SCOPES as readonly string[]).includes(s)) throw new InvalidArgumentError(`unknown scope "${s}" (scopes: tunnels, management)`);
  }
  return [...new Set(scopes)] as ApiScope[];
}

const UNIT_SECS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 7 * 86400, y: 365 * 86400 };

/** "30d", "12h", "2w" → now + that; or an ISO 8601 date-time (a bare date means its UTC midnight). */
export function parseExpires(v: string, now = Date.now()): string {
  const m = /^(\d+)\s*([smhdwy])$/.exec(v.trim());
  if (m) {
    const secs = Number(m[1]) * UNIT_SECS[m[2]!]!;
    if (secs <= 0) throw new InvalidArgumentError('the expiry must be in the future');
    return new Date(now + secs * 1000).toISOString();
  }
  const t = Date.parse(v);
  if (!/^\d{4}-\d{2}-\d{2}/.test(v) || Number.isNaN(t)) {
    throw new InvalidArgumentError(`expected a duration like 30d, 12h, 2w or a date-time like 2027-01-31T00:00:00Z, got "${v}"`);
  }
  if (t <= now) throw new InvalidArgumentError(`${v} is in the past`);
  return new Date(t).toISOString();
}

export function keyStatus(k: ApiKey, now = Date.now()): 'active' | 'expired' | 'revoked' {
  if (k.revoked_at) return 'revoked';
  if (k.expires_at && new Date(k.expires_at).getTime() <= now) return 'expired';
  return 'active';
}

export function registerKeys(program: Command): void {
  const keys = program.command('keys').description('create, list and revoke your API keys');
  examples(keys, ['burrow keys create ci --scopes tunnels --expires 30d', 'burrow keys list', 'burrow keys revoke 3f2a9c1e', 'burrow keys revoke laptop --user bob@example.com']);

  const create = keys
    .command('create')
    .description('create an API key; it is printed once and never shown again')
    .argument('<name>', 'a name for the key, unique among your active keys (e.g. ci, laptop)')
    .option('--scopes <list>', 'comma-separated scopes: tunnels, management (default: both)', parseScopes)
    .option('--expires <when>', 'a duration (30d, 12h, 2w) or a date-time (2027-01-31T00:00:00Z); default: never')
    .option('--user <id|email>', "admins: create the key for that user instead of yourself (e.g. one `burrow users create` added)")
    .action(
      act<{ scopes?: ApiScope[]; expires?: string; user?: string }>(async (ctx, name) => {
        // Parsed here, not as an argParser, so "30d" is relative to the moment of the request.
        let expires_at: string | null = null;
        if (ctx.opts.expires !== undefined) {
          try {
            expires_at = parseExpires(ctx.opts.expires);
          } catch (e) {
            throw usage(`--expires: ${(e as Error).message}`);
          }
        }
        const client = ctx.client();
        const body = { name, scopes: ctx.opts.scopes ?? null, expires_at };
        const created =
          ctx.opts.user === undefined
            ? await client.post<CreatedKey>('/keys', body, {
                hints: { 409: `you already have an active key named "${name}": pick another name or \`burrow keys revoke ${name}\``, 403: 'a key can only create keys with a subset of its own scopes' },
              })
            : await client.post<CreatedKey>(`/users/${await resolveUserId(client, ctx.opts.user)}/keys`, body, {
                hints: {
                  403: 'creating keys for other users needs an admin key with the `management` scope (and the scopes asked for)',
                  404: 'no such user; `burrow users list`',
                  409: 'pick another key name, or `burrow users reactivate` a deactivated user first',
                },
              });
        if (ctx.json) return printJson(created);
        const k = created.info;
        // The key alone on stdout (so `KEY=$(burrow keys create ci)` works); the rest on stderr.
        err.line(
          `${err.paint('green', '✓')} created key ${err.paint('bold', k.name)} (${k.key_prefix})${ctx.opts.user === undefined ? '' : ` for ${ctx.opts.user}`} · scopes ${k.scopes.join(', ')} · expires ${k.expires_at ? formatTime(k.expires_at) : 'never'}`,
        );
        out.line(created.key);
        err.line(err.paint('yellow', 'warning: this is the only time the key is shown; store it now (e.g. as a CI secret)'));
      }),
    );
  examples(create, [
    'burrow keys create laptop',
    'burrow keys create ci --scopes tunnels --expires 30d',
    'burrow keys create deploy --expires 2027-01-31T00:00:00Z',
    '# admins: a key for another user (by email or id), e.g. one `burrow users create` added:',
    'burrow keys create laptop --user bob@example.com',
    '# keep only the key:',
    'KEY=$(burrow keys create ci --scopes tunnels 2>/dev/null)',
  ]);

  const list = keys
    .command('list')
    .alias('ls')
    .description('list your active and expired keys, newest first')
    .option('--user <id|email>', "admins: list that user's keys instead of yours (e.g. to find a leaked one)")
    .action(
      act<{ user?: string }>(async (ctx) => {
        const client = ctx.client();
        const rows = ctx.opts.user === undefined ? await client.get<ApiKey[]>('/keys') : await client.get<ApiKey[]>(`/users/${await resolveUserId(client, ctx.opts.user)}/keys`, { hints: OTHER_USER_HINTS });
        if (ctx.json) return printJson(rows);
        printTable(
          rows,
          [
            { header: 'ID', value: (k) => k.id.slice(0, 8) },
            { header: 'PREFIX', value: (k) => k.key_prefix },
            { header: 'NAME', value: (k) => k.name },
            { header: 'SCOPES', value: (k) => k.scopes.join(',') },
            { header: 'CREATED', value: (k) => formatAge(k.created_at) },
            { header: 'EXPIRES', value: (k) => (k.expires_at ? formatTime(k.expires_at) : 'never') },
            { header: 'STATUS', value: (k) => keyStatus(k), style: (k) => (keyStatus(k) === 'active' ? 'green' : 'red') },
          ],
          'no keys: create one with `burrow keys create NAME`',
        );
      }),
    );
  examples(list, ['burrow keys list', 'burrow keys list --json | jq -r ".[].name"', '# admins: another user\'s keys', 'burrow keys list --user bob@example.com']);

  const revoke = keys
    .command('revoke')
    .description('revoke a key: it stops working at once')
    .argument('<key>', `the key id, a unique prefix of it (at least ${MIN_ID_PREFIX} characters), its key prefix (bk_…) or its name`)
    .option('--yes', 'confirm revoking the key this command itself is using')
    .option('--user <id|email>', "admins: revoke that user's key (e.g. a leaked one; its tunnels close); deactivating them instead would not do: reactivation brings the key back")
    .action(
      act<{ yes?: boolean; user?: string }>(async (ctx, ref) => {
        const client = ctx.client();
        // Another user's keys live under /users/{id}/keys; the rest is the same.
        const base = ctx.opts.user === undefined ? '/keys' : `/users/${await resolveUserId(client, ctx.opts.user)}/keys`;
        const listCommand = ctx.opts.user === undefined ? 'burrow keys list' : `burrow keys list --user ${ctx.opts.user}`;
        const all = await client.get<ApiKey[]>(base, ctx.opts.user === undefined ? {} : { hints: OTHER_USER_HINTS });
        const key = UUID_RE.test(ref) ? all.find((k) => k.id.toLowerCase() === ref.toLowerCase()) : pickOne(all, ref, 'key', listCommand, (k) => [k.key_prefix, k.name], MIN_ID_PREFIX);
        // An unlisted uuid still goes to the server, which answers 404 with its own detail.
        const id = key?.id ?? ref;
        // The key in use is "bk_<prefix>_<secret>": revoking it locks this CLI out at once.
        const token = ctx.target().token;
        if (key && token && token.startsWith(`${key.key_prefix}_`) && !ctx.opts.yes) {
          throw new CliError(
            EXIT.usage,
            'confirmation needed',
            `${key.name} (${key.key_prefix}) is the key this command is using; revoking it logs this CLI out`,
            `add --yes to revoke it anyway: \`burrow keys revoke ${ref} --yes\``,
          );
        }
        const res = await client.delete<object>(`${base}/${encodeURIComponent(id)}`, {
          hints: ctx.opts.user === undefined ? { 404: 'no such key of yours; `burrow keys list` lists them' } : { ...OTHER_USER_HINTS, 404: `no such key of that user; \`${listCommand}\` lists them` },
        });
        if (ctx.json) return printJson(res);
        out.line(`${out.paint('green', '✓')} revoked key ${id}${ctx.opts.user === undefined ? '' : ` of ${ctx.opts.user}`}`);
      }),
    );
  examples(revoke, ['burrow keys revoke 3f2a9c1e', 'burrow keys revoke ci', 'burrow keys revoke bk_AbC123xyz789', '# admins: a member\'s leaked key', 'burrow keys revoke laptop --user bob@example.com']);
}

const OTHER_USER_HINTS = {
  403: "another user's keys need an admin key with the `management` scope",
  404: 'no such user; `burrow users list`',
};

function usage(detail: string): CliError {
  return new CliError(EXIT.usage, 'invalid option', detail, 'see `burrow keys create --help`');
}
