import { Command, InvalidArgumentError, Option } from 'commander';
import { ApiClient, unreachable, unreachableHint, WRONG_SERVER_HINT } from './client.js';
import { trustedCas } from './tls-trust.js';
import { storedTicket, ticketKeeper } from './ticket-store.js';
import { act, examples, positiveInt, UUID_RE, type ActionContext } from './common.js';
import type { Target } from './config.js';
import { detachIfAsked, detachOptions, tellParent } from './detach.js';
import { CliError, EXIT, type ExitCode } from './errors.js';
import { ExposeScreen, accessSummary } from './expose-screen.js';
import { trackClient } from '../client/inspector/status.js';
import { addInspectOptions, startInspectorFromFlag } from './inspect.js';
import { keyHint, notLoggedIn } from './key-hint.js';
import { resolveTeam } from './teams.js';
import { flagOf, localLabel, parseTunnelExpiry, validateTunnel, type RawTunnel, type TunnelSpec } from './tunnel-spec.js';
import type { User } from './types.js';
import { burrowVersion } from '../version.js';
import { delay, EXIT_DEADLINE_MS, ExitDeadline, GOODBYE_MS } from './exit-deadline.js';
import { basicAuthProblem, parseCidr, type AccessRules } from '../protocol/access.js';

// burrow http <port|host:port> and burrow tcp <port|host:port>: expose a local service through
// the tunnel client library (src/client/tunnel-client.ts) and show what passes through it.
// runTunnels is also what `burrow start` (start.ts) runs, for the tunnels of a burrow.yml.

export { parseLocal, type LocalTarget } from './tunnel-spec.js';

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

/** `keyHint`: how to get a working key (keyHint(target)); a refused key (401) gets it. */
function refusalHint(code: ExitCode, opts: { id?: string; remotePort?: number; team?: string; refusal: string; keyHint: string }, reason = ''): string {
  if (opts.remotePort !== undefined && /port/i.test(reason)) {
    return code === EXIT.conflict ? 'that port is taken: pick another --remote-port, or omit it' : "pick a --remote-port within the server's --tcp-port-range, or omit it";
  }
  switch (code) {
    case EXIT.auth:
      // 401: the server does not know the key (unknown, expired, revoked), so no scope would
      // help; 403: a known key without the `tunnels` scope.
      if (opts.refusal === 'unauthorized') return `the server does not accept this key (unknown, expired or revoked): ${opts.keyHint}`;
      return 'the key is not valid for tunnels: it needs the `tunnels` scope (`burrow whoami`, `burrow keys create NAME --scopes tunnels`)';
    case EXIT.conflict:
      if (/serving under other rules/.test(reason)) return "a pool's members serve under one set of rules: start this one with the pool's --basic-auth, --allow-ip, --deny-ip and --expires (`burrow tunnels get ID` shows them, never a password)";
      return opts.id ? `the id "${opts.id}" is taken: pick another --id, or omit it for a random one` : 'try again, or pick an --id';
    case EXIT.notFound:
      return opts.team ? 'check --team with `burrow teams list`' : 'is --server the address of a burrowd server? (`burrow context current`)';
    case EXIT.usage:
      return 'ids are 3-63 characters of a-z, 0-9 and -, starting and ending with a letter or digit';
    default:
      return 'the server refused the tunnel; its reason is above';
  }
}

/**
 * The team to bind to: an id as given; a name (or id prefix) resolved through GET /teams when the
 * key may list teams; with a tunnels-only key the name itself, which burrowd resolves among the
 * user's own teams when it admits the tunnel.
 */
async function teamForTunnel(api: ApiClient, ref: string): Promise<string> {
  if (UUID_RE.test(ref)) return ref;
  try {
    return (await resolveTeam(api, ref)).id;
  } catch (e) {
    if (e instanceof CliError && e.status === 403) return ref;
    throw e;
  }
}

interface ExposeOptions {
  id?: string;
  team?: string;
  remotePort?: number;
  quiet?: boolean;
  detach?: boolean;
  pidFile?: string;
  upstreamInsecure?: boolean;
  hostHeader?: string;
  responseTimeout?: string;
  basicAuth?: string[];
  allowIp?: string[];
  denyIp?: string[];
  expires?: number;
  /** http only: --inspect ADDR (string), --no-inspect (false) */
  inspect?: string | boolean;
  /** http only, hidden: --no-lanes (false) */
  lanes?: boolean;
  /** http only: --pool */
  pool?: boolean;
}

