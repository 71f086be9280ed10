import dns, { type LookupAddress, type LookupOptions } from 'node:dns';
import { isIP } from 'node:net';

// Where the tunnel client sends visitors' requests and connections: the local service.
//
//  - `localhost` is both loopback addresses (RFC 6761), whatever the resolver says: many
//    resolvers (this machine's /etc/hosts among them) map it to 127.0.0.1 only, and a dev server
//    listening on ::1 alone (Vite, recent Node defaults) then got 502. Both are offered and
//    Node's happy eyeballs (autoSelectFamily, on by default) tries the next on ECONNREFUSED.
//  - `h2`: the local service speaks HTTP/2 (`h2c://`, `h2://` with `tls`), as gRPC servers do.
//  - `tls`: the local service speaks HTTPS; its certificate is verified unless `insecure`
//    (`--upstream-insecure`, for the self-signed certificates of dev servers).
//  - `hostHeader`: many dev servers refuse a Host they do not know (the public
//    `<id>.<domain>`): `rewrite` sends the local target's host:port, any other value is sent as is.

export interface LocalTarget {
  host: string;
  port: number;
  tls?: boolean;
  /** the local service speaks HTTP/2 (h2c:// in clear, h2:// over TLS): gRPC servers (h2-local.ts) */
  h2?: boolean;
  insecure?: boolean;
  hostHeader?: string;
}

const LOOPBACK: LookupAddress[] = [
  { address: '127.0.0.1', family: 4 },
  { address: '::1', family: 6 },
];

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** dns.lookup, except that `localhost` is both loopback addresses. */
export function localLookup(hostname: string, options: LookupOptions | LookupCallback, callback?: LookupCallback): void {
  const opts = typeof options === 'function' ? {} : options;
  const cb = (typeof options === 'function' ? options : callback)!;
  if (hostname.toLowerCase() !== 'localhost') {
    dns.lookup(hostname, { ...opts, all: opts.all === true } as LookupOptions & { all: boolean }, cb as never);
    return;
  }
  const family = opts.family === 'IPv4' ? 4 : opts.family === 'IPv6' ? 6 : opts.family;
  const addresses = family === 4 || family === 6 ? LOOPBACK.filter((a) => a.family === family) : LOOPBACK;
  if (opts.all) cb(null, addresses);
  else cb(null, addresses[0]!.address, addresses[0]!.family);
}

/** "localhost:3000", "[::1]:8443": the local target as a Host value and in messages. */
export function hostPort(local: LocalTarget): string {
  return `${local.host.includes(':') ? `[${local.host}]` : local.host}:${local.port}`;
}

export function localOrigin(local: LocalTarget): string {
  return `${local.tls ? 'https' : 'http'}://${hostPort(local)}`;
}

/** Options for net.connect / tls.connect / http(s).request / undici's connector. */
export function connectOptions(local: LocalTarget): { lookup: typeof localLookup; rejectUnauthorized?: boolean; servername?: string } {
  if (!local.tls) return { lookup: localLookup };
  // SNI takes host names only, never an address.
  return { lookup: localLookup, rejectUnauthorized: !local.insecure, ...(isIP(local.host) ? {} : { servername: local.host }) };
}

/** The request's headers with Host replaced as `hostHeader` asks (unchanged without it). */
export function withHostHeader(headers: string[], local: LocalTarget): string[] {
  if (!local.hostHeader) return headers;
  const value = local.hostHeader === 'rewrite' ? hostPort(local) : local.hostHeader;
  const out: string[] = [];
  let set = false;
  for (let i = 0; i + 1 < headers.length; i += 2) {
    if (headers[i]!.toLowerCase() === 'host') {
      if (!set) out.push(headers[i]!, value);
      set = true;
    } else out.push(headers[i]!, headers[i + 1]!);
  }
  if (!set) out.unshift('Host', value);
  return out;
}
