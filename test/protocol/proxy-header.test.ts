import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import '../helpers/property.js';
import { encodeProxyV2, parseProxyHeader, V2_MAX, type ProxyParse } from '../../src/protocol/proxy-header.js';

// The PROXY header parser of the --proxy-protocol front (edge/front.ts): every byte
// is a balancer's (or an attacker's who reaches the port), so besides the formats themselves:
// whatever the input, the parser answers (never throws), a header never claims more bytes than it
// was given or than the limits, and feeding the same bytes in pieces changes nothing.

const REQUEST = Buffer.from('GET / HTTP/1.1\r\nHost: a\r\n\r\n');
const v1 = (line: string): Buffer => Buffer.from(`${line}\r\n`, 'latin1');

test('v1: TCP4, TCP6 and UNKNOWN lines; the request after them is not part of the header', () => {
  const line = v1('PROXY TCP4 198.51.100.20 127.0.0.1 40000 443');
  assert.equal(parseProxyHeader(Buffer.concat([line, REQUEST])), { kind: 'header', version: 1, length: line.length, source: { ip: '198.51.100.20', port: 40000 } });
  const six = v1('PROXY TCP6 2001:db8::7 ::1 65535 443');
  assert.equal(parseProxyHeader(six), { kind: 'header', version: 1, length: six.length, source: { ip: '2001:db8::7', port: 65535 } });
  const unknown = v1('PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535');
  assert.equal(parseProxyHeader(unknown), { kind: 'header', version: 1, length: unknown.length, source: null });
});

test('v1: a wrong family, address, port, field count or an overlong line is invalid', () => {
  for (const line of [
    'PROXY TCP5 198.51.100.20 127.0.0.1 1 2',
    'PROXY TCP4 2001:db8::7 127.0.0.1 1 2',
    'PROXY TCP6 198.51.100.20 ::1 1 2',
    'PROXY TCP4 198.51.100.20 127.0.0.1 65536 443',
    'PROXY TCP4 198.51.100.20 127.0.0.1 080 443',
    'PROXY TCP4 198.51.100.20 127.0.0.1 -1 443',
    'PROXY TCP4 198.51.100.20 127.0.0.1 40000',
    'PROXY TCP4  198.51.100.20 127.0.0.1 40000 443',
    'PROXY TCP4 198.51.100.256 127.0.0.1 40000 443',
  ]) {
    assert.is(parseProxyHeader(v1(line)).kind, 'invalid', line);
  }
  assert.is(parseProxyHeader(Buffer.from(`PROXY TCP4 ${'1'.repeat(120)}`)).kind, 'invalid');
  assert.is(parseProxyHeader(v1(`PROXY TCP4 ${'1'.repeat(110)}`)).kind, 'invalid');
});

test('v2: PROXY over IPv4 and IPv6 name the source; LOCAL and UNSPEC name none; TLVs are skipped', () => {
  const four = encodeProxyV2({ ip: '198.51.100.20', port: 40000 }, { ip: '127.0.0.1', port: 443 });
  assert.equal(parseProxyHeader(Buffer.concat([four, REQUEST])), { kind: 'header', version: 2, length: 28, source: { ip: '198.51.100.20', port: 40000 } });
  const six = encodeProxyV2({ ip: '2001:db8::7', port: 1 }, { ip: '::1', port: 443 });
  assert.equal(parseProxyHeader(six), { kind: 'header', version: 2, length: 52, source: { ip: '2001:db8::7', port: 1 } });
  const local = Buffer.from(four);
  local[12] = 0x20;
  assert.equal(parseProxyHeader(local), { kind: 'header', version: 2, length: 28, source: null });
  // An AWS-style TLV after the addresses: part of the header, not of the request.
  const tlv = Buffer.concat([four, Buffer.from([0xea, 0x00, 0x04, 1, 2, 3, 4])]);
  tlv.writeUInt16BE(12 + 7, 14);
  assert.equal(parseProxyHeader(Buffer.concat([tlv, REQUEST])), { kind: 'header', version: 2, length: 35, source: { ip: '198.51.100.20', port: 40000 } });
});

