import { isIP } from 'node:net';
import { CidrSet, type Cidr } from '../protocol/cidr.js';
import { isName } from '../protocol/http-headers.js';
import type { HttpRequest, HttpResponse } from '@trufflesuite/uws-js-unofficial';

// THE client address of a request: every place that needs the visitor's or API caller's address
// (X-Forwarded-For/X-Real-IP toward a tunnel, the failed-auth limiter, the visitor concurrency
// limit, a session's client_ip, access rules) takes it from `clientAddress`, so a load balancer in
// front (--trust-proxy, --proxy-protocol) changes it in one place. ARCHITECTURE.md "Client address".

/** How this edge learns addresses: set once per shard from the config (`setAddressPolicy`). */
export interface AddressPolicy {
  /** The listener speaks TLS: the proto of a request that no trusted proxy described. */
  tls: boolean;
  /** Peers whose X-Forwarded-For / X-Forwarded-Proto are believed (--trust-proxy). */
  trustProxy: Cidr[];
  /** The peer address comes from the PROXY protocol header uWS parsed (--proxy-protocol). */
  proxyProtocol: boolean;
}

export interface ClientAddress {
  /** The client's address (IPv4 dotted, IPv6 canonical). */
  readonly ip: string;
  /** The address of the socket's peer (the load balancer when there is one). */
  readonly peer: string;
  /** X-Forwarded-For to send on: a trusted proxy's list with the peer appended, else the peer. */
  readonly forwardedFor: string;
  readonly proto: 'http' | 'https';
}

let policy: AddressPolicy = { tls: false, trustProxy: [], proxyProtocol: false };
let trusted = new CidrSet([]);

export function setAddressPolicy(p: AddressPolicy): void {
  policy = p;
  trusted = new CidrSet(p.trustProxy);
}

/**
 * Canonical text of an address as uWS renders it (IPv6 uncompressed, IPv4 clients of a
 * dual-stack socket as ::ffff:a.b.c.d); '' when there is none.
 */
export function canonicalIp(text: string): string {
  if (text === '') return '';
  if (isIP(text) === 4) return text;
  let host: string;
  try {
    host = new URL(`http://[${text}]/`).hostname.slice(1, -1);
  } catch {
    return '';
  }
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(host);
  if (mapped) return mapped[1]!;
  // The WHATWG parser writes a mapped address as hex (::ffff:7f00:1): back to dotted.
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (hex) {
    const hi = parseInt(hex[1]!, 16);
    const lo = parseInt(hex[2]!, 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return host;
}

/**
 * The address of the socket's peer: the PROXY header's source under --proxy-protocol (null when
 * the connection sent none: such a listener expects one), else the TCP peer.
 */
export function peerAddress(res: HttpResponse): string | null {
  if (policy.proxyProtocol) {
    const proxied = canonicalIp(Buffer.from(res.getProxiedRemoteAddressAsText()).toString());
    return proxied === '' ? null : proxied;
  }
  return canonicalIp(Buffer.from(res.getRemoteAddressAsText()).toString());
}

/**
 * The client of a uWS request (the management API, behind the front): null when the connection
 * broke the listener's rules (no PROXY header). `req` is read synchronously (uWS: valid only in
 * the callback). The front joins every X-Forwarded-For line into one before relaying.
 */
export function clientAddress(res: HttpResponse, req: HttpRequest): ClientAddress | null {
  const peer = peerAddress(res);
  if (peer === null) return null;
  return resolveClient(peer, [req.getHeader('x-forwarded-for')], req.getHeader('x-forwarded-proto'));
}

/**
 * The client of a request the front parsed: `headers` flat [name, value, ...] as sent. Every
 * X-Forwarded-For line counts (a proxy may add a line of its own rather than append to the
 * client's), and the last X-Forwarded-Proto line is the nearest proxy's.
 */
/** Whether `peer` is a trusted proxy, whose forwarding headers say who the client is. */
export function trustsPeer(peer: string): boolean {
  return trusted.has(peer);
}

export function clientOfHeaders(peer: string, headers: readonly string[]): ClientAddress {
  if (!trusted.has(peer)) return { ip: peer, peer, forwardedFor: peer, proto: policy.tls ? 'https' : 'http' };
  const xff: string[] = [];
  let proto = '';
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!;
    if (isName(name, 'x-forwarded-for')) xff.push(headers[i + 1]!);
    else if (isName(name, 'x-forwarded-proto')) proto = headers[i + 1]!;
  }
  return resolveClient(peer, xff, proto);
}

/**
 * From a trusted proxy, the client is the right-most X-Forwarded-For entry that is not itself a
 * trusted proxy (entries further left were written by whoever the client is, so they prove
 * nothing). `xffLines` are the header's lines in order, read as one list.
 */
function resolveClient(peer: string, xffLines: readonly string[], protoClaim: string): ClientAddress {
  const own = policy.tls ? 'https' : 'http';
  if (!trusted.has(peer)) return { ip: peer, peer, forwardedFor: peer, proto: own };
  const hops = xffLines.flatMap((line) => (line === '' ? [] : line.split(',').map((s) => s.trim())));
  let ip = peer;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = canonicalIp(hops[i]!);
    if (hop === '') break; // not an address (a name, "unknown", garbage): stop believing the list
    ip = hop;
    if (!trusted.has(hop)) break;
  }
  const claimed = protoClaim.trim().toLowerCase();
  const proto = claimed === 'https' || claimed === 'http' ? claimed : own;
  // Kept as sent (bounded by the head limit), with the peer appended, as proxies do.
  const forwardedFor = hops.length > 0 ? `${hops.join(', ')}, ${peer}` : peer;
  return { ip, peer, forwardedFor, proto };
}
