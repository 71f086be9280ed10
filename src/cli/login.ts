import { spawn } from 'node:child_process';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { Command } from 'commander';
import { resolve as resolvePath } from 'node:path';
import { fetchTrusting } from './tls-trust.js';
import { htmlPage } from '../auth/oauth/pages.js';
import { ApiClient, unreachable, WRONG_SERVER_HINT } from './client.js';
import { isJsonType, isProxyUnavailable, notBurrowdMessage } from '../client/not-burrowd.js';
import { act, examples, type ActionContext } from './common.js';
import { checkServerUrl, loadConfig, normalizeServer, sameServer, setContextToken } from './config.js';
import { CliError, EXIT, exitCodeForStatus } from './errors.js';
import { err, formatTime, out, printJson, tokenPrefix } from './output.js';
import type { ApiKey, CreatedKey, User } from './types.js';

// burrow login / burrow logout (README "Browser login"):
//
//   burrow ──listens──▶ 127.0.0.1:<ephemeral>/callback
//   browser ──▶ {server}/auth/v1/<provider>/authorize?port=&code_challenge=  ──▶ provider ──▶ server
//   server ──302──▶ http://127.0.0.1:<port>/callback?code=<one-time code>   (or ?error=)
//   burrow ──POST {server}/auth/v1/token {code, code_verifier, hostname}──▶ 201 {info, key}
//
// The code alone is worthless: only this process knows the PKCE verifier whose S256 challenge
// the authorize URL carried. The key arrives in a response body and goes straight into the
// context file (mode 0600); it is never printed. The browser tab learns only how it ended.

const LOGIN_TIMEOUT_MS = 5 * 60_000;
const TOKEN_TIMEOUT_MS = 30_000;
const PROVIDER_RE = /^[a-z0-9][a-z0-9-]{0,31}$/;

interface LoginOptions {
  provider: string;
  browser: boolean;
}

type CallbackResult = { code: string } | { error: string; description: string };

/** The loopback listener the server's redirect comes back to; answers the tab once the login ended. */
function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

class Loopback {
  private server: Server;
  /** The tab that brought the callback, answered when the login has ended. */
  private pending: ServerResponse | null = null;
  private done = false;
  private settle!: (r: CallbackResult) => void;
  readonly result: Promise<CallbackResult>;
  port = 0;
  /** Sent in the authorize link; the server returns it with the code or the error. */
  readonly state = randomBytes(24).toString('base64url');

  constructor() {
    this.result = new Promise((resolve) => (this.settle = resolve));
    this.server = createServer((req, res) => this.onRequest(req, res));
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(0, '127.0.0.1', () => resolve());
    });
    this.port = (this.server.address() as AddressInfo).port;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', `http://127.0.0.1:${this.port}`);
    // Only the server's redirect, addressed to this very listener: a page using DNS rebinding
    // to reach it would carry another Host.
    if (req.method !== 'GET' || url.pathname !== '/callback' || req.headers.host !== `127.0.0.1:${this.port}`) {
      send(res, 404, 'Not found', 'This is the burrow CLI waiting for a login; nothing else is here.');
      return;
    }
    if (this.pending || this.done) {
      send(res, 409, 'Login already handled', 'This login has already finished. Check your terminal.');
      return;
    }
    // Only the callback of the login this process started: any web page can make the browser
    // request this address, and must not end the login or choose the message shown.
    const state = url.searchParams.get('state') ?? '';
    if (!safeEqual(state, this.state)) {
      send(res, 400, 'Not this login', 'This callback does not belong to the login burrow is waiting for; it was ignored.');
      return;
    }
    const code = url.searchParams.get('code');
    const error = url.searchParams.get('error');
    if (!code && !error) {
      send(res, 400, 'Invalid login response', 'The redirect carried neither a code nor an error.');
      return;
    }
    this.pending = res;
    this.settle(code ? { code } : { error: error!, description: url.searchParams.get('error_description') ?? '' });
  }

  /** Shows the browser tab how the login ended. */
  finish(ok: boolean, title: string, message: string, hint?: string): void {
    this.done = true;
    if (this.pending) send(this.pending, ok ? 200 : 400, title, message, hint);
    this.pending = null;
  }

  /** Stops listening once the last page is delivered (pages say `Connection: close`). */
  async close(): Promise<void> {
    if (this.pending) this.finish(false, 'Login failed', 'The login did not complete. Check your terminal.');
    await new Promise<void>((resolve) => {
      // A browser may hold a preconnected idle socket, or never read: do not wait on it for long.
      const force = setTimeout(() => this.server.closeAllConnections(), 1000);
      force.unref();
      this.server.close(() => {
        clearTimeout(force);
        resolve();
      });
      this.server.closeIdleConnections();
    });
  }
}

