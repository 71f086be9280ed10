import { isIPv4, isIPv6 } from 'node:net';

// The PROXY protocol header a load balancer writes before a connection's bytes
// (haproxy.org/download/2.9/doc/proxy-protocol.txt): version 1 is one text line, version 2 a
// binary block. `parseProxyHeader` reads either from the first bytes of a connection; every
// byte is the peer's, so each field is checked and the size is bounded before anything is kept.

export interface ProxySource {
  ip: string;
  port: number;
}

export type ProxyParse =
  /** The bytes so far are a prefix of a header: wait for more. */
  | { kind: 'more' }
  /** The connection does not start with a PROXY header. */
  | { kind: 'none' }
  | { kind: 'invalid'; why: string }
  /** `length` bytes are the header; `source` is null when it names no address (LOCAL, UNKNOWN). */
  | { kind: 'header'; version: 1 | 2; length: number; source: ProxySource | null };

const V1_PREFIX = Buffer.from('PROXY ', 'latin1');
const V2_SIGNATURE = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');
/** The longest v1 line the specification allows (TCP6 with the longest addresses), CRLF included. */
const V1_MAX = 107;
/** v2: the 16-byte fixed part plus addresses and TLVs; load balancers send at most a few hundred. */
export const V2_MAX = 16 + 2048;

export function parseProxyHeader(b: Uint8Array): ProxyParse {
  const buf = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  if (startsLike(buf, V2_SIGNATURE)) return buf.length < V2_SIGNATURE.length ? { kind: 'more' } : parseV2(buf);
  if (startsLike(buf, V1_PREFIX)) return buf.length < V1_PREFIX.length ? { kind: 'more' } : parseV1(buf);
  return { kind: 'none' };
}

/** `buf` and `prefix` agree on their common length (an empty buffer is a prefix of anything). */
function startsLike(buf: Buffer, prefix: Buffer): boolean {
  const n = Math.min(buf.length, prefix.length);
  return buf.subarray(0, n).equals(prefix.subarray(0, n));
}

function parseV1(buf: Buffer): ProxyParse {
  const end = buf.indexOf('\r\n', 0, 'latin1');
  if (end < 0) return buf.length >= V1_MAX ? { kind: 'invalid', why: `a v1 header longer than ${V1_MAX} bytes` } : { kind: 'more' };
  if (end + 2 > V1_MAX) return { kind: 'invalid', why: `a v1 header longer than ${V1_MAX} bytes` };
  const parts = buf.toString('latin1', 0, end).split(' ');
  const length = end + 2;
  if (parts[1] === 'UNKNOWN') return { kind: 'header', version: 1, length, source: null };
  if (parts.length !== 6) return { kind: 'invalid', why: 'a v1 header needs PROXY, the family, two addresses and two ports' };
  const [, family, src, dst, srcPort, dstPort] = parts as [string, string, string, string, string, string];
  const isFamily = family === 'TCP4' ? isIPv4 : family === 'TCP6' ? isIPv6 : null;
  if (!isFamily) return { kind: 'invalid', why: `unknown v1 family "${family.slice(0, 8)}"` };
  if (!isFamily(src) || !isFamily(dst)) return { kind: 'invalid', why: `a v1 address is not ${family}` };
  const port = v1Port(srcPort);
  if (port === null || v1Port(dstPort) === null) return { kind: 'invalid', why: 'a v1 port is not a number from 0 to 65535' };
  return { kind: 'header', version: 1, length, source: { ip: src, port } };
}

function v1Port(s: string): number | null {
  if (!/^(0|[1-9][0-9]{0,4})$/.test(s)) return null;
  const n = Number(s);
  return n <= 65535 ? n : null;
}

function parseV2(buf: Buffer): ProxyParse {
  if (buf.length < 16) return { kind: 'more' };
  const versionCommand = buf[12]!;
  if (versionCommand >> 4 !== 2) return { kind: 'invalid', why: `PROXY protocol version ${versionCommand >> 4} (only 1 and 2 exist)` };
  const command = versionCommand & 0x0f;
  if (command > 1) return { kind: 'invalid', why: `unknown v2 command ${command}` };
  const length = 16 + buf.readUInt16BE(14);
  if (length > V2_MAX) return { kind: 'invalid', why: `a v2 header of ${length} bytes (at most ${V2_MAX})` };
  if (buf.length < length) return { kind: 'more' };
  // LOCAL: the balancer's own connection (health checks): the peer is the client.
  if (command === 0) return { kind: 'header', version: 2, length, source: null };
  const family = buf[13]! >> 4;
  const transport = buf[13]! & 0x0f;
  if (transport > 2 || family > 3) return { kind: 'invalid', why: `unknown v2 address family/transport 0x${buf[13]!.toString(16)}` };
  // UNSPEC and unix addresses name no IP: the peer stands for the client.
  if (family === 0 || family === 3) return { kind: 'header', version: 2, length, source: null };
  const need = family === 1 ? 12 : 36;
  if (length - 16 < need) return { kind: 'invalid', why: `a v2 ${family === 1 ? 'IPv4' : 'IPv6'} block shorter than ${need} bytes` };
  const ip = family === 1 ? [...buf.subarray(16, 20)].join('.') : ipv6Text(buf.subarray(16, 32));
  const port = buf.readUInt16BE(16 + (family === 1 ? 8 : 32));
  return { kind: 'header', version: 2, length, source: { ip, port } };
}

function ipv6Text(b: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  // Canonical form (compressed zeros) through the URL parser, as client-address.ts does.
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

/** A v2 PROXY header (TCP) naming `source` as the client and `dest` as the address it reached. */
export function encodeProxyV2(source: ProxySource, dest: ProxySource): Buffer {
  const v4 = isIPv4(source.ip) && isIPv4(dest.ip);
  const addrLength = v4 ? 12 : 36;
  const out = Buffer.alloc(16 + addrLength);
  V2_SIGNATURE.copy(out);
  out[12] = 0x21; // version 2, PROXY
  out[13] = v4 ? 0x11 : 0x21; // TCP over IPv4 / IPv6
  out.writeUInt16BE(addrLength, 14);
  if (v4) {
    out.set(ipv4Bytes(source.ip), 16);
    out.set(ipv4Bytes(dest.ip), 20);
    out.writeUInt16BE(source.port, 24);
    out.writeUInt16BE(dest.port, 26);
  } else {
    out.set(ipv6Bytes(source.ip), 16);
    out.set(ipv6Bytes(dest.ip), 32);
    out.writeUInt16BE(source.port, 48);
    out.writeUInt16BE(dest.port, 50);
  }
  return out;
}

function ipv4Bytes(ip: string): number[] {
  return ip.split('.').map(Number);
}

/** 16 bytes of an IPv6 address, or of an IPv4 one as ::ffff:a.b.c.d (a mixed pair). */
function ipv6Bytes(ip: string): Buffer {
  const out = Buffer.alloc(16);
  if (isIPv4(ip)) {
    out.writeUInt16BE(0xffff, 10);
    out.set(ipv4Bytes(ip), 12);
    return out;
  }
  // The URL parser expands nothing, so expand '::' here; an embedded IPv4 tail becomes two groups.
  let text = ip.replace(/^\[|\]$/g, '');
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (tail) {
    const [a, b, c, d] = ipv4Bytes(tail[1]!) as [number, number, number, number];
    text = `${text.slice(0, -tail[1]!.length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const left = head ? head.split(':') : [];
  const right = rest !== undefined && rest !== '' ? rest.split(':') : [];
  const groups = rest === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}
