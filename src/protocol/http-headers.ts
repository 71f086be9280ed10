// Header rules of the public HTTP ingress (ARCHITECTURE.md "A visitor's HTTP request").

/** Hop-by-hop headers (RFC 9110 §7.6.1): meaningful for one connection only, never forwarded. */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade',
]);

/** Forwarding headers the edge sets itself: a visitor's own values are dropped (a trusted proxy's are folded into `ForwardedFrom`). */
const FORWARDED = new Set(['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-real-ip', 'forwarded']);

/**
 * End-to-end headers a Connection header may not strip: `Connection: host` would otherwise
 * hide the Host from the local service, `Connection: content-length` its body's length.
 */
const NOT_DROPPABLE = new Set(['host', 'content-length', 'content-type']);

/** Names listed in a Connection header value are hop-by-hop too. */
function connectionTokens(value: string | undefined): Set<string> | null {
  if (!value) return null;
  return new Set(value.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
}

/** What the edge says about the client (src/http/client-address.ts `ClientAddress`). */
export interface ForwardedFrom {
  ip: string;
  forwardedFor: string;
  proto: string;
}

/**
 * Request headers toward the local service, in arrival order. uWS hands names in lower case
 * (HTTP/1.1 names are case-insensitive); order is kept. `upgrade` keeps Connection/Upgrade so
 * the local service sees the handshake.
 */
export function requestHeaders(raw: string[], client: ForwardedFrom, upgrade: boolean): string[] {
  let connection: string | undefined;
  let host = '';
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i] === 'connection') connection = raw[i + 1];
    else if (raw[i] === 'host') host = raw[i + 1]!;
  }
  const listed = connectionTokens(connection);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (FORWARDED.has(name)) continue;
    if (upgrade && (name === 'connection' || name === 'upgrade')) {
      out.push(name, raw[i + 1]!);
      continue;
    }
    if (HOP_BY_HOP.has(name) || (listed?.has(name) && !NOT_DROPPABLE.has(name))) continue;
    out.push(name, raw[i + 1]!);
  }
  out.push('x-forwarded-for', client.forwardedFor, 'x-forwarded-proto', client.proto, 'x-forwarded-host', host, 'x-real-ip', client.ip);
  return out;
}

/**
 * Response headers toward the visitor, from Node's rawHeaders: case and order kept, hop-by-hop
 * removed. Content-Length stays: the edge needs it to frame the body (it writes it itself).
 */
export function responseHeaders(raw: string[]): string[] {
  let connection: string | undefined;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === 'connection') connection = raw[i + 1];
  const listed = connectionTokens(connection);
  const headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const lower = raw[i]!.toLowerCase();
    if (HOP_BY_HOP.has(lower) || (listed?.has(lower) && !NOT_DROPPABLE.has(lower))) continue;
    headers.push(raw[i]!, raw[i + 1]!);
  }
  return headers;
}

/** RFC 9110 §5.6.2 token: what a field name may be. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** CR, LF and NUL end or corrupt a header line (response splitting); obs-text is allowed. */
const LINE_BREAKING = /[\r\n\0]/;

/**
 * Why a response head from a tunnel client cannot be written to a visitor, or null when it can.
 * uWS writes names and values as given, so this is the only guard against a client (or its local
 * service) forging a second response or headers with CR/LF.
 */
export function invalidResponseHead(status: unknown, headers: string[]): string | null {
  if (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 999) {
    return `status ${JSON.stringify(status)} is not an integer from 100 to 999`;
  }
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!;
    const value = headers[i + 1] ?? '';
    if (!TOKEN.test(name)) return `header name ${JSON.stringify(name.slice(0, 64))} is not a token`;
    if (LINE_BREAKING.test(value)) return `header ${JSON.stringify(name)} has a CR, LF or NUL in its value`;
  }
  return null;
}
