import { Command, InvalidArgumentError, Option } from 'commander';
import { ApiClient, unreachable } from './client.js';
import { act, examples, positiveInt, UUID_RE } from './common.js';
import { CliError, EXIT, type ExitCode } from './errors.js';
import { ExposeScreen, accessSummary } from './expose-screen.js';
import type { ConnectionEvent, RequestEvent } from './expose-stats.js';
import { resolveTeam } from './teams.js';
import type { User } from './types.js';
import { basicAuthProblem, expiryProblem, parseCidr, type AccessRules } from '../protocol/access.js';
import { parseExpires } from './keys.js';

// burrow http <port|host:port> and burrow tcp <port|host:port>: expose a local service through
// the tunnel client library (src/client/tunnel-client.ts) and show what passes through it.

export interface LocalTarget {
  host: string;
  port: number;
}

/** "3000", "192.168.1.5:8080", "[::1]:8080", "http://localhost:3000" → host and port. */
export function parseLocal(v: string): LocalTarget {
  const fail = () => new InvalidArgumentError(`expected a port (3000) or host:port (127.0.0.1:3000), got "${v}"`);
  const port = (s: string) => {
    const n = Number(s);
    if (!/^\d+$/.test(s) || n < 1 || n > 65535) throw fail();
    return n;
  };
  let s = v.trim();
  const url = /^[a-z]+:\/\/(.*?)\/?$/i.exec(s);
  if (url) s = url[1]!;
  if (/^\d+$/.test(s)) return { host: 'localhost', port: port(s) };
  const v6 = /^\[([0-9a-f:.]+)\]:(\d+)$/i.exec(s);
  if (v6) return { host: v6[1]!, port: port(v6[2]!) };
  const hp = /^([A-Za-z0-9.-]+):(\d+)$/.exec(s);
  if (hp) return { host: hp[1]!, port: port(hp[2]!) };
  throw fail();
}

/** A permanent refusal's code → the CLI's exit code (same table as API errors). */
export function exitCodeForRefusal(code: string): ExitCode {
  const c = code.toLowerCase();
  if (c.includes('unauthorized') || c.includes('forbidden') || c === 'auth') return EXIT.auth;
  if (c.includes('not-found') || c.includes('not_found')) return EXIT.notFound;
  // 'taken-over': another burrow with this user's key claimed the same id (the newer
  // connection wins), so this one must not fight back by reconnecting.
  if (c.includes('conflict') || c.includes('taken') || c.includes('in-use')) return EXIT.conflict;
  if (c.includes('bad-request') || c.includes('invalid')) return EXIT.usage;
  if (c === 'unreachable') return EXIT.unreachable;
  return EXIT.error;
}

function refusalHint(code: ExitCode, opts: { id?: string; remotePort?: number; team?: string }, reason = ''): string {
  if (opts.remotePort !== undefined && /port/i.test(reason)) {
    return code === EXIT.conflict ? 'that port is taken: pick another --remote-port, or omit it' : "pick a --remote-port within the server's --tcp-port-range, or omit it";
  }
  switch (code) {
    case EXIT.auth:
      return 'the key is not valid for tunnels: it needs the `tunnels` scope (`burrow whoami`, `burrow keys create NAME --scopes tunnels`)';
    case EXIT.conflict:
      return opts.id ? `the id "${opts.id}" is taken: pick another --id, or omit it for a random one` : 'try again, or pick an --id';
    case EXIT.notFound:
      return opts.team ? 'check --team with `burrow teams list`' : 'is --server the address of a burrowd server? (`burrow context current`)';
    case EXIT.usage:
      return 'ids are 3-63 characters of a-z, 0-9 and -, starting and ending with a letter or digit';
    default:
      return 'the server refused the tunnel; its reason is above';
  }
}

interface ExposeOptions {
  id?: string;
  team?: string;
  remotePort?: number;
  quiet?: boolean;
  basicAuth?: string[];
  allowIp?: string[];
  denyIp?: string[];
  expires?: number;
}

/** Repeatable option values, in order. */
const collect = (v: string, prev: string[] = []): string[] => [...prev, v];

/** --allow-ip / --deny-ip value: an address or CIDR, v4 or v6. */
const cidrArg = (v: string, prev: string[] = []): string[] => {
  if (!parseCidr(v)) throw new InvalidArgumentError(`expected an IP address or CIDR (10.0.0.0/8, 2001:db8::/32, 203.0.113.7), got "${v}"`);
  return [...prev, v];
};

/**
 * --expires (and burrow.yml `expires`) → epoch ms: a duration from now or a date-time, read by the
 * CLI's one parser (the same as `burrow keys create --expires`), at most a year ahead.
 */
