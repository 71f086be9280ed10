import * as client from 'openid-client';
import type { ShardContext } from '../../edge/shard-context.js';
import type { Config } from '../../config.js';
import { route, type RequestData, type Reply } from '../../http/uws.js';
import { ApiError } from '../../errors.js';
import { issueKey, invalidateKeys } from '../api-keys.js';
import { GithubProvider } from './github.js';
import { OidcProvider } from './oidc.js';
import { LoginFailure, type LoginProvider } from './provider.js';
import { createLoginCode, savePendingLogin, takeLoginCode, takePendingLogin } from './pending.js';
import { LinkRefused, SignupClosed, userForIdentity } from './link.js';
import { canonicalName, nameKey, nameProblem } from '../../names.js';
import { getUser } from '../../db/users.js';
import { CHALLENGE_RE, VERIFIER_RE, randomToken, verifierMatches } from './secrets.js';
import { PAGE_HEADERS, RETRY_HINT, pageReply, redirectReply } from './pages.js';

// Browser login (README "Browser login"). Three routes, any of which may land on any shard
// (state lives in the database: pending.ts), and GET /auth/v1/providers (the configured names):
//
//   CLI ──opens──▶ GET  /auth/v1/<p>/authorize?port=&code_challenge=   pending login (10 min)
//                   302 ▶ provider (state, PKCE S256 toward it, nonce with OIDC)
//   provider ────▶ GET  /auth/v1/<p>/callback?code=&state=               pending login taken
//                   code exchange + validation (github.ts / oidc.ts) → user (link.ts)
//                   302 ▶ http://127.0.0.1:<port>/callback?code=<one-time code, 2 min>
//   CLI ─────────▶ POST /auth/v1/token {code, code_verifier, hostname?}  code taken, verifier
//                   checked against the authorize request's challenge → 201 CreatedKey
//
// The API key exists only in that last response body: never in a URL, a page or a log line.
// The one-time code is useless without the CLI's verifier, and failures after the state check
// go back to the CLI as ?error=&error_description= so it can stop waiting and say why.

const TOKEN_BODY_MAX_BYTES = 4096;
const BOTH_SCOPES = ['tunnels', 'management'] as const;

/** The configured providers by name; throws with an operator-facing message if one is unusable. */
export function buildProviders(config: Config): Map<string, LoginProvider> {
  const providers = new Map<string, LoginProvider>();
  if (config.github) providers.set('github', new GithubProvider(config.github, config.baseUrl, config.signup.githubAllowedOrgs));
  if (config.oidc) providers.set(config.oidc.name, new OidcProvider(config.oidc, config.baseUrl));
  return providers;
}

/** For start-up: throws if a provider's settings are unusable (e.g. plain-http endpoints off loopback). */
export function checkOauthConfig(config: Config): void {
  buildProviders(config);
}

export function installOauth(ctx: ShardContext): void {
  let providers: Map<string, LoginProvider>;
  try {
    providers = buildProviders(ctx.config);
  } catch (err) {
    ctx.log.error({ err: (err as Error).message }, 'browser login disabled: provider settings are unusable');
    route(ctx.http, 'get', '/auth/v1/*', 0, () =>
      pageReply(503, 'Login is unavailable', 'Browser login is misconfigured on this server.', 'The server log says what to fix.'),
    );
    return;
  }
  // Lets `burrow login` say "no such provider" at once instead of leaving the user at a 404 page.
  const names = JSON.stringify({ providers: [...providers.keys()] });
  route(ctx.http, 'get', '/auth/v1/providers', 0, () => ({ status: 200, headers: { 'content-type': 'application/json' }, body: names }));
  route(ctx.http, 'get', '/auth/v1/:provider/authorize', 1, (req) => asPage(ctx, () => authorize(ctx, providers, req)));
  route(ctx.http, 'get', '/auth/v1/:provider/callback', 1, (req) => asPage(ctx, () => callback(ctx, providers, req)));
  route(ctx.http, 'post', '/auth/v1/token', 0, (req) => token(ctx, req));
}

/** Browser-facing routes answer an HTML page on any failure (database down, ...), never JSON or a trace. */
async function asPage(ctx: ShardContext, handle: () => Promise<Reply>): Promise<Reply> {
  try {
    return await handle();
  } catch (err) {
    ctx.log.error({ err }, 'browser login: request failed');
    return pageReply(500, 'Login failed', 'The server could not complete this step of the login; its log says why.', RETRY_HINT);
  }
}

