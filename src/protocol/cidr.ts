import { BlockList, isIP } from 'node:net';

// Address blocks, as operators write them (--trust-proxy) and as tunnel clients send them
// (--allow-ip/--deny-ip): one parser and one matcher for both.

export interface Cidr {
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

/** Longer text cannot be an address block (the longest IPv6 form plus "/128"). */
export const MAX_CIDR_CHARS = 64;

/** "10.0.0.0/8", "::1", "2001:db8::/32" → Cidr (a bare address is a /32 or /128); null when it is not one. */
export function parseCidr(text: string): Cidr | null {
  if (text.length === 0 || text.length > MAX_CIDR_CHARS) return null;
  const slash = text.indexOf('/');
  const address = slash < 0 ? text : text.slice(0, slash);
  const version = isIP(address);
  // A zone ("fe80::1%eth0") names an interface of the peer's host: meaningless here.
  if (version === 0 || address.includes('%')) return null;
  const max = version === 4 ? 32 : 128;
  let prefix = max;
  if (slash >= 0) {
    const p = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(p) || Number(p) > max) return null;
    prefix = Number(p);
  }
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/**
 * Wider than any one organisation's network: an IPv4 block shorter than /8, an IPv6 one shorter
 * than /7 (fc00::/7, the unique local range, is the widest private one), or IPv4-mapped blocks
 * shorter than ::ffff:0:0/104. 0.0.0.0/0 and ::/0 are the usual mistakes.
 */
export function isVeryBroad(c: Cidr): boolean {
  if (c.family === 'ipv4') return c.prefix < 8;
  const mapped = c.prefix >= 96 && isMapped(c.address);
  return mapped ? c.prefix < 104 : c.prefix < 7;
}

function isMapped(address: string): boolean {
  const l = new BlockList();
  l.addSubnet('::ffff:0:0', 96, 'ipv6');
  return l.check(address, 'ipv6');
}

/** A set of blocks; IPv4-mapped IPv6 addresses match their IPv4 blocks (BlockList does that). */
export class CidrSet {
  private readonly list = new BlockList();
  readonly empty: boolean;

  constructor(cidrs: readonly Cidr[]) {
    for (const c of cidrs) this.list.addSubnet(c.address, c.prefix, c.family);
    this.empty = cidrs.length === 0;
  }

  /** From text already validated; one that still does not parse throws (a rule must never vanish). */
  static parse(texts: readonly string[]): CidrSet {
    return new CidrSet(
      texts.map((t) => {
        const c = parseCidr(t);
        if (!c) throw new Error(`"${t}" is not an IP address or CIDR block`);
        return c;
      }),
    );
  }

  /** Whether `ip` is in a block; false for anything that is not an address. */
  has(ip: string): boolean {
    if (this.empty) return false;
    const v = isIP(ip);
    return v !== 0 && this.list.check(ip, v === 4 ? 'ipv4' : 'ipv6');
  }
}

/**
 * The unit every per-address limit counts: an IPv4 address itself (IPv4-mapped IPv6 as IPv4),
 * an IPv6 address by its /64, since one host or customer usually holds a whole /64 and could
 * otherwise take a fresh address per attempt. Anything else is returned as is.
 */
export function addressGroup(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1]!;
  if (isIP(ip) !== 6) return ip;
  const bare = ip.split('%')[0]!.toLowerCase();
  const [head, tail = ''] = bare.split('::') as [string, string?];
  const h = head === '' ? [] : head.split(':');
  const t = tail === '' ? [] : tail.split(':');
  // An embedded IPv4 tail (::a.b.c.d forms) lies past the first 64 bits: count it as two groups.
  const width = (xs: string[]) => xs.reduce((n, x) => n + (x.includes('.') ? 2 : 1), 0);
  const groups = bare.includes('::') ? [...h, ...Array(8 - width(h) - width(t)).fill('0'), ...t] : h;
  return `${groups.slice(0, 4).map((g) => Number.parseInt(g, 16).toString(16)).join(':')}::/64`;
}