/** Repeatable option values, in order. */
const collect = (v: string, prev: string[] = []): string[] => [...prev, v];

/** --allow-ip / --deny-ip value: an address or CIDR, v4 or v6. */
const cidrArg = (v: string, prev: string[] = []): string[] => {
  if (!parseCidr(v)) throw new InvalidArgumentError(`expected an IP address or CIDR (10.0.0.0/8, 2001:db8::/32, 203.0.113.7), got "${v}"`);
  return [...prev, v];
};

export { parseTunnelExpiry };
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

/** `burrow http|tcp` flags → the same raw record a burrow.yml entry is, checked by the same function. */
function specOfFlags(type: 'http' | 'tcp', addr: string, o: ExposeOptions): TunnelSpec {
  // The access flags were parsed by their argParsers (cidrArg, expiresArg) and are checked here
  // with the same protocol/access.ts functions validateTunnel applies to a file's keys.
  const access = accessRulesOf(type, o) ?? {};
  const raw: RawTunnel = { proto: type, addr, id: o.id, team: o.team, remote_port: o.remotePort, host_header: o.hostHeader, upstream_insecure: o.upstreamInsecure, pool: o.pool, response_timeout: o.responseTimeout };
  const { spec, errors } = validateTunnel(type, raw);
  if (spec) return { ...spec, access };
  const e = errors[0]!;
  if (e.field === 'addr') throw new CliError(EXIT.usage, 'invalid target', e.message, `e.g. \`burrow ${type} 3000\` or \`burrow ${type} 127.0.0.1:3000\``);
  throw new CliError(EXIT.usage, `invalid ${flagOf(e.field)}`, errors.map((x) => x.message).join('; '), `see \`burrow ${type} --help\``);
}

function exposeAction(type: 'http' | 'tcp') {
  return act<ExposeOptions>(async (ctx, rawLocal) => {
    const spec = specOfFlags(type, rawLocal, ctx.opts);
    if (await detachIfAsked(ctx.opts)) return;
    await runTunnels(ctx, ctx.target(), [spec], false);
  });
}

export interface RunFlags {
  quiet?: boolean;
  /** --inspect ADDR (string), --no-inspect (false); only runs with an http tunnel have an inspector */
  inspect?: string | boolean;
  /** --no-lanes (false): one control connection, whatever the server's shard count */
  lanes?: boolean;
  /** --no-siblings (false): no second connection on another node of a cluster */
  siblings?: boolean;
}

/**
 * Run tunnels until Ctrl-C or until the server ends them: `burrow http|tcp` (one, `named` false:
 * output exactly as it always was) and `burrow start` (several over one connection, `named`:
 * lines and events say which tunnel). A tunnel refused for good while others run is reported
 * and the run goes on; its exit code is the run's at the end.
 */
