// Header rules of the public HTTP ingress (decisions.md "Tunnel wire protocol").

/** Hop-by-hop headers (RFC 9110 §7.6.1): meaningful for one connection only, never forwarded. */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade',
]);

/** Forwarding headers the edge sets itself: a visitor's own values are dropped, never trusted. */
const FORWARDED = new Set(['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'forwarded']);

/** Names listed in a Connection header value are hop-by-hop too. */
function connectionTokens(value: string | undefined): Set<string> | null {
  if (!value) return null;
  return new Set(value.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
}

/**
 * Request headers toward the local service, in arrival order. uWS hands names in lower case
 * (HTTP/1.1 names are case-insensitive); order is kept. `upgrade` keeps Connection/Upgrade so
 * the local service sees the handshake.
 */
export function requestHeaders(raw: string[], ip: string, proto: string, upgrade: boolean): string[] {
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
    if (HOP_BY_HOP.has(name) || listed?.has(name)) continue;
    out.push(name, raw[i + 1]!);
  }
  out.push('x-forwarded-for', ip, 'x-forwarded-proto', proto, 'x-forwarded-host', host);
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
    if (HOP_BY_HOP.has(lower) || listed?.has(lower)) continue;
    headers.push(raw[i]!, raw[i + 1]!);
  }
  return headers;
}