/** Provider-supplied text shown to people: no control characters (terminal escapes), bounded. */
function plain(text: string, max = 200): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, ' ').slice(0, max);
}

function unknownProvider(name: string, providers: Map<string, LoginProvider>): Reply {
  const names = [...providers.keys()].join(', ');
  return pageReply(404, 'Unknown login provider', `This server has no login provider named "${name}".`, `Available: ${names}. Use \`burrow login --provider NAME\`.`);
}

async function authorize(ctx: ShardContext, providers: Map<string, LoginProvider>, req: RequestData): Promise<Reply> {
  const provider = providers.get(req.params[0]!);
  if (!provider) return unknownProvider(req.params[0]!, providers);
  const portText = req.query.get('port') ?? '';
  const cliPort = /^\d{1,5}$/.test(portText) ? Number(portText) : NaN;
  const cliChallenge = req.query.get('code_challenge') ?? '';
  const method = req.query.get('code_challenge_method') ?? 'S256';
  if (!(cliPort >= 1 && cliPort <= 65535) || !CHALLENGE_RE.test(cliChallenge) || method !== 'S256') {
    return pageReply(
      400,
      'Invalid login link',
      'This link needs a port (1-65535) and a PKCE S256 code_challenge (43 base64url characters).',
      'Start the login with `burrow login` rather than opening this address by hand.',
    );
  }
  const state = randomToken();
  const providerVerifier = client.randomPKCECodeVerifier();
  const nonce = provider.usesNonce ? randomToken() : null;
  // The CLI's own state (optional, for older CLIs): sent back with the code or the error, so the
  // CLI can tell its login's callback from one another web page made its browser send.
  const cliStateText = req.query.get('state');
  if (cliStateText !== null && !CLI_STATE_RE.test(cliStateText)) {
    return pageReply(400, 'Invalid login link', 'The state of this link must be 16-128 base64url characters.', 'Start the login with `burrow login` rather than opening this address by hand.');
  }
  const saved = await savePendingLogin(ctx.sql, state, { provider: provider.name, cliPort, cliChallenge, providerVerifier, nonce, cliState: cliStateText }, req.ip);
  if (saved === 'address') {
    ctx.log.warn({ ip: req.ip }, 'browser login: too many logins in progress from one address');
    return pageReply(429, 'Too many logins in progress', 'Too many logins were started from your address in the last 10 minutes.', 'Finish or abandon them, and try again in a few minutes.');
  }
  if (saved === 'server') {
    ctx.log.warn('browser login: too many logins in progress; refusing new ones until some expire');
    return pageReply(503, 'Too many logins in progress', 'This server is handling too many logins right now.', 'Try again in a few minutes.');
  }
  const url = provider.authorizationUrl({ state, codeChallenge: await client.calculatePKCECodeChallenge(providerVerifier), nonce });
  return redirectReply(url.toString());
}

/** Sends the browser back to the CLI's loopback listener with an OAuth-style error. */
const CLI_STATE_RE = /^[A-Za-z0-9_-]{16,128}$/;

/** Where the login ends: the CLI's loopback listener, with its state when it sent one. */
function cliCallback(cli: { cliPort: number; cliState: string | null }): URL {
  const u = new URL(`http://127.0.0.1:${cli.cliPort}/callback`);
  if (cli.cliState !== null) u.searchParams.set('state', cli.cliState);
  return u;
}

function toCliError(cli: { cliPort: number; cliState: string | null }, code: string, description: string): Reply {
  const u = cliCallback(cli);
  u.searchParams.set('error', code);
  u.searchParams.set('error_description', description);
  return redirectReply(u.toString());
}