export async function runTunnels(ctx: ActionContext<RunFlags>, target: Target, specs: TunnelSpec[], named: boolean): Promise<void> {
  if (!target.token) throw await notLoggedIn(target);
  const api = new ApiClient(target);
  const teamIds = new Map<string, string>();
  for (const s of specs) {
    if (s.team === undefined || teamIds.has(s.team)) continue;
    teamIds.set(s.team, await teamForTunnel(api, s.team));
  }
  /** A refused key's hint asks the server (its login providers): only then. */
  const hintOpts = async (s: TunnelSpec, refusal: string) => ({ id: s.id, remotePort: s.remotePort, team: s.team, refusal, keyHint: refusal === 'unauthorized' ? await keyHint(target) : '' });

  // Loaded here so management commands do not pay for the tunnel code at start-up.
  const { TunnelClient, TunnelRefused, POOL_LEAVE_MS } = await import('../client/tunnel-client.js');
  // One inspector for the run, started before the tunnels so their first request is captured.
  const inspection = specs.some((s) => s.type === 'http') ? await startInspectorFromFlag(ctx.opts.inspect) : null;
  const inspector = inspection?.inspector ?? null;
  /** the id each tunnel was given: `burrow http` labels its captures with it (start: the entry's name) */
  const ids = new Map<string, string>();
  const client: InstanceType<typeof TunnelClient> = new TunnelClient({
    server: target.server,
    token: target.token,
    ca: trustedCas(target.ca),
    lanes: ctx.opts.lanes !== false,
    siblings: ctx.opts.siblings !== false,
    resumeTicket: storedTicket(target),
    tunnels: specs.map((s) => {
      // The local side as the entry or flags asked: https verified unless upstream_insecure, Host
      // rewritten. Replays from the inspector go to this same target, the same way.
      const local = { ...s.local, insecure: s.upstreamInsecure === true, ...(s.hostHeader ? { hostHeader: s.hostHeader } : {}) };
      return {
        name: s.name,
        type: s.type,
        local,
        id: s.id,
        teamId: s.team === undefined ? undefined : teamIds.get(s.team),
        remotePort: s.remotePort,
        access: Object.keys(s.access).length ? s.access : undefined,
        localLabel: localLabel(s),
        pool: s.pool,
        responseTimeoutMs: s.responseTimeoutMs,
        observer: s.type === 'http' ? inspector?.observer(named ? s.name : () => ids.get(s.name) ?? s.id ?? s.name, local, s.access.basicAuth?.[0] ?? null) : undefined,
      };
    }),
  });
  const screen = new ExposeScreen(
    {
      tunnels: specs.map((s) => ({ name: s.name, type: s.type, url: null, local: localLabel(s), failed: null, access: accessSummary(s.access) })),
      account: null,
      state: 'connecting',
      stateDetail: null,
      webInterface: inspector?.url ?? null,
      version: burrowVersion(),
      server: {
        url: target.server,
        get version() {
          return client.serverVersion;
        },
        get latencyMs() {
          return client.latencyMs;
        },
      },
    },
    { quiet: Boolean(ctx.opts.quiet), json: ctx.json, named },
  );

  inspector?.showStatus(trackClient(client, target.server, specs.map((s) => ({ name: s.name, type: s.type, local: localLabel(s) }))));

  const registered = new Set<string>();
  let finish: (code: ExitCode) => void = () => undefined;
  const done = new Promise<ExitCode>((resolve) => (finish = resolve));
  let failure: CliError | null = null;
  /** Why the run ended, for the `closed` event (--json): Ctrl-C / SIGTERM unless the server ended it. */
  let ending = { code: 'stopped', reason: 'stopped by the user' };
  /** The exit code a tunnel refused or closed for good leaves for the end of a named run. */
  let laterCode: ExitCode = EXIT.ok;

  client.on('ticket', ticketKeeper(target));
  client.on('registered', (r) => {
    ids.set(r.tunnel, r.id);
    const again = registered.has(r.tunnel);
    screen.registered(r.id, r.url, !again, r.tunnel);
    // On a reconnect the tunnel taken over is normally our own stale registration: not news.
    if (r.tookOver && !again) screen.note(`took over the live tunnel "${r.id}": another connection of this user was serving it and has been told to stop`);
    // One "reconnected" per connection, not per tunnel: the first tunnel stands for the rest.
    if (again && r.tunnel === specs.find((s) => registered.has(s.name))?.name) screen.note('reconnected');
    registered.add(r.tunnel);
  });
  // The event as it comes (no copy per request): the screen leaves its `tunnel` field out of JSON.
  client.on('request', (e) => screen.request(e, e.tunnel));
  client.on('connection', (e) => screen.connection(e, e.tunnel));
  client.on('open-streams', (n, name) => screen.openStreams(n, name));
  client.on('reconnecting', (r) => screen.reconnecting(r.attempt, r.delayMs, r.reason));
  client.on('tunnel-failed', (f) => {
    // One tunnel of several ended for good; `closed` follows when it was the last one.
    if (!named) return;
    screen.failed(f.tunnel, f.code, f.reason);
    const code = exitCodeForRefusal(f.code);
    if (laterCode === EXIT.ok) laterCode = code === EXIT.ok ? EXIT.error : code;
  });
  client.on('closed', (c) => {
    // 'stopped' is our own stop(); before registration start() rejects and the catch reports.
    if (!c.permanent || c.code === 'stopped' || registered.size === 0) return;
    ending = { code: c.code, reason: c.reason };
    if (c.code === 'expired') {
      // The end the user asked for (--expires): a success.
      screen.setState('closed', c.reason);
      screen.note(`${c.reason} (--expires): closed`);
      finish(EXIT.ok);
      return;
    }
    screen.setState('closed', c.reason);
    const spec = specs.find((s) => s.name === c.tunnel) ?? specs[0]!;
    const code = exitCodeForRefusal(c.code ?? '');
    const hint = async (): Promise<string> =>
      c.code === 'deleted'
        ? 'it was closed on the server (`burrow tunnels delete`, team deleted or user deactivated) and does not reconnect'
        : c.code === 'taken-over'
          ? 'another connection now serves this id; this one stopped so the two do not take turns (stop the other one, then start this again to serve the id from here)'
          : refusalHint(code, await hintOpts(spec, c.code), c.reason);
    const title = named && specs.length > 1 ? `tunnel ${spec.name} closed, the last one running` : 'tunnel closed';
    void hint().then((h) => {
      failure = new CliError(code === EXIT.ok ? EXIT.error : code, title, c.reason || c.code, h);
      finish(failure.exitCode);
    });
  });

  // Ctrl-C while still connecting: start() would never settle once stopped, so leave from here
  // (130 = interrupted, as shells report it).
  const abortConnecting = () => {
    screen.stop();
    void Promise.all([client.stop(), inspector?.close()]).finally(() => process.exit(130));
  };
  const pooled = specs.some((s) => s.pool);
  /** Ctrl-C to exit: a pool member's open requests may first take POOL_LEAVE_MS. */
  const leaveMs = pooled ? POOL_LEAVE_MS + EXIT_DEADLINE_MS : EXIT_DEADLINE_MS;
  // A forced exit shows the cursor again (the live block hides it); the block stays as drawn.
  const exitDeadline = new ExitDeadline(() => screen.tty && process.stderr.write('\x1b[?25h'));
  // One listener for the whole run, whose action changes with the phase: removing one listener
  // and adding another left an instant with none, and a Ctrl-C then killed burrow outright.
  let onSignal: () => void = abortConnecting;
  const signalled = (): void => {
    // The second Ctrl-C leaves at once; the first within EXIT_DEADLINE_MS (a pool member's
    // open requests may take POOL_LEAVE_MS), whatever the server does.
    if (exitDeadline.armed) return exitDeadline.now(130);
    exitDeadline.arm(leaveMs);
    if (pooled && registered.size > 0) screen.note(`leaving the pool: open requests finish first (up to ${POOL_LEAVE_MS / 1000} s); Ctrl-C again to leave now`);
    onSignal();
  };
  process.on('SIGINT', signalled);
  process.on('SIGTERM', signalled);
  screen.start();
  try {
    const started = await client.startAll();
    for (const t of started) {
      if (t.url !== undefined && !registered.has(t.name)) {
        ids.set(t.name, t.id!);
        screen.registered(t.id!, t.url, true, t.name);
        registered.add(t.name);
      }
    }
    const notes: string[] = [];
    inspection?.announce((line) => {
      screen.note(line);
      notes.push(line);
    });
    tellParent(specs.map((s) => started.find((t) => t.name === s.name)).flatMap((t) => (t?.url === undefined ? [] : [named ? `${t.name} ${t.url}` : t.url])), notes);
  } catch (e) {
    process.removeListener('SIGINT', signalled);
    process.removeListener('SIGTERM', signalled);
    screen.stop();
    await inspector?.close();
    if (e instanceof TunnelRefused) {
      if (e.code === 'tls') {
        throw new CliError(EXIT.error, 'TLS verification failed', e.message, 'if the server uses a private CA, pass its certificate with --ca FILE (or BURROW_CA, or store it in the context: `burrow context create NAME --server URL --ca FILE`)');
      }
      if (e.code === 'not-burrowd') throw new CliError(EXIT.unreachable, target.server, e.message, WRONG_SERVER_HINT);
      if (e.code === 'unreachable') {
        throw new CliError(EXIT.unreachable, 'server unreachable', e.message, unreachableHint(target.server, e.message));
      }
      const code = exitCodeForRefusal(e.code);
      const spec = specs.find((s) => s.name === e.tunnel) ?? specs[0]!;
      const title = named && specs.length > 1 ? 'every tunnel was refused' : 'tunnel refused';
      throw new CliError(code, title, e.message, refusalHint(code, await hintOpts(spec, e.code), e.message));
    }
    throw unreachable(target.server, e);
  }

  // Who this is, for the status block; a failure here only leaves the line out.
  if (screen.tty && !ctx.json) {
    api.get<User>('/me').then(
      (me) => (screen.info.account = `${me.email} (${me.role})`),
      () => undefined,
    );
  }

  // Started: a signal is a stop now (the same listener, so none falls between the two).
  onSignal = () => finish(EXIT.ok);
  const code = await done;
  // Ended by the server (no signal): leaving is bounded all the same.
  if (!exitDeadline.armed) exitDeadline.arm(leaveMs);
  const exitCode = failure ? (failure as CliError).exitCode : code === EXIT.ok ? laterCode : code;
  exitDeadline.code = exitCode;
  // The last frame first, while the connection (and its latency) is still there.
  screen.stop();
  // The goodbye (Close frames, the WebSocket close, the inspector) is sent at once; waiting on a
  // server that answers nothing would hold the exit: it gets GOODBYE_MS, a pool member's open
  // requests their POOL_LEAVE_MS.
  await Promise.race([Promise.all([client.stop().catch(() => undefined), inspector?.close()]), delay(pooled ? POOL_LEAVE_MS : GOODBYE_MS)]);
  screen.closed(ending.code, ending.reason);
  if (!ctx.json) screen.summary();
  // What is left (a socket whose peer never closes its side) must not keep burrow running: the
  // deadline ends the process if the event loop has not emptied by then.
  process.removeListener('SIGINT', signalled);
  process.removeListener('SIGTERM', signalled);
  process.once('SIGINT', () => exitDeadline.now(130));
  process.once('SIGTERM', () => exitDeadline.now(130));
  if (failure) throw failure;
  process.exitCode = exitCode;
}