export function parseTunnelExpiry(v: string, now = Date.now()): number {
  const at = Date.parse(parseExpires(v, now));
  const problem = expiryProblem(at, now);
  if (problem) throw new InvalidArgumentError(problem);
  return at;
}
const expiresArg = (v: string): number => parseTunnelExpiry(v);

/** The flags' access rules; usage errors name the flag (and never print a password). */
export function accessRulesOf(type: 'http' | 'tcp', o: Pick<ExposeOptions, 'basicAuth' | 'allowIp' | 'denyIp' | 'expires'>): AccessRules | undefined {
  if (o.basicAuth?.length && type === 'tcp') {
    throw new CliError(EXIT.usage, 'invalid option', '--basic-auth applies to http tunnels only', 'restrict a TCP tunnel by address with --allow-ip / --deny-ip');
  }
  for (const cred of o.basicAuth ?? []) {
    const problem = basicAuthProblem(cred);
    if (problem) throw new CliError(EXIT.usage, 'invalid --basic-auth', problem, 'e.g. --basic-auth alice:correct-horse (repeat the flag for more users)');
  }
  const rules: AccessRules = {};
  if (o.basicAuth?.length) rules.basicAuth = o.basicAuth;
  if (o.allowIp?.length) rules.allowIp = o.allowIp;
  if (o.denyIp?.length) rules.denyIp = o.denyIp;
  if (o.expires !== undefined) rules.expiresAt = o.expires;
  return Object.keys(rules).length ? rules : undefined;
}

function exposeAction(type: 'http' | 'tcp') {
  return act<ExposeOptions>(async (ctx, rawLocal) => {
    let local: LocalTarget;
    try {
      local = parseLocal(rawLocal);
    } catch (e) {
      throw new CliError(EXIT.usage, 'invalid target', (e as Error).message, `e.g. \`burrow ${type} 3000\``);
    }
    const target = ctx.target();
    if (!target.token) {
      throw new CliError(EXIT.auth, 'not logged in', `no API key for ${target.server}`, 'run `burrow login`, pass --token KEY or set BURROW_TOKEN');
    }
    const access = accessRulesOf(type, ctx.opts);
    const api = new ApiClient(target);
    const teamId = ctx.opts.team ? (UUID_RE.test(ctx.opts.team) ? ctx.opts.team : (await resolveTeam(api, ctx.opts.team)).id) : undefined;

    // Loaded here so management commands do not pay for the tunnel code at start-up.
    const { TunnelClient, TunnelRefused } = await import('../client/tunnel-client.js');
    const screen = new ExposeScreen(
      { type, url: null, local: `${type}://${local.host.includes(':') ? `[${local.host}]` : local.host}:${local.port}`, account: null, state: 'connecting', stateDetail: null, access: accessSummary(access) },
      { quiet: Boolean(ctx.opts.quiet), json: ctx.json },
    );
    const client = new TunnelClient({
      server: target.server,
      token: target.token,
      type,
      local,
      id: ctx.opts.id,
      teamId,
      remotePort: ctx.opts.remotePort,
      access,
    });

    let registeredOnce = false;
    let finish: (code: ExitCode) => void = () => undefined;
    const done = new Promise<ExitCode>((resolve) => (finish = resolve));
    let failure: CliError | null = null;

    client.on('registered', (r: { id: string; url: string }) => {
      screen.registered(r.id, r.url, !registeredOnce);
      if (registeredOnce) screen.note('reconnected');
      registeredOnce = true;
    });
    client.on('request', (e: RequestEvent) => screen.request(e));
    client.on('connection', (e: ConnectionEvent) => screen.connection(e));
    client.on('open-streams', (n: number) => screen.openStreams(n));
    client.on('reconnecting', (r: { attempt: number; delayMs: number; reason: string }) => screen.reconnecting(r.attempt, r.delayMs, r.reason));
    client.on('closed', (c: { permanent: boolean; code: string; reason: string }) => {
      // 'stopped' is our own stop(); before registration start() rejects and the catch reports.
      if (!c.permanent || c.code === 'stopped' || !registeredOnce) return;
      if (c.code === 'expired') {
        // The end the user asked for (--expires): a success.
        screen.setState('closed', c.reason);
        screen.note(`${c.reason} (--expires): closed`);
        finish(EXIT.ok);
        return;
      }
      screen.setState('closed', c.reason);
      const code = exitCodeForRefusal(c.code ?? '');
      const hint =
        c.code === 'deleted'
          ? 'it was closed on the server (`burrow tunnels delete`, team deleted or user deactivated) and does not reconnect'
          : c.code === 'taken-over'
            ? 'another `burrow` with your key now serves this id; this one stopped so the two do not take turns'
            : refusalHint(code, ctx.opts, c.reason);
      failure = new CliError(code === EXIT.ok ? EXIT.error : code, 'tunnel closed', c.reason || c.code, hint);
      finish(failure.exitCode);
    });

    // Ctrl-C while still connecting: start() would never settle once stopped, so leave from here
    // (130 = interrupted, as shells report it).
    const abortConnecting = () => {
      screen.stop();
      void client.stop().finally(() => process.exit(130));
    };
    process.once('SIGINT', abortConnecting);
    process.once('SIGTERM', abortConnecting);
    screen.start();
    try {
      const info = await client.start();
      if (!registeredOnce) {
        screen.registered(info.id, info.url, true);
        registeredOnce = true;
      }
    } catch (e) {
      screen.stop();
      if (e instanceof TunnelRefused) {
        if (e.code === 'unreachable') {
          throw new CliError(EXIT.unreachable, 'server unreachable', e.message, 'is burrowd running there? check --server, BURROW_SERVER or `burrow context current`');
        }
        const code = exitCodeForRefusal(e.code);
        throw new CliError(code, 'tunnel refused', e.message, refusalHint(code, ctx.opts, e.message));
      }
      throw unreachable(target.server, e);
    } finally {
      process.removeListener('SIGINT', abortConnecting);
      process.removeListener('SIGTERM', abortConnecting);
    }

    // Who this is, for the status block; a failure here only leaves the line out.
    if (screen.tty && !ctx.json) {
      api.get<User>('/me').then(
        (me) => (screen.info.account = `${me.email} (${me.role})`),
        () => undefined,
      );
    }

    const stopOnSignal = () => finish(EXIT.ok);
    process.once('SIGINT', stopOnSignal);
    process.once('SIGTERM', stopOnSignal);
    const code = await done;
    process.removeListener('SIGINT', stopOnSignal);
    process.removeListener('SIGTERM', stopOnSignal);
    await client.stop().catch(() => undefined);
    screen.stop();
    if (!ctx.json) screen.summary();
    if (failure) throw failure;
    process.exitCode = code;
  });
}

