import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOneOptions, type LookupOptions } from 'node:dns';

// `*.localhost` is loopback (RFC 6761 §6.3): browsers and curl resolve any name under it to
// 127.0.0.1 / ::1 themselves, but the system resolver often does not (glibc reads /etc/hosts,
// which names `localhost` alone). A development server with a certificate for burrow.localhost
// and *.burrow.localhost must be reachable from the CLI under the names a browser uses, so the
// CLI's connections resolve those names here and everything else as usual.

/** True for localhost and every name under it (case-insensitive, a final dot allowed). */
export function isLoopbackName(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/\.$/, '');
  return h === 'localhost' || h.endsWith('.localhost');
}

type Callback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** A dns.lookup for net/tls/http(s)/undici `lookup` options: loopback names answered at once. */
export function lookupLoopbackNames(hostname: string, options: LookupOptions | number | Callback, callback?: Callback): void {
  const cb = (typeof options === 'function' ? options : callback) as Callback;
  const opts: LookupOptions = typeof options === 'object' ? options : typeof options === 'number' ? { family: options } : {};
  if (!isLoopbackName(hostname)) {
    dnsLookup(hostname, opts as LookupAllOptions & LookupOneOptions, cb as never);
    return;
  }
  const family = opts.family === 'IPv6' ? 6 : opts.family === 'IPv4' ? 4 : opts.family;
  const all: LookupAddress[] = [
    { address: '127.0.0.1', family: 4 },
    { address: '::1', family: 6 },
  ].filter((a) => !family || a.family === family);
  // Asynchronous, as dns.lookup is: callers attach listeners after calling it.
  process.nextTick(() => (opts.all ? cb(null, all) : cb(null, all[0]!.address, all[0]!.family)));
}
