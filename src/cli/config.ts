import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { CliError, EXIT } from './errors.js';

// The contexts file: $XDG_CONFIG_HOME/burrow/config.json (default ~/.config/burrow/config.json).
// It holds API keys, so it is written atomically (temp file + rename, never a half-written file
// if the process dies) with mode 0600 in a 0700 directory.

/** One named server + key pair, like a kubectl context. */
export interface CliContext {
  server: string;
  token: string | null;
  /** PEM file of a CA to trust besides the system's (absolute path). */
  ca?: string | null;
  /**
   * The last resumption ticket burrowd gave this context's key (src/cli/ticket-store.ts): a
   * `burrow` started again soon after is taken back without its key's verification. Worth
   * nothing without the key, and kept in the same 0600 file.
   */
  resume?: string;
}

export interface CliConfig {
  /** Name of the context used when --context is not given; null when none is chosen. */
  currentContext: string | null;
  contexts: Record<string, CliContext>;
}

/** burrowd's default --port on this machine: where a fresh install listens. */
export const DEFAULT_SERVER = 'http://localhost:8080';

export function configPath(): string {
  const base = process.env.XDG_CONFIG_HOME || join(homedir(), '.config');
  return join(base, 'burrow', 'config.json');
}

export function emptyConfig(): CliConfig {
  return { currentContext: null, contexts: {} };
}

/** What a ticket may hold: it is sent back as a header value (as protocol/frames.ts checks Welcome's). */
const RESUME_TICKET_RE = /^[A-Za-z0-9._-]{1,128}$/;

export function loadConfig(): CliConfig {
  const path = configPath();
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return emptyConfig();
    throw new CliError(EXIT.error, 'cannot read config', `${path}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new CliError(EXIT.error, 'config file is not valid JSON', `${path}: ${(err as Error).message}`, `fix or delete ${path}`);
  }
  return normalize(raw);
}

/** Accept what an older or hand-edited file holds; drop what is not a context. */
function normalize(raw: unknown): CliConfig {
  const cfg = emptyConfig();
  if (!raw || typeof raw !== 'object') return cfg;
  const r = raw as Record<string, unknown>;
  const contexts = r.contexts && typeof r.contexts === 'object' ? (r.contexts as Record<string, unknown>) : {};
  for (const [name, v] of Object.entries(contexts)) {
    if (!v || typeof v !== 'object') continue;
    const c = v as Record<string, unknown>;
    if (typeof c.server !== 'string') continue;
    cfg.contexts[name] = {
      server: c.server,
      token: typeof c.token === 'string' ? c.token : null,
      ...(typeof c.ca === 'string' ? { ca: c.ca } : {}),
      ...(typeof c.resume === 'string' && RESUME_TICKET_RE.test(c.resume) ? { resume: c.resume } : {}),
    };
  }
  const current = typeof r.currentContext === 'string' ? r.currentContext : null;
  cfg.currentContext = current && cfg.contexts[current] ? current : null;
  return cfg;
}

export function saveConfig(cfg: CliConfig): void {
  const path = configPath();
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // The temp file is created 0600 from the start, so the key is never readable by others,
  // not even between write and rename; rename is atomic within one directory.
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(tmp, JSON.stringify(cfg, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
  chmodSync(tmp, 0o600); // the umask cannot widen 0600, but an existing ACL default might
  renameSync(tmp, path);
}

/** Compare servers by origin so "http://h:1/" and "http://h:1" are the same server. */
export function sameServer(a: string, b: string): boolean {
  return normalizeServer(a) === normalizeServer(b);
}

export function normalizeServer(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, '')}`;
  } catch {
    return url.replace(/\/+$/, '');
  }
}

/**
 * A server must be an http(s) URL: WHATWG parses "localhost:8080" as scheme "localhost:", which
 * would otherwise surface much later as "no API key for localhost://8080".
 */
