// Header rules of the public HTTP ingress (ARCHITECTURE.md "A visitor's HTTP request").

/**
 * A set of header names, matched in any case. Every request and answer passes each of its
 * names through several of these: a name whose length no member has is answered without
 * making its lower-case copy (most names: Date, Server, Content-Type, Accept...).
 */
export class NameSet {
  /** Members by length: a name is compared only with those of its own length. */
  private readonly byLength: (string[] | undefined)[] = [];

  constructor(names: readonly string[]) {
    for (const n of names) {
      if (n.length >= 64 || n !== n.toLowerCase()) throw new Error(`NameSet takes lower-case names under 64 characters: ${n}`);
      (this.byLength[n.length] ??= []).push(n);
    }
  }

  has(name: string): boolean {
    const same = name.length < 64 ? this.byLength[name.length] : undefined;
    if (same === undefined) return false;
    for (let i = 0; i < same.length; i++) if (isName(name, same[i]!)) return true;
    return false;
  }
}

/** `name` is `lower` (a lower-case name) in any case: compared without making a lower-case copy. */
export function isName(name: string, lower: string): boolean {
  if (name.length !== lower.length) return false;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    const l = lower.charCodeAt(i);
    if (c !== l && !(l >= 0x61 && l <= 0x7a && c === l - 0x20)) return false;
  }
  return true;
}

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1): meaningful for one connection only, never forwarded.
 * HTTP2-Settings belongs to an h2c upgrade (RFC 7540 §3.2.1), which is never forwarded.
 */
const HOP_BY_HOP = new NameSet([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings',
]);

/**
 * Headers that say who the client is or how it came: the edge sets the first five itself, and a
 * visitor's own values of all of them are dropped (a trusted proxy's X-Forwarded-For/-Proto are
 * folded into `ForwardedFrom`). The others are what CDNs and balancers send, which local
 * services and their frameworks often believe: from a visitor they would be a forged address.
 */
const FORWARDED = new NameSet([
  'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-real-ip', 'forwarded',
  'true-client-ip', 'cf-connecting-ip', 'fastly-client-ip', 'x-client-ip', 'x-cluster-client-ip',
  'x-original-forwarded-for', 'x-forwarded', 'forwarded-for', 'x-forwarded-port', 'x-forwarded-scheme',
  'x-forwarded-ssl', 'front-end-https', 'x-url-scheme',
]);

/**
 * The protocols of a visitor's Upgrade header the edge passes on, comma-separated ('' when
 * none). An upgrade to another HTTP (h2c, h2, HTTP/2.0, or TLS/1.0 with HTTP inside, RFC 2817)
 * is dropped: after its 101 the local service would read the visitor's requests itself, with
 * whatever forwarding headers the visitor wrote, which the edge never sees to replace. A request
 * offering nothing else is served as plain HTTP/1.1 (RequestParser).
 */
export function forwardedUpgrade(value: string): string {
  return value
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '' && !/^(?:h2c?|https?(?:\/.*)?|tls(?:\/.*)?)$/i.test(t))
    .join(', ');
}

/**
 * End-to-end headers a Connection header may not strip: `Connection: host` would otherwise
 * hide the Host from the local service, `Connection: content-length` its body's length.
 */
const NOT_DROPPABLE = new Set(['host', 'content-length', 'content-type']);

/** Connection and Upgrade: kept on an upgrade request, so the local service sees the handshake. */
const UPGRADE_FIELDS = new NameSet(['connection', 'upgrade']);

/** A name a Connection header listed, and that may be dropped for it. */
function listedDrop(listed: ReadonlySet<string>, name: string): boolean {
  const lower = name.toLowerCase();
  return listed.has(lower) && !NOT_DROPPABLE.has(lower);
}

/** Names listed in a Connection header value are hop-by-hop too. */
const CLOSE_ONLY: ReadonlySet<string> = new Set(['close']);