export function registerExpose(program: Command): void {
  const common = (cmd: Command) =>
    cmd
      .option('--id <name>', 'ask for this tunnel id (the first label of the public host name)')
      .option('--team <team>', 'bind the tunnel to a team (id or name) so its members see it')
      .option('--allow-ip <cidr>', 'only visitors from this address or CIDR (repeatable; v4 or v6)', cidrArg)
      .option('--deny-ip <cidr>', 'refuse visitors from this address or CIDR (repeatable; wins over --allow-ip)', cidrArg)
      .option('--expires <when>', 'end the tunnel after a duration (30m, 2h, 7d) or at a date-time (2026-12-31T18:00:00Z); at most a year', expiresArg)
      .option('-q, --quiet', 'no per-request lines');

  examples(
    common(
      program
        .command('http')
        .description('expose a local HTTP service at a public URL')
        .argument('<target>', 'local port (3000) or host:port (192.168.1.5:8080)')
        .option('--basic-auth <user:pass>', 'visitors must log in with this user and password (HTTP Basic; repeatable)', collect),
    ).action(exposeAction('http')),
    [
      'burrow http 3000',
      'burrow http 3000 --id myapp          # http://myapp.<domain>',
      'burrow http 192.168.1.5:8080 --team web',
      'burrow http 3000 --basic-auth alice:correct-horse --expires 2h',
      'burrow http 3000 --allow-ip 203.0.113.0/24 --allow-ip 2001:db8::/32 --deny-ip 203.0.113.9',
      '# in CI: the URL is the first line of stdout',
      'burrow http 3000 --quiet | head -1',
    ],
  );

  examples(
    common(
      program
        .command('tcp')
        .description('expose a local TCP service at a public host:port')
        .argument('<target>', 'local port (22) or host:port')
        .option('--remote-port <n>', 'ask for this public port (within the server --tcp-port-range)', positiveInt('--remote-port', 65535))
        // Accepted only to say why it cannot apply (HTTP Basic needs HTTP), instead of "unknown option".
        .addOption(new Option('--basic-auth <user:pass>').argParser(collect).hideHelp()),
    ).action(exposeAction('tcp')),
    ['burrow tcp 22', 'burrow tcp 5432 --remote-port 25432', 'burrow tcp db.internal:5432 --team ops', 'burrow tcp 22 --allow-ip 198.51.100.0/24 --expires 8h'],
  );
}
