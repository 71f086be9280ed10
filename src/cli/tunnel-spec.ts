import { InvalidArgumentError } from 'commander';
import { basicAuthProblem, expiryProblem, MAX_BASIC_AUTH, MAX_CIDRS, parseCidr, type AccessRules } from '../protocol/access.js';
import { tunnelIdProblem } from '../protocol/tunnel-id.js';
import { parseExpires } from './keys.js';
import { unknownKeyMessage } from './did-you-mean.js';

// One tunnel's options, validated once for both ways of giving them: `burrow http|tcp` flags
// and an entry of burrow.yml (tunnel-file.ts). Both build the same raw record (the YAML key
// names) and call validateTunnel, so a flag and a file key can never accept different values.

export interface LocalTarget {
  host: string;
  port: number;
  /** the local service speaks HTTPS (`addr: https://…`, or `h2://…`) */
  tls?: boolean;
  /** the local service speaks HTTP/2 (`addr: h2c://…` in clear, `h2://…` over TLS): gRPC */
  h2?: boolean;
}

export type { AccessRules };

export interface TunnelSpec {
  /** the entry's name in burrow.yml; for flags, the command's type */
  name: string;
  type: 'http' | 'tcp';
  local: LocalTarget;
  /** how the user wrote the target, for the status screen */
  addr: string;
  id?: string;
  /** team id or name (names are resolved against the server at start) */
  team?: string;
  remotePort?: number;
  /** visitor access rules the server enforces (protocol/access.ts, which also checks each value) */
  access: AccessRules;
  /** 'rewrite' (Host: the local target) or a fixed value; absent: the visitor's Host */
  hostHeader?: string;
  upstreamInsecure?: boolean;
  /** one of several clients serving this id (a pool); needs an id */
  pool?: boolean;
  /** how long the local service may take to start its answer (a gRPC server stream may be quiet longer than the default) */
  responseTimeoutMs?: number;
}

/** The keys an entry may have, as written in burrow.yml (flags map onto them: --remote-port → remote_port). */
export const TUNNEL_KEYS = ['proto', 'addr', 'id', 'team', 'remote_port', 'basic_auth', 'allow_ip', 'deny_ip', 'expires', 'host_header', 'upstream_insecure', 'pool', 'response_timeout'] as const;
export type TunnelKey = (typeof TUNNEL_KEYS)[number];
export type RawTunnel = Partial<Record<TunnelKey, unknown>>;

export interface FieldError {
  /** a key of RawTunnel, or '' for the entry as a whole */
  field: string;
  /** for list values: which element */
  index?: number;
  message: string;
}

/** The flag a key comes from: remote_port → --remote-port. */
export function flagOf(field: string): string {
  return `--${field.replace(/_/g, '-')}`;
}

// A Host header value: a host name or address, optionally with a port; nothing a header could smuggle.
const HOST_VALUE_RE = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;

const RESPONSE_TIMEOUT_UNIT_MS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000 };

const show = (v: unknown): string => (typeof v === 'string' ? `"${v}"` : JSON.stringify(v) ?? String(v));

/** "3000", "192.168.1.5:8080", "[::1]:8080", "http://localhost:3000", "https://localhost:8443", "h2c://localhost:50051", "h2://…" → target. */
export function parseLocal(v: string): LocalTarget {
  const fail = () => new Error(`expected a port or host:port, got "${v}"`);
  const port = (s: string) => {
    const n = Number(s);
    if (!/^\d+$/.test(s) || n < 1 || n > 65535) throw fail();
    return n;
  };
  let s = v.trim();
  let tls = false;
  let h2 = false;
  const url = /^([a-z][a-z0-9]*):\/\/(.*?)\/?$/i.exec(s);
  if (url) {
    const scheme = url[1]!.toLowerCase();
    if (scheme !== 'http' && scheme !== 'https' && scheme !== 'h2c' && scheme !== 'h2') throw new Error(`expected an http://, https://, h2c:// or h2:// address, got "${v}"`);
    tls = scheme === 'https' || scheme === 'h2';
    h2 = scheme === 'h2c' || scheme === 'h2';
    s = url[2]!;
    // A URL may leave out its port: the scheme's own.
    if (/^[A-Za-z0-9.-]+$/.test(s) || /^\[[0-9a-f:.]+\]$/i.test(s)) s = `${s}:${tls ? 443 : 80}`;
  }
  const withTls = (t: LocalTarget): LocalTarget => ({ ...t, ...(tls ? { tls } : {}), ...(h2 ? { h2 } : {}) });
  if (/^\d+$/.test(s)) return withTls({ host: 'localhost', port: port(s) });
  const v6 = /^\[([0-9a-f:.]+)\]:(\d+)$/i.exec(s);
  if (v6) return withTls({ host: v6[1]!, port: port(v6[2]!) });
  const hp = /^([A-Za-z0-9.-]+):(\d+)$/.exec(s);
  if (hp) return withTls({ host: hp[1]!, port: port(hp[2]!) });
  throw fail();
}