function connectionTokens(value: string | undefined): ReadonlySet<string> | null {
  if (!value) return null;
  // The common single options, without a set each time: `keep-alive` (or `upgrade`) drops
  // nothing the hop-by-hop rule does not drop already; `close` drops a header named close.
  if (value.indexOf(',') === -1) {
    if (HOP_BY_HOP.has(value)) return null;
    if (isName(value, 'close')) return CLOSE_ONLY;
  }
  return new Set(value.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
}

/** What the edge says about the client (src/http/client-address.ts `ClientAddress`). */
export interface ForwardedFrom {
  ip: string;
  forwardedFor: string;
  proto: string;
}

/**
 * Request headers toward the local service, in arrival order with the visitor's case. `upgrade`
 * keeps Connection/Upgrade so the local service sees the handshake. `host`: the request's
 * authority (an absolute-form target's overrides the Host header, RFC 9112 §3.2.2).
 */
export function requestHeaders(raw: readonly string[], client: ForwardedFrom, upgrade: boolean, host: string | null = null): string[] {
  let connection: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    if (isName(raw[i]!, 'connection')) connection = connection === undefined ? raw[i + 1] : `${connection}, ${raw[i + 1]}`;
  }
  const listed = connectionTokens(connection);
  const out: string[] = [];
  let sawHost = false;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (FORWARDED.has(name)) continue;
    if (isName(name, 'host')) {
      if (sawHost) continue;
      sawHost = true;
      out.push(name, host ?? raw[i + 1]!);
      continue;
    }
    if (upgrade && UPGRADE_FIELDS.has(name)) {
      out.push(name, name.length === 7 ? forwardedUpgrade(raw[i + 1]!) : raw[i + 1]!);
      continue;
    }
    if (HOP_BY_HOP.has(name) || (listed !== null && listedDrop(listed, name))) continue;
    out.push(name, raw[i + 1]!);
  }
  if (!sawHost && host !== null) out.unshift('Host', host);
  out.push('x-forwarded-for', client.forwardedFor, 'x-forwarded-proto', client.proto, 'x-forwarded-host', host ?? '', 'x-real-ip', client.ip);
  return out;
}

/**
 * Response headers toward the visitor, from Node's rawHeaders: case and order kept, hop-by-hop
 * removed. Content-Length stays: the edge needs it to frame the body (it writes it itself).
 */
export function responseHeaders(raw: string[]): string[] {
  let connection: string | undefined;
  for (let i = 0; i < raw.length; i += 2) if (isName(raw[i]!, 'connection')) connection = raw[i + 1];
  const listed = connectionTokens(connection);
  const headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    if (HOP_BY_HOP.has(raw[i]!) || (listed !== null && listedDrop(listed, raw[i]!))) continue;
    headers.push(raw[i]!, raw[i + 1]!);
  }
  return headers;
}

/**
 * A tunnel's response headers as the visitor gets them, or why they cannot be (a string):
 * hop-by-hop fields dropped again (the client is untrusted), one Content-Length at most (equal
 * repeats fold, RFC 9110 §8.6), and Set-Cookie kept host-only (below).
 */
export function tunnelResponseHeaders(raw: readonly string[], tunnelHost: string): { headers: string[]; contentLength: number | null } | string {
  let contentLength: number | null = null;
  let connection: string | undefined;
  for (let i = 0; i < raw.length; i += 2) if (isName(raw[i]!, 'connection')) connection = connection === undefined ? raw[i + 1] : `${connection}, ${raw[i + 1]}`;
  const listed = connectionTokens(connection);
  const headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (listed !== null && listedDrop(listed, name)) continue;
    if (isName(name, 'content-length')) {
      const v = raw[i + 1]!.trim();
      if (!/^\d{1,15}$/.test(v)) return `Content-Length ${JSON.stringify(v.slice(0, 32))} is not a length`;
      const n = Number(v);
      if (contentLength !== null && contentLength !== n) return 'two different Content-Length values';
      contentLength = n;
      continue;
    }
    if (HOP_BY_HOP.has(name)) continue;
    if (isName(name, 'set-cookie')) {
      headers.push(name, hostOnlyCookie(raw[i + 1]!, tunnelHost));
      continue;
    }
    headers.push(name, raw[i + 1]!);
  }
  return { headers, contentLength };
}

/**
 * An answer's trailers (read by llhttp: tokens and clean values) as an HTTP/2 visitor gets them:
 * without hop-by-hop fields and without fields that only mean something in a head (framing,
 * Host, cookies, pseudo-headers), RFC 9110 §6.5.1.
 */
export function tunnelTrailers(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const lower = raw[i]!.toLowerCase();
    if (HOP_BY_HOP.has(lower) || NOT_IN_TRAILERS.has(lower) || lower.startsWith(':')) continue;
    out.push(lower, raw[i + 1]!);
  }
  return out;
}
const NOT_IN_TRAILERS = new Set(['content-length', 'content-type', 'content-encoding', 'host', 'set-cookie', 'cookie', 'authorization', 'location', 'cache-control']);

/**
 * Drops a Set-Cookie `Domain=` that names the server's domain or a parent of it: such a cookie
 * would reach every other tunnel (cookie tossing between tunnels). Without it the cookie is
 * host-only, for the tunnel that set it.
 */
export function hostOnlyCookie(value: string, tunnelHost: string): string {
  if (!/;\s*domain\s*=/i.test(value)) return value;
  const parts = value.split(';');
  const kept = [parts[0]!];
  const own = tunnelHost.toLowerCase();
  for (const part of parts.slice(1)) {
    const m = /^\s*domain\s*=\s*\.?([^\s]*)\s*$/i.exec(part);
    if (m) {
      const d = m[1]!.toLowerCase();
      // Its own host (or a name below it) stays; the domain, a parent of it, or another host
      // (which browsers refuse anyway) goes.
      if (d !== own && !d.endsWith(`.${own}`)) continue;
    }
    kept.push(part);
  }
  return kept.join(';');
}