export function registerExpose(program: Command): void {
  const common = (cmd: Command) =>
    detachOptions(cmd)
      .option('--id <name>', 'ask for this tunnel id (the first label of the public host name)')
      .option('--team <team>', 'bind the tunnel to a team (name or id) so its members see it')
      .option('--allow-ip <cidr>', 'only visitors from this address or CIDR (repeatable; v4 or v6)', cidrArg)
      .option('--deny-ip <cidr>', 'refuse visitors from this address or CIDR (repeatable; wins over --allow-ip)', cidrArg)
      .option('--expires <when>', 'end the tunnel after a duration (30m, 2h, 7d) or at a date-time (2026-12-31T18:00:00Z); at most a year', expiresArg)
      .option('-q, --quiet', 'no per-request lines');

  examples(
    addInspectOptions(
      common(
        program
          .command('http')
          .description('expose a local HTTP service at a public URL; its requests show in the inspector at http://127.0.0.1:4040')
          .argument('<target>', 'local port (3000), host:port (192.168.1.5:8080) or an https:// URL (https://localhost:8443)')
          .option('--basic-auth <user:pass>', 'visitors must log in with this user and password (HTTP Basic; repeatable)', collect)
          .option('--upstream-insecure', "accept the local https:// service's certificate without verifying it (self-signed dev servers)")
          .option('--response-timeout <duration>', 'how long the local service may take to start its answer (30s, 5m, 1h; default 60s); a streaming answer has no limit once it started')
          .option('--host-header <value>', "Host sent to the local service: 'rewrite' (its own host:port, for dev servers that refuse a foreign Host) or a value")
          .option('--pool', 'serve --id together with other clients of yours (or of the --team) started with --pool: visitors are spread over them, and it keeps serving while one leaves')
          // Hidden: it exists so the bench can weigh lanes against the server's cross-shard relay
          // (bench target burrow-mesh); a user gains nothing from it but one connection less.
          .addOption(new Option('--no-lanes', 'hold one control connection, no lane per server shard').hideHelp())
          // Hidden, for the bench's cluster scenario: a visitor at another node then crosses a link.
          .addOption(new Option('--no-siblings', 'no second connection on another node of a cluster').hideHelp()),
      ),
    ).action(exposeAction('http')),
    [
      'burrow http 3000',
      'burrow http https://localhost:8443 --upstream-insecure',
      'burrow http h2c://localhost:50051 --response-timeout 5m   # a gRPC service',
      'burrow http 5173 --host-header rewrite   # Vite, webpack-dev-server: they check Host',
      'burrow http 3000 --id myapp          # http://myapp.<domain>',
      'burrow http 192.168.1.5:8080 --team web',
      'burrow http 3000 --id api --pool     # on each machine: one id, served by all of them',
      'burrow http 3000 --basic-auth alice:correct-horse --expires 2h',
      'burrow http 3000 --allow-ip 203.0.113.0/24 --allow-ip 2001:db8::/32 --deny-ip 203.0.113.9',
      'burrow http 3000 --inspect 4041      # the inspector on http://127.0.0.1:4041',
      'burrow http 3000 --no-inspect',
      '# in a script: returns once the tunnel is up, with the URL on stdout',
      'URL=$(burrow http 3000 --detach) && curl "$URL" && burrow stop',
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
    ['burrow tcp 22', 'burrow tcp 5432 --remote-port 25432', 'burrow tcp db.internal:5432 --team ops', 'burrow tcp 22 --allow-ip 198.51.100.0/24 --expires 8h', 'burrow tcp 5432 --detach --pid-file /tmp/db.pid   # stop: burrow stop --pid-file /tmp/db.pid'],
  );
}
