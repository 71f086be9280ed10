import { Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

// Waits until a TXT record holds every expected value, asking the zone's authoritative servers
// (found by walking up the name for its NS records) or the servers of --dns-resolver: a
// recursive resolver's cache would keep answering "not there" long after the record is.

const QUERY_TIMEOUT_MS = 3_000;

export interface DnsServer {
  host: string;
  port: number;
}

/** `HOST:PORT[,HOST:PORT…]` (IPv6 as [addr]:port; the port defaults to 53). */
export function parseResolvers(text: string): DnsServer[] {
  return text.split(',').map((part) => {
    const s = part.trim();
    const m = /^\[([0-9a-fA-F:.]+)\](?::(\d{1,5}))?$/.exec(s) ?? /^([^:\s]+)(?::(\d{1,5}))?$/.exec(s);
    const port = m?.[2] ? Number(m[2]) : 53;
    if (!m || isIP(m[1]!) === 0 || port < 1 || port > 65535) throw new Error(`--dns-resolver: "${s}" is not IP:PORT (e.g. 1.1.1.1:53 or [2606:4700::1111]:53)`);
    return { host: m[1]!, port };
  });
}

function resolverFor(servers: DnsServer[]): Resolver {
  const r = new Resolver({ timeout: QUERY_TIMEOUT_MS, tries: 2 });
  r.setServers(servers.map((s) => (isIP(s.host) === 6 ? `[${s.host}]:${s.port}` : `${s.host}:${s.port}`)));
  return r;
}

/** The authoritative servers of the zone holding `fqdn` (their addresses), by the system resolver. */
export async function authoritativeServers(fqdn: string): Promise<DnsServer[]> {
  const system = new Resolver({ timeout: QUERY_TIMEOUT_MS, tries: 2 });
  const labels = fqdn.split('.');
  for (let i = 0; i < labels.length - 1; i++) {
    const zone = labels.slice(i).join('.');
    let ns: string[];
    try {
      ns = await system.resolveNs(zone);
    } catch {
      continue;
    }
    const addrs: DnsServer[] = [];
    for (const host of ns.slice(0, 4)) {
      const v4 = await system.resolve4(host).catch(() => [] as string[]);
      for (const a of v4) addrs.push({ host: a, port: 53 });
    }
    if (addrs.length > 0) return addrs;
  }
  throw new Error(`no authoritative name server found for ${fqdn}`);
}

/** The TXT strings at `fqdn` as `servers` answer them; [] for no record. */
export async function txtValues(fqdn: string, servers: DnsServer[]): Promise<string[]> {
  try {
    return (await resolverFor(servers).resolveTxt(fqdn)).map((parts) => parts.join(''));
  } catch {
    return [];
  }
}

/** The CNAME target of `fqdn`, lower case without a trailing dot, or null. */
export async function cnameTarget(fqdn: string, servers: DnsServer[]): Promise<string | null> {
  try {
    const [t] = await resolverFor(servers).resolveCname(fqdn);
    return t ? t.toLowerCase().replace(/\.$/, '') : null;
  } catch {
    return null;
  }
}

/**
 * Resolves once every server answers every value at `fqdn`; throws after `timeoutMs`. Each
 * server is asked on its own: the CA may ask any of them.
 */
export async function waitForTxt(fqdn: string, values: string[], resolvers: DnsServer[] | null, timeoutMs: number, pollMs = 2_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const servers = resolvers ?? (await authoritativeServers(fqdn).catch(() => []));
    let everywhere = servers.length > 0;
    for (const s of servers) {
      const seen = await txtValues(fqdn, [s]);
      if (!values.every((v) => seen.includes(v))) everywhere = false;
    }
    if (everywhere) return;
    if (Date.now() > until) throw new Error(`the TXT record ${fqdn} did not show ${values.length === 1 ? 'its value' : 'all its values'} within ${Math.round(timeoutMs / 1000)} s`);
    await sleep(pollMs);
  }
}