function send(res: ServerResponse, status: number, title: string, message: string, hint?: string): void {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
    'referrer-policy': 'no-referrer',
    'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'",
    connection: 'close',
  });
  res.end(htmlPage(title, message, hint));
}

/** Opens `url` in the user's browser ($BROWSER, else the platform's opener); false if that failed. */
function openBrowser(url: string): Promise<boolean> {
  const custom = process.env.BROWSER;
  const [cmd, args] = custom
    ? [custom, [url]]
    : process.platform === 'darwin'
      ? ['open', [url]]
      : process.platform === 'win32'
        ? ['rundll32', ['url.dll,FileProtocolHandler', url]]
        : ['xdg-open', [url]];
  return new Promise((resolve) => {
    try {
      const child = spawn(cmd, args, { stdio: 'ignore', detached: true });
      child.once('error', () => resolve(false));
      child.once('spawn', () => {
        child.unref();
        resolve(true);
      });
    } catch {
      resolve(false);
    }
  });
}

/** Text from a URL or a server, safe to print on a terminal (no escape sequences), bounded. */
function printable(text: string, max = 500): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, ' ').slice(0, max);
}

function timeout(ms: number): { promise: Promise<'timeout'>; cancel(): void } {
  let timer: NodeJS.Timeout;
  const promise = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  return { promise, cancel: () => clearTimeout(timer) };
}

/**
 * Fails fast when the server has no such provider (or no browser login at all), rather than
 * leaving the user at an error page while this process waits for 5 minutes.
 */
async function checkProvider(server: string, provider: string, ca: string | null): Promise<void> {
  let res;
  try {
    res = await fetchTrusting(ca, `${server}/auth/v1/providers`, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(TOKEN_TIMEOUT_MS) });
  } catch (e) {
    throw unreachable(server, e);
  }
  // Another server's 404 page is not "no login provider": nothing it says is about burrow's login.
  if (!isJsonType(res.headers.get('content-type'))) {
    await res.body?.cancel();
    throw new CliError(isProxyUnavailable(res.status) ? EXIT.error : EXIT.unreachable, server, notBurrowdMessage(res.status, res.headers.get('content-type'), 'GET', new URL(`${server}/auth/v1/providers`).pathname), WRONG_SERVER_HINT);
  }
  const body = (await res.json().catch(() => null)) as { providers?: unknown } | null;
  const names = Array.isArray(body?.providers) ? body.providers.filter((n): n is string => typeof n === 'string') : null;
  if (res.status === 404 || (res.ok && names && names.length === 0)) {
    throw new CliError(EXIT.usage, 'browser login unavailable', `${server} has no login provider configured`, 'ask an administrator for a key, then `burrow context create NAME --server URL --token KEY`');
  }
  if (res.status === 503 && !names) {
    throw new CliError(EXIT.error, 'browser login unavailable', `${server} has unusable login provider settings`, 'its administrator will find the reason in the server log');
  }
  if (res.ok && names && !names.includes(provider)) {
    throw new CliError(EXIT.usage, 'unknown provider', `${server} has no login provider "${provider}"`, `available: ${names.join(', ')} (\`burrow login --provider NAME\`)`);
  }
  // Anything else (an older server, a proxy page): let the browser show what happens.
}

