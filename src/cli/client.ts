import { CliError, EXIT, exitCodeForStatus } from './errors.js';
import type { Target } from './config.js';
import { fetchTrusting, tlsError } from './tls-trust.js';
import { keyHint, notLoggedIn } from './key-hint.js';
import { isJsonType, isProxyUnavailable, notBurrowdMessage } from '../client/not-burrowd.js';

// The management API client: JSON in, JSON out, problem+json turned into a CliError whose exit
// code follows the status (README "The CLI"), and a hint naming the next command to try.

/** Per-status hints a command can give, e.g. { 404: 'list teams with `burrow teams list`' }. */
export type Hints = Partial<Record<number, string>>;

export interface RequestOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | undefined>;
  hints?: Hints;
}

/** Connection-level failures that mean "nothing answered there" (exit 6). */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ETIMEDOUT',
  'EPIPE',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
]);

/** A slow server still answers; one that takes longer than this is treated as unreachable. */
const REQUEST_TIMEOUT_MS = 30_000;

export class ApiClient {
  constructor(readonly target: Target) {}

  get server(): string {
    return this.target.server;
  }

  async request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const token = this.target.token;
    if (!token) throw await notLoggedIn(this.target);
    const url = new URL(`${this.server}/api/v1${path}`);
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: 'application/json' };
    let body: string | undefined;
    if (opts.body !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.body);
    }
    let res;
    try {
      res = await fetchTrusting(this.target.ca, url, { method, headers, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    } catch (err) {
      throw unreachable(this.server, err);
    }
    const text = await res.text();
    if (text.length > 0 && !isJsonType(res.headers.get('content-type'))) {
      const proxy = isProxyUnavailable(res.status);
      throw new CliError(proxy ? exitCodeForStatus(res.status) : EXIT.unreachable, this.server, notBurrowdMessage(res.status, res.headers.get('content-type'), method, url.pathname), proxy ? 'try again shortly; else check the proxy and burrowd' : WRONG_SERVER_HINT);
    }
    let json: unknown = undefined;
    if (text.length > 0) {
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
    }
    if (res.ok) {
      if (json === undefined) {
        throw new CliError(EXIT.error, 'unexpected response', `${method} ${url.pathname} answered ${res.status} without JSON`, serverHint(this.server));
      }
      return json as T;
    }
    const hints = { ...opts.hints };
    // A refused key: how to get one depends on whether this server has a browser login.
    if (res.status === 401 && hints[401] === undefined) hints[401] = `the key is missing, expired or revoked: ${await keyHint(this.target)}`;
    throw problemError(res.status, json, res.headers.get('retry-after'), this.server, hints);
  }

  get<T>(path: string, opts?: RequestOptions): Promise<T> {
    return this.request<T>('GET', path, opts);
  }
  post<T>(path: string, body?: unknown, opts?: RequestOptions): Promise<T> {
    return this.request<T>('POST', path, { ...opts, body });
  }
  put<T>(path: string, body?: unknown, opts?: RequestOptions): Promise<T> {
    return this.request<T>('PUT', path, { ...opts, body });
  }
  delete<T>(path: string, opts?: RequestOptions): Promise<T> {
    return this.request<T>('DELETE', path, opts);
  }
}

export const WRONG_SERVER_HINT = 'check --server, BURROW_SERVER or `burrow context current`';

function serverHint(server: string): string {
  return `is ${server} a burrow server? check --server, BURROW_SERVER or \`burrow context current\``;
}

/** Walk an error's cause chain for a system error code (undici wraps it in "fetch failed"). */
export function errorCode(err: unknown): string | undefined {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    if (typeof e.code === 'string') return e.code;
    if ((e as Error).name === 'TimeoutError') return 'ETIMEDOUT';
  }
  return undefined;
}

function innermostMessage(err: unknown): string {
  let e = err as { message?: unknown; cause?: unknown };
  for (let i = 0; i < 5 && e.cause && typeof e.cause === 'object'; i++) e = e.cause as typeof e;
  return typeof e.message === 'string' ? e.message : String(err);
}

export function unreachable(server: string, err: unknown): CliError {
  // A certificate the CLI refused is not "unreachable": the server answered, and --ca may help.
  const tls = tlsError(server, err);
  if (tls) return tls;
  const code = errorCode(err);
  if (code && !UNREACHABLE_CODES.has(code) && !code.startsWith('UND_ERR')) {
    return new CliError(EXIT.error, 'request failed', `${server}: ${code}`, serverHint(server));
  }
  const why = code ?? innermostMessage(err);
  return new CliError(EXIT.unreachable, 'server unreachable', `cannot connect to ${server} (${why})`, unreachableHint(server, why));
}

/** What to check when nothing answered: a name that does not resolve is not a server that is down. */
export function unreachableHint(server: string, code: string): string {
  if (/\b(ENOTFOUND|EAI_AGAIN|EAI_NONAME|EAI_NODATA)\b/.test(code)) {
    let host = server;
    try {
      host = new URL(server).hostname;
    } catch {
      /* keep the text */
    }
    return `the name ${host} does not resolve (DNS): check its spelling in --server, BURROW_SERVER or \`burrow context current\`, or its DNS record`;
  }
  return 'is burrowd running there? check --server, BURROW_SERVER or `burrow context current`';
}

const DEFAULT_HINTS: Record<number, string> = {
  400: 'check the values given; `--help` shows what each command accepts',
  403: 'this needs a key with the `management` scope or an admin/owner role; `burrow whoami` shows yours',
  404: 'it does not exist or is not visible to you',
  409: 'it clashes with something that exists',
  500: 'the server failed; its logs say why',
  503: 'the server is busy or its database is down; try again shortly',
};

function problemError(status: number, json: unknown, retryAfter: string | null, server: string, hints: Hints): CliError {
  const p = (json && typeof json === 'object' ? json : {}) as { title?: unknown; detail?: unknown; errors?: unknown };
  const title = typeof p.title === 'string' && p.title ? p.title : `HTTP ${status}`;
  let detail = typeof p.detail === 'string' && p.detail ? p.detail : json === undefined ? 'the server answered without a problem body' : '';
  if (Array.isArray(p.errors) && p.errors.length > 0) {
    // The detail already says the first field's problem: repeating it reads as two errors.
    const fields = p.errors
      .filter((e: { message?: unknown }) => !(detail && typeof e.message === 'string' && detail.includes(e.message)))
      .map((e: { field?: unknown; message?: unknown }) => `${String(e.field ?? '')} ${String(e.message ?? '')}`.trim())
      .join('; ');
    if (fields) detail = detail ? `${detail} (${fields})` : fields;
  }
  let hint = hints[status] ?? DEFAULT_HINTS[status] ?? (status >= 500 ? DEFAULT_HINTS[500] : undefined);
  if (status === 429) hint = `too many failed logins from this address; wait ${retryAfter ?? 'a minute'}s and check the key`;
  if (json === undefined && status === 404) hint = serverHint(server);
  return new CliError(exitCodeForStatus(status), title, detail || title, hint, status);
}