export function checkServerUrl(server: string, source: string): void {
  let u: URL | null = null;
  try {
    u = new URL(server);
  } catch {
    u = null;
  }
  if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:')) {
    const why = u ? `has scheme "${u.protocol.replace(/:$/, '')}", not http or https` : 'is not a URL';
    throw new CliError(EXIT.usage, 'invalid server', `${source} "${server}" ${why}`, `give it with its scheme, e.g. http://${server.replace(/^[a-z][a-z0-9+.-]*:\/\//i, '')} or https://host`);
  }
}

export interface Target {
  server: string;
  token: string | null;
  contextName: string | null;
  /** PEM file of an extra CA to trust (--ca, BURROW_CA, the context's), or null. */
  ca: string | null;
}

/**
 * Which server and key a command uses. Precedence: flag > env (BURROW_SERVER, BURROW_TOKEN) >
 * context file (--context NAME, else the current context). A context's key is only sent to that
 * context's own server: pointing --server elsewhere never leaks it to another host.
 */
export function resolveTarget(opts: { server?: string; token?: string; context?: string; ca?: string }): Target {
  const cfg = loadConfig();
  let contextName: string | null = null;
  if (opts.context !== undefined) {
    if (!cfg.contexts[opts.context]) {
      throw new CliError(EXIT.usage, 'unknown context', `no context named "${opts.context}"`, 'list them with `burrow context list`');
    }
    contextName = opts.context;
  } else {
    contextName = cfg.currentContext;
  }
  const ctx = contextName ? cfg.contexts[contextName] ?? null : null;
  const server = opts.server || process.env.BURROW_SERVER || ctx?.server || DEFAULT_SERVER;
  checkServerUrl(server, opts.server ? '--server' : process.env.BURROW_SERVER ? 'BURROW_SERVER' : `context "${contextName}"`);
  let token: string | null = opts.token || process.env.BURROW_TOKEN || null;
  if (token === null && ctx && sameServer(ctx.server, server)) token = ctx.token;
  const ca = opts.ca || process.env.BURROW_CA || (ctx && sameServer(ctx.server, server) ? ctx.ca ?? null : null) || null;
  return { server: normalizeServer(server), token, contextName, ca };
}

/**
 * Store a key (null: forget it). Goes to the named context if given; else to the current context
 * when it is for `server`; else to any context for `server`; else a new context for `server`
 * ("default", or the server's host if "default" is taken) is created and made current, since the
 * user just chose that server and later commands should go there.
 */
export function setContextToken(contextName: string | null, server: string, token: string | null, ca?: string): void {
  const cfg = loadConfig();
  const url = normalizeServer(server);
  let name = contextName;
  if (name === null) {
    const cur = cfg.currentContext;
    if (cur && cfg.contexts[cur] && sameServer(cfg.contexts[cur].server, url)) name = cur;
    else name = Object.keys(cfg.contexts).find((n) => sameServer(cfg.contexts[n]!.server, url)) ?? null;
  }
  if (name !== null && cfg.contexts[name]) {
    const ctx = cfg.contexts[name];
    ctx.server = url;
    if (ctx.token !== token) delete ctx.resume; // the ticket stood for the old key
    ctx.token = token;
    if (ca !== undefined) ctx.ca = ca;
    if (!cfg.currentContext) cfg.currentContext = name;
  } else {
    name ??= freeContextName(cfg, url);
    cfg.contexts[name] = { server: url, token, ...(ca !== undefined ? { ca } : {}) };
    cfg.currentContext = name;
  }
  saveConfig(cfg);
}

function freeContextName(cfg: CliConfig, url: string): string {
  if (!cfg.contexts.default) return 'default';
  let base: string;
  try {
    base = new URL(url).host.replace(/[^A-Za-z0-9.-]/g, '-');
  } catch {
    base = 'server';
  }
  let name = base;
  for (let i = 2; cfg.contexts[name]; i++) name = `${base}-${i}`;
  return name;
}