async function redeem(server: string, code: string, verifier: string, ca: string | null): Promise<CreatedKey> {
  let res;
  try {
    res = await fetchTrusting(ca, `${server}/auth/v1/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ code, code_verifier: verifier, hostname: hostname() }),
      signal: AbortSignal.timeout(TOKEN_TIMEOUT_MS),
    });
  } catch (e) {
    throw unreachable(server, e);
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (res.status === 201 && body && typeof (body as CreatedKey).key === 'string') return body as CreatedKey;
  const detail = (body as { detail?: unknown } | undefined)?.detail;
  throw new CliError(
    exitCodeForStatus(res.status) === EXIT.usage ? EXIT.auth : exitCodeForStatus(res.status),
    'login failed',
    typeof detail === 'string' ? printable(detail) : `the server answered ${res.status} to the key request`,
    'run `burrow login` again',
    res.status,
  );
}

/** The context a token was just stored in (setContextToken's choice, found the same way). */
function contextFor(explicit: string | undefined, server: string): string | null {
  const cfg = loadConfig();
  if (explicit && cfg.contexts[explicit]) return explicit;
  const cur = cfg.currentContext;
  if (cur && cfg.contexts[cur] && sameServer(cfg.contexts[cur]!.server, server)) return cur;
  return Object.keys(cfg.contexts).find((n) => sameServer(cfg.contexts[n]!.server, server)) ?? null;
}

/**
 * Where to log in. `--context NAME` may name a context that does not exist yet: with --server
 * (or BURROW_SERVER) this login creates it.
 */
function loginServer(ctx: ActionContext<LoginOptions>): string {
  const name = ctx.opts.context;
  if (name !== undefined && !loadConfig().contexts[name]) {
    const server = ctx.opts.server || process.env.BURROW_SERVER;
    if (!server) {
      throw new CliError(EXIT.usage, 'unknown context', `no context named "${name}"`, `pass --server URL to create it with this login: \`burrow login --context ${name} --server URL\``);
    }
    checkServerUrl(server, ctx.opts.server ? '--server' : 'BURROW_SERVER');
    return normalizeServer(server);
  }
  return normalizeServer(ctx.target().server);
}

/** The extra CA for this login: --ca, BURROW_CA, else the one stored with the server's context. */
function loginCa(ctx: ActionContext<LoginOptions>, server: string): string | null {
  if (ctx.opts.ca || process.env.BURROW_CA) return ctx.opts.ca || process.env.BURROW_CA || null;
  const cfg = loadConfig();
  const name = contextFor(ctx.opts.context, server);
  return (name ? cfg.contexts[name]?.ca : null) ?? null;
}

async function login(ctx: ActionContext<LoginOptions>): Promise<void> {
  const provider = ctx.opts.provider;
  if (!PROVIDER_RE.test(provider)) {
    throw new CliError(EXIT.usage, 'invalid provider', `"${provider}" is not a provider name`, 'e.g. `burrow login --provider okta`; the default is github');
  }
  const server = loginServer(ctx);
  const ca = loginCa(ctx, server);
  await checkProvider(server, provider, ca);
  const verifier = randomBytes(32).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const loop = new Loopback();
  await loop.listen();
  try {
    const url = new URL(`${server}/auth/v1/${provider}/authorize`);
    url.searchParams.set('port', String(loop.port));
    url.searchParams.set('code_challenge', challenge);
    url.searchParams.set('code_challenge_method', 'S256');
    url.searchParams.set('state', loop.state);

    const opened = ctx.opts.browser && (await openBrowser(url.toString()));
    err.line(opened ? 'Opening your browser to log in. If it does not open, visit:' : 'Open this address in a browser to log in:');
    err.line(`  ${url.toString()}`);
    if (!opened) {
      err.line(err.paint('dim', `The address sends the browser back to 127.0.0.1:${loop.port} on the machine it runs on; from another`));
      err.line(err.paint('dim', `machine, forward that port first: ssh -L ${loop.port}:127.0.0.1:${loop.port} <this host>`));
    }
    err.line(err.paint('dim', `Waiting for the login to finish (up to ${LOGIN_TIMEOUT_MS / 60_000} minutes)...`));

    const deadline = timeout(LOGIN_TIMEOUT_MS);
    const result = await Promise.race([loop.result, deadline.promise]);
    deadline.cancel();
    if (result === 'timeout') {
      throw new CliError(EXIT.error, 'login timed out', `no login came back within ${LOGIN_TIMEOUT_MS / 60_000} minutes`, 'run `burrow login` again (with --no-browser, open the printed address yourself)');
    }
    if ('error' in result) {
      // It came through a URL: shown escaped in the page, and without control characters here.
      const why = printable(result.description || `the login was refused (${result.error})`);
      loop.finish(false, 'Login failed', why, 'Run `burrow login` again.');
      throw new CliError(EXIT.auth, 'login refused', why, 'run `burrow login` again, or ask your burrow administrator');
    }

    let created: CreatedKey;
    try {
      created = await redeem(server, result.code, verifier, ca);
    } catch (e) {
      loop.finish(false, 'Login failed', e instanceof CliError ? e.detail : 'The key could not be fetched.', 'Check your terminal.');
      throw e;
    }
    setContextToken(ctx.opts.context ?? null, server, created.key, ctx.opts.ca ? resolvePath(ctx.opts.ca) : undefined);
    const contextName = contextFor(ctx.opts.context, server);
    const me = await new ApiClient({ server, token: created.key, contextName, ca }).get<User>('/me');
    loop.finish(true, 'Logged in', `You are logged in to burrow as ${me.email}. You can close this tab and return to your terminal.`);

    if (ctx.json) return printJson({ user: me, key: created.info, context: contextName, server });
    out.line(`Logged in to ${server} as ${out.paint('bold', me.email)}${me.name ? ` (${me.name})` : ''}, role ${me.role}.`);
    const info: ApiKey = created.info;
    out.line(
      `Key ${info.name} (${tokenPrefix(created.key)}, expires ${formatTime(info.expires_at)}) saved in context "${contextName ?? '?'}".`,
    );
  } finally {
    await loop.close();
  }
}