async function callback(ctx: ShardContext, providers: Map<string, LoginProvider>, req: RequestData): Promise<Reply> {
  const provider = providers.get(req.params[0]!);
  if (!provider) return unknownProvider(req.params[0]!, providers);
  const state = req.query.get('state');
  if (!state || state.length > 200) {
    return pageReply(400, 'Invalid login response', 'The login provider sent the browser back without a state.', RETRY_HINT);
  }
  const pending = await takePendingLogin(ctx.sql, provider.name, state);
  if (!pending) {
    return pageReply(400, 'Login link expired or already used', 'Each login link works once, within 10 minutes.', RETRY_HINT);
  }
  const cli = pending;

  const providerError = req.query.get('error');
  if (providerError !== null) {
    const code = /^[a-z_]{1,64}$/.test(providerError) ? providerError : 'access_denied';
    const said = plain(req.query.get('error_description') ?? '');
    ctx.log.info({ provider: provider.name, error: code }, 'login refused by the provider');
    return toCliError(cli, code, `The login provider refused the login (${code}${said ? `: ${said}` : ''}).`);
  }

  let who;
  try {
    const callbackUrl = new URL(`${ctx.config.baseUrl}/auth/v1/${provider.name}/callback`);
    for (const [k, v] of req.query) callbackUrl.searchParams.append(k, v);
    who = await provider.identify(callbackUrl, { state, verifier: pending.providerVerifier, nonce: pending.nonce });
  } catch (err) {
    if (err instanceof LoginFailure) {
      ctx.log.warn({ provider: provider.name, reason: err.message }, 'login failed');
      return toCliError(cli, err.code, err.message);
    }
    ctx.log.warn({ provider: provider.name, failure: describeProviderError(err) }, 'login failed: the provider answer was refused');
    return toCliError(cli, 'server_error', "The login provider's answer could not be verified; the server log has the details.");
  }
  if (!who.email) {
    return toCliError(cli, 'access_denied', 'The login provider did not give an email address, which burrow needs. Check the scopes the server asks for.');
  }

  // The state is spent: from here on every outcome goes back to the CLI, which is waiting.
  try {
    const policy = ctx.config.signup;
    const email = canonicalName(who.email);
    const hidden = nameProblem(email, 'the email address');
    if (hidden) return toCliError(cli, 'access_denied', `The login provider's ${hidden}; burrow refuses it.`);
    const domain = nameKey(email.slice(email.lastIndexOf('@') + 1));
    if (policy.allowedEmailDomains.length > 0 && !(who.emailVerified && policy.allowedEmailDomains.includes(domain))) {
      ctx.log.info({ provider: provider.name, verified: who.emailVerified }, 'browser login refused: email domain not allowed');
      return toCliError(cli, 'access_denied', `This server admits only verified email addresses in ${policy.allowedEmailDomains.join(', ')}; ${provider.name} gave ${plain(email, 320)}${who.emailVerified ? '' : ' (not verified)'}.`);
    }
    let user;
    try {
      user = await userForIdentity(ctx.sql, provider.name, { ...who, email }, ctx.config.initialAdminEmail, policy.mode, { linkAdmins: policy.linkAdmins });
    } catch (err) {
      if (err instanceof LinkRefused) {
        ctx.log.warn({ provider: provider.name, refused: err.why }, 'browser login refused: its verified email is a user no login may be linked to');
        return toCliError(cli, 'access_denied', `This login cannot be linked to the existing burrow user: ${plain(err.message, 600)}.`);
      }
      if (!(err instanceof SignupClosed)) throw err;
      ctx.log.info({ provider: provider.name }, 'browser login refused: sign-up is closed');
      return toCliError(cli, 'access_denied', `Sign-up is closed on this server: there is no burrow account for ${plain(email, 320)}. Ask an administrator to create one.`);
    }
    if (user.roleChanged) await invalidateKeys(ctx, [], [user.id]);
    ctx.log.info({ provider: provider.name, userId: user.id, how: user.how, role: user.role }, 'browser login: provider identity accepted');
    if (user.deactivated) {
      if (user.how === 'created') return toCliError(cli, 'access_denied', `Your burrow account ${plain(user.email, 320)} was created and waits for an administrator to activate it (burrow users reactivate). Log in again once they have.`);
      return toCliError(cli, 'access_denied', `The burrow account ${plain(user.email, 320)} is deactivated. Ask a burrow administrator to reactivate it.`);
    }
    const code = await createLoginCode(ctx.sql, user.id, provider.name, pending.cliChallenge);
    const back = cliCallback(cli);
    back.searchParams.set('code', code);
    return redirectReply(back.toString());
  } catch (err) {
    ctx.log.error({ err, provider: provider.name }, 'browser login: could not record the login');
    return toCliError(cli, 'server_error', 'The server could not complete the login; its log says why.');
  }
}

