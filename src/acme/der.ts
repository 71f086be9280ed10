// The few DER (X.690) pieces ACME needs: building a certificate signing request and reading a
// certificate's Authority Key Identifier for ARI. Node's crypto has neither.

function lengthBytes(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

/** One TLV: tag, length, contents. */
export function tlv(tag: number, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  return Buffer.concat([Buffer.from([tag]), lengthBytes(body.length), body]);
}

export const seq = (...parts: Buffer[]): Buffer => tlv(0x30, ...parts);
export const set = (...parts: Buffer[]): Buffer => tlv(0x31, ...parts);

export function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number) as [number, number, ...number[]];
  const out = [40 * a + b];
  for (const n of rest) {
    const groups: number[] = [];
    let v = n;
    do {
      groups.unshift(v & 0x7f);
      v = Math.floor(v / 128);
    } while (v > 0);
    for (let i = 0; i < groups.length - 1; i++) groups[i]! |= 0x80;
    out.push(...groups);
  }
  return tlv(0x06, Buffer.from(out));
}

/** A parsed TLV: its tag, its contents, and where the next one starts. */
export interface Node {
  tag: number;
  body: Buffer;
  end: number;
}

/** The TLV at `at` of `buf`; throws on a length past the end (the input is a peer's). */
export function read(buf: Buffer, at: number): Node {
  if (at + 2 > buf.length) throw new Error('DER: truncated');
  const tag = buf[at]!;
  let len = buf[at + 1]!;
  let start = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 4 || start + n > buf.length) throw new Error('DER: bad length');
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + buf[start + i]!;
    start += n;
  }
  if (start + len > buf.length) throw new Error('DER: truncated');
  return { tag, body: buf.subarray(start, start + len), end: start + len };
}

/** Every TLV directly inside `body`. */
export function children(body: Buffer): Node[] {
  const out: Node[] = [];
  for (let at = 0; at < body.length; ) {
    const n = read(body, at);
    out.push(n);
    at = n.end;
  }
  return out;
}