test('v2: another version, an unknown command or family, a short address block or an oversized header is invalid', () => {
  const good = encodeProxyV2({ ip: '198.51.100.20', port: 40000 }, { ip: '127.0.0.1', port: 443 });
  const variant = (at: number, value: number): Buffer => {
    const b = Buffer.from(good);
    b[at] = value;
    return b;
  };
  assert.match((parseProxyHeader(variant(12, 0x11)) as { why: string }).why, 'version 1');
  assert.is(parseProxyHeader(variant(12, 0x22)).kind, 'invalid');
  assert.is(parseProxyHeader(variant(13, 0x41)).kind, 'invalid');
  const short = Buffer.from(good);
  short.writeUInt16BE(8, 14);
  assert.is(parseProxyHeader(short).kind, 'invalid');
  const huge = Buffer.from(good);
  huge.writeUInt16BE(0xffff, 14);
  assert.is(parseProxyHeader(huge).kind, 'invalid');
});

test('no header: an HTTP request or a TLS ClientHello is "none"; a prefix of either signature waits for more', () => {
  assert.is(parseProxyHeader(REQUEST).kind, 'none');
  assert.is(parseProxyHeader(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00])).kind, 'none');
  assert.is(parseProxyHeader(Buffer.from('PRO')).kind, 'more');
  assert.is(parseProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4')).kind, 'more');
  assert.is(parseProxyHeader(Buffer.from('0d0a0d0a00', 'hex')).kind, 'more');
  assert.is(parseProxyHeader(encodeProxyV2({ ip: '1.2.3.4', port: 1 }, { ip: '1.2.3.4', port: 2 }).subarray(0, 20)).kind, 'more');
});

/** Parses `bytes` fed in pieces the way the front does (accumulating), returning the first verdict. */
function inPieces(bytes: Buffer, cuts: number[]): ProxyParse {
  let seen = Buffer.alloc(0);
  let at = 0;
  for (const cut of [...cuts.filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b), bytes.length]) {
    seen = Buffer.concat([seen, bytes.subarray(at, cut)]);
    at = cut;
    const r = parseProxyHeader(seen);
    if (r.kind !== 'more') return r;
  }
  return parseProxyHeader(seen);
}

const canonical6 = (ip: string): string => new URL(`http://[${ip}]/`).hostname.slice(1, -1);
const anyPort = fc.integer({ min: 0, max: 65535 });
type Named = [Buffer, { ip: string; port: number }];
/** A header and the source it names (IPv6 in canonical text). */
const anyHeader: fc.Arbitrary<Named> = fc.oneof(
  fc.tuple(fc.ipV4(), anyPort).map(([ip, port]): Named => [encodeProxyV2({ ip, port }, { ip: '127.0.0.1', port: 443 }), { ip, port }]),
  fc.tuple(fc.ipV6(), anyPort).map(([ip, port]): Named => [encodeProxyV2({ ip, port }, { ip: '::1', port: 443 }), { ip: canonical6(ip), port }]),
  fc.tuple(fc.ipV4(), anyPort).map(([ip, port]): Named => [v1(`PROXY TCP4 ${ip} 127.0.0.1 ${port} 443`), { ip, port }]),
);

test('property: a valid header round-trips its source whatever the pieces it arrives in, and the bytes after it are left alone', () => {
  fc.assert(
    fc.property(anyHeader, fc.uint8Array({ maxLength: 64 }), fc.array(fc.integer({ min: 0, max: 200 }), { maxLength: 6 }), ([header, source], after, cuts) => {
      const whole = parseProxyHeader(Buffer.concat([header, after]));
      assert.is(whole.kind, 'header');
      assert.is((whole as { length: number }).length, header.length);
      assert.equal((whole as { source: unknown }).source, source);
      assert.equal(inPieces(Buffer.concat([header, after]), cuts), whole);
    }),
    { numRuns: 500 },
  );
});

test('property: arbitrary bytes, alone or after either signature, never throw, and a header never claims more than it was given or the limit', () => {
  const starts = fc.constantFrom(Buffer.alloc(0), Buffer.from('PROXY '), Buffer.from('0d0a0d0a000d0a515549540a', 'hex'), Buffer.from('0d0a0d0a000d0a515549540a21', 'hex'));
  fc.assert(
    fc.property(starts, fc.uint8Array({ maxLength: 300 }), (start, rest) => {
      const bytes = Buffer.concat([start, rest]);
      const r = parseProxyHeader(bytes);
      if (r.kind === 'header') {
        assert.ok(r.length <= bytes.length && r.length <= V2_MAX);
        if (r.source) assert.ok(r.source.port >= 0 && r.source.port <= 65535);
      }
    }),
    { numRuns: 2000 },
  );
});

test.run();