/** What may be logged of a provider error: codes and messages, never bodies, tokens or claims. */
function describeProviderError(err: unknown): Record<string, unknown> {
  const e = err as { name?: unknown; code?: unknown; message?: unknown; error?: unknown; error_description?: unknown; status?: unknown; cause?: unknown };
  const out: Record<string, unknown> = { name: e?.name, code: e?.code, message: e?.message };
  if (typeof e?.error === 'string') out.error = e.error;
  if (typeof e?.error_description === 'string') out.error_description = e.error_description.slice(0, 200);
  if (typeof e?.status === 'number') out.status = e.status;
  // ClientError → OperationProcessingError → {claim, expected, claims}: name the failed claim
  // and, for the issuer, what was expected (the operator may need --oauth-issuer); never the claims.
  for (let c = e?.cause as { claim?: unknown; expected?: unknown; code?: unknown; message?: unknown; cause?: unknown } | undefined, depth = 0; c && typeof c === 'object' && depth < 3; c = c.cause as typeof c, depth++) {
    if (typeof c.code === 'string' && out.causeCode === undefined) out.causeCode = c.code;
    if (typeof c.message === 'string' && out.causeMessage === undefined) out.causeMessage = c.message;
    if (typeof c.claim === 'string') out.claim = c.claim;
    if (c.claim === 'iss' && typeof c.expected === 'string') out.expectedIssuer = c.expected;
  }
  return out;
}

function badToken(detail: string): ApiError {
  return new ApiError('bad-request', detail);
}

/** Characters a key name keeps of a client's hostname. */
export function loginKeyName(hostname: unknown): string {
  const h = typeof hostname === 'string' ? hostname.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 63) : '';
  return `cli@${h.replace(/^[-.]+|[-.]+$/g, '') || 'unknown'}`;
}

async function token(ctx: ShardContext, req: RequestData): Promise<Reply> {
  const type = (req.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json') throw new ApiError('unsupported-media-type', `expected Content-Type application/json, got "${type || 'none'}"`);
  if (req.body.length > TOKEN_BODY_MAX_BYTES) throw new ApiError('payload-too-large', `request body is over the ${TOKEN_BODY_MAX_BYTES}-byte limit`);
  let body: unknown;
  try {
    body = JSON.parse(req.body.toString('utf8'));
  } catch {
    throw badToken('the body is not valid JSON');
  }
  const b = (body && typeof body === 'object' ? body : {}) as Record<string, unknown>;
  if (typeof b.code !== 'string' || b.code.length === 0 || b.code.length > 200) throw badToken('"code" (the one-time login code) is required');
  if (typeof b.code_verifier !== 'string' || !VERIFIER_RE.test(b.code_verifier)) {
    throw badToken('"code_verifier" is required: 43-128 characters of A-Z a-z 0-9 - . _ ~ (RFC 7636)');
  }
  if (b.hostname !== undefined && typeof b.hostname !== 'string') throw badToken('"hostname" must be a string');

  // One message for unknown, used, expired and wrong-verifier codes: a holder of a stolen code
  // learns nothing, and the code is gone either way.
  const refused = 'the login code is invalid, expired or already used, or the code_verifier does not match; run `burrow login` again';
  const login = await takeLoginCode(ctx.sql, b.code);
  if (!login || !verifierMatches(b.code_verifier, login.cliChallenge)) throw badToken(refused);

  const u = await getUser(ctx.sql, login.userId);
  if (!u || u.deactivated_at) throw new ApiError('forbidden', 'this burrow account is deactivated; ask an administrator to reactivate it');

  const created = await issueKey(ctx, {
    userId: login.userId,
    name: loginKeyName(b.hostname),
    scopes: [...BOTH_SCOPES],
    expiresAt: new Date(Date.now() + ctx.config.loginKeyTtlSecs * 1000),
    replaceSameName: true,
  });
  ctx.log.info({ provider: login.provider, userId: login.userId, keyId: created.info.id, name: created.info.name }, 'browser login: key issued');
  return {
    status: 201,
    headers: { 'content-type': 'application/json', 'cache-control': 'no-store', pragma: 'no-cache', 'referrer-policy': PAGE_HEADERS['referrer-policy']! },
    body: JSON.stringify(created),
  };
}