/**
 * --expires and burrow.yml `expires` → epoch ms: a duration from now or a date-time, read by the
 * CLI's one parser (the same as `burrow keys create --expires`), at most a year ahead.
 */
export function parseTunnelExpiry(v: string, now = Date.now()): number {
  const at = Date.parse(parseExpires(v, now));
  const problem = expiryProblem(at, now);
  if (problem) throw new InvalidArgumentError(problem);
  return at;
}

/** A string list: a list of strings, or (flags, convenience in the file) a single string. */
function stringList(raw: unknown, field: string, errors: FieldError[]): string[] {
  if (raw === undefined || raw === null) return [];
  const items = Array.isArray(raw) ? raw : [raw];
  const outList: string[] = [];
  items.forEach((v, index) => {
    if (typeof v !== 'string' || v === '') errors.push({ field, index: Array.isArray(raw) ? index : undefined, message: `expected a non-empty string, got ${show(v)}` });
    else outList.push(v);
  });
  return outList;
}

/**
 * Raw options → a tunnel spec, or every problem found (field by field, nothing stops at the
 * first). `now` fixes the clock for durations ("expires: 2h" counts from the start).
 */
export function validateTunnel(name: string, raw: RawTunnel, now = Date.now()): { spec: TunnelSpec | null; errors: FieldError[] } {
  const errors: FieldError[] = [];
  const err = (field: string, message: string, index?: number) => errors.push({ field, message, ...(index === undefined ? {} : { index }) });

  for (const k of Object.keys(raw)) {
    if (!(TUNNEL_KEYS as readonly string[]).includes(k)) err(k, unknownKeyMessage(k, TUNNEL_KEYS));
  }

  let type: 'http' | 'tcp' | null = null;
  if (raw.proto === undefined) err('proto', 'required: http or tcp');
  else if (raw.proto !== 'http' && raw.proto !== 'tcp') err('proto', `expected http or tcp, got ${show(raw.proto)}`);
  else type = raw.proto;

  let local: LocalTarget | null = null;
  let addr = '';
  if (raw.addr === undefined || raw.addr === null) err('addr', 'required: a port (3000) or host:port');
  else if (typeof raw.addr !== 'string' && typeof raw.addr !== 'number') err('addr', `expected a port or host:port, got ${show(raw.addr)}`);
  else {
    addr = String(raw.addr);
    try {
      local = parseLocal(addr);
    } catch (e) {
      err('addr', (e as Error).message.replace(`"${addr}"`, show(raw.addr)));
    }
    if ((local?.tls || local?.h2) && type === 'tcp') err('addr', `${local.h2 ? (local.tls ? 'h2' : 'h2c') : 'https'}:// is for http tunnels; a tcp tunnel carries any protocol as it is`);
  }

  let id: string | undefined;
  if (raw.id !== undefined && raw.id !== null) {
    // The server's own rule (reserved names included; the domain's first label only it knows).
    const problem = typeof raw.id === 'string' ? tunnelIdProblem(raw.id, '') : `expected a tunnel id, got ${show(raw.id)}`;
    if (problem) err('id', problem);
    else id = raw.id as string;
  }

  let team: string | undefined;
  if (raw.team !== undefined && raw.team !== null) {
    if (typeof raw.team !== 'string' || raw.team.trim() === '') err('team', `expected a team name or id, got ${show(raw.team)}`);
    else team = raw.team;
  }

  let remotePort: number | undefined;
  if (raw.remote_port !== undefined && raw.remote_port !== null) {
    const n = raw.remote_port;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 65535) err('remote_port', `expected a port number 1-65535, got ${show(n)}`);
    else if (type === 'http') err('remote_port', 'only tcp tunnels have a remote port (http tunnels get a URL)');
    else remotePort = n;
  }

  // The values' rules are protocol/access.ts's, the ones the edge applies to the Open frame.
  const basicAuth = stringList(raw.basic_auth, 'basic_auth', errors);
  basicAuth.forEach((v, i) => {
    const p = basicAuthProblem(v);
    if (p) err('basic_auth', p, Array.isArray(raw.basic_auth) ? i : undefined);
  });
  if (basicAuth.length > MAX_BASIC_AUTH) err('basic_auth', `at most ${MAX_BASIC_AUTH} credentials`);
  if (basicAuth.length && type === 'tcp') err('basic_auth', 'only http tunnels take basic auth (a tcp tunnel has no HTTP to ask in)');

  const cidrs = (field: 'allow_ip' | 'deny_ip') => {
    const list = stringList(raw[field], field, errors);
    list.forEach((v, i) => {
      if (!parseCidr(v)) err(field, `expected an address or CIDR block (10.0.0.0/8, 2001:db8::/32), got ${show(v)}`, Array.isArray(raw[field]) ? i : undefined);
    });
    if (list.length > MAX_CIDRS) err(field, `at most ${MAX_CIDRS} entries`);
    return list;
  };
  const allowIp = cidrs('allow_ip');
  const denyIp = cidrs('deny_ip');

  let expiresAt: number | null = null;
  if (raw.expires !== undefined && raw.expires !== null) {
    if (typeof raw.expires !== 'string') err('expires', `expected a duration (30m, 1h30m, 2d) or a date-time, got ${show(raw.expires)}`);
    else {
      try {
        expiresAt = parseTunnelExpiry(raw.expires, now);
      } catch (e) {
        err('expires', (e as Error).message);
      }
    }
  }

  let hostHeader: string | undefined;
  if (raw.host_header !== undefined && raw.host_header !== null) {
    const h = raw.host_header;
    if (typeof h !== 'string' || (h !== 'rewrite' && (h.length > 255 || !HOST_VALUE_RE.test(h)))) {
      err('host_header', `expected "rewrite" or a host name (app.local, app.local:8080), got ${show(h)}`);
    } else if (type === 'tcp') err('host_header', 'only http tunnels have a Host header');
    else hostHeader = h;
  }

  let upstreamInsecure: boolean | undefined;
  if (raw.upstream_insecure !== undefined && raw.upstream_insecure !== null) {
    if (typeof raw.upstream_insecure !== 'boolean') err('upstream_insecure', `expected true or false, got ${show(raw.upstream_insecure)}`);
    else if (raw.upstream_insecure && !local?.tls) err('upstream_insecure', 'only means something with an https:// or h2:// addr');
    else upstreamInsecure = raw.upstream_insecure;
  }

  let pool: boolean | undefined;
  if (raw.pool !== undefined && raw.pool !== null) {
    if (typeof raw.pool !== 'boolean') err('pool', `expected true or false, got ${show(raw.pool)}`);
    else if (raw.pool && type === 'tcp') err('pool', 'only http tunnels can be pooled');
    else if (raw.pool && id === undefined) err('pool', 'a pool is several clients serving one id: give the id too');
    else pool = raw.pool;
  }

  let responseTimeoutMs: number | undefined;
  if (raw.response_timeout !== undefined && raw.response_timeout !== null) {
    const v = raw.response_timeout;
    const m = typeof v === 'string' ? /^(\d+)\s*(s|m|h)$/.exec(v.trim()) : null;
    const ms = m ? Number(m[1]) * RESPONSE_TIMEOUT_UNIT_MS[m[2]!]! : Number.NaN;
    if (!(ms >= 1_000 && ms <= 86_400_000)) err('response_timeout', `expected a duration from 1s to 24h (30s, 5m, 1h), got ${show(v)}`);
    else if (type === 'tcp') err('response_timeout', 'only http tunnels wait for an answer');
    else responseTimeoutMs = ms;
  }

  if (errors.length || !type || !local) return { spec: null, errors };
  const access: AccessRules = {};
  if (basicAuth.length) access.basicAuth = basicAuth;
  if (allowIp.length) access.allowIp = allowIp;
  if (denyIp.length) access.denyIp = denyIp;
  if (expiresAt !== null) access.expiresAt = expiresAt;
  const spec: TunnelSpec = { name, type, local, addr, access };
  if (id !== undefined) spec.id = id;
  if (team !== undefined) spec.team = team;
  if (remotePort !== undefined) spec.remotePort = remotePort;
  if (hostHeader !== undefined) spec.hostHeader = hostHeader;
  if (upstreamInsecure !== undefined) spec.upstreamInsecure = upstreamInsecure;
  if (pool) spec.pool = true;
  if (responseTimeoutMs !== undefined) spec.responseTimeoutMs = responseTimeoutMs;
  return { spec, errors };
}

/** How the status screen and `config check` show the local side: http://localhost:3000. */
export function localLabel(spec: Pick<TunnelSpec, 'type' | 'local'>): string {
  const host = spec.local.host.includes(':') ? `[${spec.local.host}]` : spec.local.host;
  const scheme = spec.type === 'tcp' ? 'tcp' : spec.local.h2 ? (spec.local.tls ? 'h2' : 'h2c') : spec.local.tls ? 'https' : 'http';
  return `${scheme}://${host}:${spec.local.port}`;
}