async function logout(ctx: ActionContext<Record<string, never>>): Promise<void> {
  const cfg = loadConfig();
  const name = ctx.opts.context ?? cfg.currentContext;
  const context = name ? cfg.contexts[name] : undefined;
  if (!name || !context) {
    throw new CliError(EXIT.usage, 'no context', ctx.opts.context ? `no context named "${ctx.opts.context}"` : 'there is no current context', 'list them with `burrow context list`');
  }
  if (!context.token) {
    if (ctx.json) return printJson({ context: name, server: context.server, logged_out: false, revoked: null });
    out.line(`Not logged in to ${context.server} (context "${name}" holds no key).`);
    return;
  }
  // A key that `burrow login` made (cli@<host>) is revoked too, so a copy of the config file is
  // worthless afterwards; other keys were made on purpose and are only forgotten here.
  let revoked: string | null = null;
  let warning: string | null = null;
  try {
    const client = new ApiClient({ server: context.server, token: context.token, contextName: name, ca: ctx.opts.ca || process.env.BURROW_CA || context.ca || null });
    const prefix = /^(bk_[0-9A-Za-z]{12})_/.exec(context.token)?.[1];
    const mine = (await client.get<ApiKey[]>('/keys')).find((k) => k.key_prefix === prefix);
    if (mine && mine.name.startsWith('cli@')) {
      await client.delete(`/keys/${mine.id}`);
      revoked = mine.name;
    }
  } catch (e) {
    warning = e instanceof CliError ? `${e.title}: ${e.detail}` : String(e);
  }
  setContextToken(name, context.server, null);
  if (ctx.json) return printJson({ context: name, server: context.server, logged_out: true, revoked });
  if (warning) err.line(err.paint('yellow', `warning: the key was not revoked on the server (${warning}); it is forgotten locally`));
  out.line(`Logged out of ${context.server} (context "${name}")${revoked ? `; key ${revoked} revoked on the server` : ''}.`);
}

export function registerLogin(program: Command): void {
  examples(
    program
      .command('login')
      .description('log in through your browser; a new key (cli@<hostname>) is stored in the current context')
      .option('--provider <name>', 'login provider configured on the server', 'github')
      .option('--no-browser', 'do not open a browser: print the address to open (e.g. over SSH)')
      .action(act<LoginOptions>((ctx) => login(ctx))),
    [
      'burrow login --server https://burrow.example.com',
      'burrow login --provider okta',
      'burrow login --context work --server https://burrow.work.example',
      '# print the address instead of opening a browser (open it yourself)',
      'burrow login --no-browser',
    ],
  );
  examples(
    program
      .command('logout')
      .description('forget the key of the current context (a key made by `burrow login` is also revoked)')
      .action(act<Record<string, never>>((ctx) => logout(ctx))),
    ['burrow logout', 'burrow logout --context prod'],
  );
}
