import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import {
  F, MAX_DATA_BYTES, MAX_FRAME_BYTES, MAX_RETRY_AFTER_MS, FrameError, dataFrame, dataFrameHead, decodeFrame, encodeFrame, rawStreamOpenFrame, randomTunnelId, tunnelIdProblem, RESET_CODES, type Frame, type HttpHead,
} from '../../src/protocol/frames.js';
import { decode, encode } from '../../src/protocol/codec.js';
import { withRawHead } from '../../src/protocol/raw-head.js';
import { MAX_BASIC_AUTH, MAX_CIDRS, MAX_EXPIRY_MS, accessRulesProblem, expiryProblem, parseCidr } from '../../src/protocol/access.js';
import { randomBytes } from 'node:crypto';

// The tunnel wire codec: every frame survives encode → decode, bodies split at arbitrary
// points reassemble byte-exact, and no input of the peer's makes decodeFrame do anything but
// return a well-formed frame or throw FrameError.

const sid = fc.integer({ min: 0, max: 2 ** 32 - 1 });
const str = fc.string({ maxLength: 40 });
const headers = fc.array(fc.tuple(str, str), { maxLength: 8 }).map((pairs) => pairs.flat());
/** Response headers go to the visitor as they are: names are tokens, values have no CR/LF/NUL. */
const token = fc.stringMatching(/^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,20}$/);
const fieldValue = str.filter((v) => !/[\r\n\0]/.test(v));
const refusal = fc.record(
  {
    code: fc.constantFrom('unauthorized', 'forbidden', 'conflict', 'bad-request', 'version', 'deleted'),
    message: str,
    permanent: fc.boolean(),
    retryAfterMs: fc.integer({ min: 0, max: MAX_RETRY_AFTER_MS }),
  },
  { requiredKeys: ['code', 'message', 'permanent'] },
);
const bytes = fc.uint8Array({ maxLength: 2048 });
/** Valid access rules: USER:PASS credentials, v4 and v6 CIDRs (bare or with a prefix), an expiry. */
const cidr = fc.oneof(
  fc.tuple(fc.ipV4(), fc.option(fc.integer({ min: 0, max: 32 }))).map(([a, p]) => (p === null ? a : `${a}/${p}`)),
  fc.tuple(fc.ipV6(), fc.option(fc.integer({ min: 0, max: 128 }))).map(([a, p]) => (p === null ? a : `${a}/${p}`)),
);
const credential = fc
  .tuple(fc.stringMatching(/^[A-Za-z0-9._@-]{1,20}$/), fc.stringMatching(/^[\x20-\x7e]{1,40}$/))
  .map(([u, p]) => `${u}:${p}`);
const access = fc.record(
  {
    basicAuth: fc.array(credential, { maxLength: MAX_BASIC_AUTH }),
    allowIp: fc.array(cidr, { maxLength: 8 }),
    denyIp: fc.array(cidr, { maxLength: 8 }),
    expiresAt: fc.option(fc.nat()),
  },
  { requiredKeys: [] },
);

const nodeUrl = fc.tuple(fc.constantFrom('http', 'https'), fc.stringMatching(/^[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9]{0,10}){0,2}$/), fc.integer({ min: 1, max: 65535 })).map(([s, h, p]) => `${s}://${h}:${p}`);

const frame: fc.Arbitrary<Frame> = fc.oneof(
  fc.record({ v: fc.nat(10), agent: str }).map((h): Frame => [F.Hello, h]),
  fc.record({ v: fc.nat(10), heartbeatMs: fc.nat(), shard: fc.nat(1), shards: fc.integer({ min: 2, max: 256 }), version: fc.stringMatching(/^[\x21-\x7e]{1,64}$/), node: nodeUrl, nodes: fc.array(nodeUrl, { maxLength: 4 }) }, { requiredKeys: ['v', 'heartbeatMs'] }).map((w): Frame => [F.Welcome, w]),
  // a cluster: a pool's Open, and a client's second connection joining with its member key
  fc.tuple(sid, str, fc.boolean()).map(([r, id, pool]): Frame => [F.Open, r, { type: 'http', id, pool }]),
  fc.tuple(sid, str, fc.base64String({ minLength: 4, maxLength: 40 })).map(([r, id, member]): Frame => [F.Open, r, { type: 'tcp', id, member }]),
  // a lane's Open: http with an id and the key
  fc.tuple(sid, str, fc.base64String({ minLength: 4, maxLength: 40 })).map(([r, id, lane]): Frame => [F.Open, r, { type: 'http', id, lane }]),
  fc.tuple(sid, fc.record({ type: fc.constantFrom('http' as const, 'tcp' as const), id: fc.option(str), teamId: fc.option(str), remotePort: fc.option(fc.integer({ min: 1, max: 65535 })), access: fc.option(access), local: fc.option(fc.stringMatching(/^[\x21-\x7e]{0,60}$/)) }, { requiredKeys: ['type'] })).map(([r, o]): Frame => [F.Open, r, o]),
  fc.tuple(sid, fc.record({ id: str, url: str, remotePort: fc.option(fc.integer({ min: 1, max: 65535 })), tookOver: fc.boolean(), laneKey: str, memberKey: str }, { requiredKeys: ['id', 'url', 'remotePort'] })).map(([r, o]): Frame => [F.Opened, r, o]),
  fc.tuple(sid, refusal).map(([r, x]): Frame => [F.Refused, r, x as never]),
  fc.tuple(str, refusal).map(([t, x]): Frame => [F.Closed, t, x as never]),
  str.map((t): Frame => [F.Close, t]),
  fc.tuple(sid, str, fc.record({ kind: fc.constant('http' as const), method: str, target: str, headers, upgrade: fc.boolean() })).map(([s, t, h]): Frame => [F.StreamOpen, s, t, h]),
  fc.tuple(sid, str, fc.record({ kind: fc.constant('tcp' as const), remote: str })).map(([s, t, h]): Frame => [F.StreamOpen, s, t, h]),
  fc.tuple(sid, bytes).map(([s, b]): Frame => [F.Data, s, b]),
  sid.map((s): Frame => [F.End, s]),
  fc.tuple(sid, fc.constantFrom(...RESET_CODES)).map(([s, c]): Frame => [F.Reset, s, c]),
  fc.tuple(sid, fc.nat()).map(([s, n]): Frame => [F.Credit, s, n]),
  fc.oneof(fc.nat(), fc.constant(Date.now())).map((n): Frame => [F.Ping, n]),
  fc.nat().map((n): Frame => [F.Pong, n]),
  refusal.map((r): Frame => [F.Fatal, r as never]),
  fc.stringMatching(/^[A-Za-z0-9._-]{1,128}$/).map((t): Frame => [F.Ticket, { resume: t }]),
);

/** Frames compare equal once bin payloads are compared as bytes. */
function norm(f: unknown): unknown {
  if (f instanceof Uint8Array) return { bin: [...f] };
  if (Array.isArray(f)) return f.map(norm);
  if (f && typeof f === 'object') return Object.fromEntries(Object.entries(f).map(([k, v]) => [k, norm(v)]));
  return f;
}

test('every frame round-trips', () => {
  fc.assert(
    fc.property(frame, (f) => {
      assert.equal(norm(decodeFrame(encodeFrame(f))), norm(f));
    }),
    { numRuns: 2000 },
  );
});

test('a body split at arbitrary points reassembles byte-exact', () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 0, maxLength: 20_000 }), fc.array(fc.nat(20_000), { maxLength: 30 }), sid, (body, cuts, s) => {
      const points = [...new Set(cuts.map((c) => c % (body.length + 1)))].sort((a, b) => a - b);
      const parts: Uint8Array[] = [];
      let prev = 0;
      for (const p of [...points, body.length]) {
        parts.push(body.subarray(prev, p));
        prev = p;
      }
      const wire = parts.map((p) => dataFrame(s, p));
      const out = Buffer.concat(
        wire.map((w) => {
          // The receiver's buffer is reused after each message: copy what decodeFrame returned.
          const f = decodeFrame(Buffer.from(w));
          assert.is(f[0], F.Data);
          assert.is(f[1], s);
          return Buffer.from(f[2] as Uint8Array);
        }),
      );
      assert.ok(out.equals(Buffer.from(body)));
    }),
    { numRuns: 500 },
  );
});

test('the hand-written Data frame head is exactly msgpack', () => {
  const sizes = fc.oneof(fc.nat(300), fc.integer({ min: 0, max: 70_000 }), fc.integer({ min: 65_530, max: MAX_DATA_BYTES }));
  fc.assert(
    fc.property(sid, sizes, (s, n) => {
      const payload = Buffer.alloc(n, 3);
      const mine = Buffer.concat([dataFrameHead(s, n), payload]);
      assert.ok(mine.equals(encode([F.Data, s, payload])), `sid ${s} size ${n}`);
      assert.ok(dataFrame(s, payload).equals(mine));
    }),
    { numRuns: 300 },
  );
});

test('Data, End and Credit read straight from their bytes give what the general decoder gives, for every encoding of them and every corruption', () => {
  // What the msgpack decoder makes of the bytes, and whether its checks take it.
  const general = (b: Uint8Array): unknown => {
    let f: unknown;
    try {
      f = decode(b);
    } catch {
      return 'refused';
    }
    try {
      decodeFrame(encode(f)); // the checks, on the value's own shortest encoding
    } catch {
      return 'refused';
    }
    return f;
  };
  const mine = (b: Uint8Array): unknown => {
    try {
      return decodeFrame(b);
    } catch {
      return 'refused';
    }
  };
  const uint = (n: number, width: 0 | 1 | 2 | 4): number[] =>
    width === 0 ? [n] : width === 1 ? [0xcc, n] : width === 2 ? [0xcd, n >> 8, n & 0xff] : [0xce, (n >>> 24) & 0xff, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff];
  const widthFor = (n: number) => fc.constantFrom(...([0, 1, 2, 4] as const).filter((w) => (w === 0 ? n < 0x80 : w === 1 ? n < 0x100 : w === 2 ? n < 0x10000 : true)));
  const frameBytes = fc.oneof(
    // Data: sid and bin length in any width that holds them
    fc.tuple(sid, fc.nat(300)).chain(([s, n]) =>
      fc.tuple(widthFor(s), fc.constantFrom(1, 2, 4)).map(([w, bw]) => {
        const len = bw === 1 ? [0xc4, n & 0xff] : bw === 2 ? [0xc5, n >> 8, n & 0xff] : [0xc6, 0, 0, n >> 8, n & 0xff];
        const size = bw === 1 ? n & 0xff : n;
        return Uint8Array.from([0x93, F.Data, ...uint(s, w), ...len, ...Buffer.alloc(size, 7)]);
      }),
    ),
    fc.tuple(sid).chain(([s]) => widthFor(s).map((w) => Uint8Array.from([0x92, F.End, ...uint(s, w)]))),
    fc.tuple(sid, sid).chain(([s, n]) => fc.tuple(widthFor(s), widthFor(n)).map(([w, wn]) => Uint8Array.from([0x93, F.Credit, ...uint(s, w), ...uint(n, wn)]))),
  );
  // corruptions: cut, extended, a byte changed
  const corrupted = fc.tuple(frameBytes, fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom('cut', 'extend', 'flip', 'none')).map(([b, at, v, how]) => {
    const i = at % b.length;
    if (how === 'cut') return b.subarray(0, i);
    if (how === 'extend') return Uint8Array.from([...b, v]);
    if (how === 'flip') return Uint8Array.from(b.map((x, j) => (j === i ? v : x)));
    return b;
  });
  fc.assert(
    fc.property(corrupted, (b) => {
      assert.equal(mine(b), general(b), `bytes ${Buffer.from(b).toString('hex')}`);
    }),
    { numRuns: 5000 },
  );
  // and the payload is a view of the message, as msgpack's own bin is (no copy)
  const msg = encode([F.Data, 5, Buffer.from('hello')]);
  const f = decodeFrame(msg) as [number, number, Uint8Array];
  assert.is(f[2].buffer, msg.buffer);
});

test('a raw request head is taken only as exactly one head of its method and target', () => {
  const open = (raw: string | Uint8Array, extra: Record<string, unknown> = {}) =>
    encode([F.StreamOpen, 1, 't', { kind: 'http', method: 'GET', target: '/x', headers: [], upgrade: false, end: true, raw: typeof raw === 'string' ? Buffer.from(raw, 'latin1') : raw, ...extra }]);
  const good = 'GET /x HTTP/1.1\r\nHost: t.example\r\nx-forwarded-for: 1.2.3.4\r\n\r\n';
  const f = decodeFrame(open(good));
  assert.equal(Buffer.from((f as [number, number, string, { raw: Uint8Array }])[3].raw).toString('latin1'), good);
  decodeFrame(open('GET /x HTTP/1.1\r\n\r\n')); // no fields at all
  decodeFrame(open(good, { chunked: true }));
  const refused: [string | Uint8Array, Record<string, unknown>, RegExp][] = [
    ['POST /x HTTP/1.1\r\nHost: a\r\n\r\n', {}, /request line/],
    ['GET /y HTTP/1.1\r\nHost: a\r\n\r\n', {}, /request line/],
    ['GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n', {}, /after the blank line/],
    ['GET /x HTTP/1.1\r\nHost: a\nX-Smuggled: 1\r\n\r\n', {}, /bare LF/],
    ['GET /x HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n', {}, /bare CR/],
    ['GET /x HTTP/1.1\r\nHost: a\0\r\n\r\n', {}, /NUL/],
    ['GET /x HTTP/1.1\r\nHost: a\r\n', {}, /blank line/],
    [good, { headers: ['Host', 'a'] }, /empty beside head.raw/],
    [good, { chunked: 'yes' }, /chunked/],
    [Buffer.alloc(70_000, 65), {}, /head.raw/],
  ];
  for (const [raw, extra, why] of refused) assert.throws(() => decodeFrame(open(raw, extra)), why, JSON.stringify(raw).slice(0, 80));
  // chunked means nothing without raw
  assert.throws(() => decodeFrame(encode([F.StreamOpen, 1, 't', { kind: 'http', method: 'GET', target: '/x', headers: [], upgrade: false, chunked: true }])), /only beside head.raw/);
});

test("a head's protocol (an HTTP/2 visitor's, for the inspector) is 'h2' or 'grpc', nothing else", () => {
  const open = (protocol: unknown) => encode([F.StreamOpen, 1, 't', { kind: 'http', method: 'POST', target: '/x', headers: [], upgrade: false, protocol }]);
  for (const ok of ['h2', 'grpc']) assert.is((decodeFrame(open(ok)) as [number, number, string, HttpHead])[3].protocol, ok);
  for (const bad of ['http1', 'H2', 1, true, null]) assert.throws(() => decodeFrame(open(bad)), /head.protocol/, String(bad));
});

test('arbitrary bytes decode to a valid frame or throw FrameError, nothing else', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (b) => {
      try {
        const f = decodeFrame(b);
        assert.ok(Array.isArray(f));
      } catch (err) {
        assert.instance(err, FrameError);
      }
    }),
    { numRuns: 5000 },
  );
});

test('truncated frames are refused (a frame is never read past its message)', () => {
  fc.assert(
    fc.property(frame, fc.nat(), (f, cut) => {
      const full = encodeFrame(f);
      if (full.length < 2) return;
      const part = full.subarray(0, cut % full.length);
      try {
        decodeFrame(part);
      } catch (err) {
        assert.instance(err, FrameError);
        return;
      }
      // A prefix may itself be a complete, valid frame only if it decodes to something else entirely.
    }),
  );
});

test('wrong shapes are refused', () => {
  for (const bad of [
    [],
    {},
    'x',
    [F.Data, 1, 'not bytes'],
    [F.Data, -1, Buffer.alloc(1)],
    [F.Credit, 1],
    [F.StreamOpen, 1, 'id', { kind: 'http', method: 'GET', target: '/', headers: ['odd'], upgrade: false }],
    [F.Hello, { v: 'one' }],
    [F.Hello, { v: 2, agent: 'x', rawHeads: 'yes' }],
    [F.StreamOpen, 1, 'id', { kind: 'http', method: 'GET', target: '/', headers: [], upgrade: false, raw: 'GET / HTTP/1.1\r\n\r\n' }],
    [99, 1],
    // every field is type-checked: ids, codes, ranges, lengths
    [F.Open, 1, { type: 'http', id: 1234 }],
    [F.Open, 1, { type: 'http', id: true }],
    [F.Open, 1, { type: 'http', id: ['abcd'] }],
    [F.Open, 1, { type: 'http', id: { a: 1 } }],
    [F.Open, 1, { type: 'http', teamId: 7 }],
    [F.Open, 1, { type: 'tcp', remotePort: 70_000 }],
    [F.Open, 1, { type: 'tcp', remotePort: 80.5 }],
    [F.Open, 1, { type: 'udp' }],
    [F.Open, -1, { type: 'http' }],
    [F.Open, 1, { type: 'http', id: 'x'.repeat(300) }],
    // the local target is shown in other users' listings: a string of printable ASCII, bounded
    [F.Open, 1, { type: 'http', local: 3000 }],
    [F.Open, 1, { type: 'http', local: ['http://localhost:3000'] }],
    [F.Open, 1, { type: 'http', local: 'http://localhost:3000\r\nX-Injected: 1' }],
    [F.Open, 1, { type: 'http', local: 'http://local host:3000' }],
    [F.Open, 1, { type: 'http', local: '\x1b[31mred' }],
    [F.Open, 1, { type: 'http', local: 'http://l\u00f6cal:3000' }],
    [F.Open, 1, { type: 'http', local: 'h'.repeat(300) }],
    [F.Opened, 1, { id: 'a', url: 'http://a', remotePort: null, tookOver: 'yes' }],
    [F.Opened, 1, { id: 'a', url: 'http://a', remotePort: null, tookOver: 1 }],
    [F.Opened, 1, { id: 'a', url: 'http://a', remotePort: null, tookOver: null }],
    [F.Opened, 1, { id: 7, url: 'http://a' }],
    // lanes: the key only on an http Open with an id; Welcome's shard within its count
    [F.Open, 1, { type: 'tcp', id: 'a', lane: 'key' }],
    [F.Open, 1, { type: 'http', lane: 'key' }],
    [F.Open, 1, { type: 'http', id: 'a', lane: 7 }],
    [F.Open, 1, { type: 'http', id: 'a', lane: 'k'.repeat(300) }],
    [F.Opened, 1, { id: 'a', url: 'http://a', remotePort: null, laneKey: 7 }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, shard: 2, shards: 2 }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, shard: -1, shards: 2 }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, shard: 0, shards: 0 }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, shard: 0, shards: 1000 }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, shard: 'a' }],
    // cluster: the nodes a client may dial are http(s) URLs without credentials, bounded in count and length
    [F.Welcome, { v: 1, heartbeatMs: 5000, node: 'ftp://a:1' }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, node: 'http://user:pw@a:1' }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, node: `http://${'a'.repeat(200)}` }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, nodes: 'http://a:1' }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, nodes: ['http://a:1', 7] }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, nodes: ['http://a\r\n:1'] }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, nodes: Array.from({ length: 65 }, (_, i) => `http://n${i}:1`) }],
    [F.Open, 1, { type: 'http', id: 'a', pool: 'yes' }],
    [F.Open, 1, { type: 'http', member: 'key' }],
    [F.Open, 1, { type: 'http', id: 'a', member: 7 }],
    [F.Opened, 1, { id: 'a', url: 'http://a', remotePort: null, memberKey: 7 }],
    // the server's version is printed on a terminal: short printable ASCII only
    [F.Welcome, { v: 1, heartbeatMs: 5000, version: '1.0\x1b[2J' }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, version: '' }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, version: 'x'.repeat(65) }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, version: 1 }],
    // the resumption ticket goes back as a header value: token characters, bounded
    [F.Welcome, { v: 1, heartbeatMs: 5000, resume: 'v1.1.a\r\nX-Evil: 1' }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, resume: 'a'.repeat(129) }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, resume: '' }],
    [F.Welcome, { v: 1, heartbeatMs: 5000, resume: 7 }],
    [F.Ticket, { resume: 'v1.1.a\r\nX-Evil: 1' }],
    [F.Ticket, { resume: 'a'.repeat(129) }],
    [F.Ticket, {}],
    [F.Ticket, 'v1.1.a'],
    [F.Ticket, { resume: 'v1.1.a' }, 1],
    [F.Opened, 1, { id: 'a', url: 'u'.repeat(70_000) }],
    [F.Reset, 1, 'no-such-code'],
    [F.Reset, 1, 7],
    [F.Credit, 1, -5],
    [F.Credit, 1, 2 ** 40],
    [F.Credit, 1, 1.5],
    [F.Data, 2 ** 33, Buffer.alloc(1)],
    [F.Data, 1, Buffer.alloc(MAX_DATA_BYTES + 1)],
    [F.End, NaN],
    // 9 was the structured answer head of protocol 1: unknown now.
    [9, 1, { status: 200, headers: [] }],
    [F.Hello, { v: 1, agent: 5 }],
    [F.Hello, [1, 'agent']],
    [F.Ping, -1],
    [F.Fatal, { code: 'made-up', message: 'x', permanent: true }],
    [F.Closed, 5, { code: 'deleted', message: 'x', permanent: true }],
    [F.Refused, 1, { code: 'unavailable', message: 'x', permanent: false, retryAfterMs: -1 }],
    [F.Refused, 1, { code: 'unavailable', message: 'x', permanent: false, retryAfterMs: MAX_RETRY_AFTER_MS + 1 }],
    [F.Refused, 1, { code: 'unavailable', message: 'x', permanent: false, retryAfterMs: '60000' }],
    [F.Refused, 1, { code: 'unavailable', message: 'x', permanent: false, retryAfterMs: 1.5 }],
    [F.StreamOpen, 1, 'id', { kind: 'http', method: 'GET', target: '/', headers: [], upgrade: 'yes' }],
    [F.StreamOpen, 1, 'id', { kind: 'udp', remote: 'x' }],
    [F.Data, 1, Buffer.alloc(1), 'extra'],
    ['1', 1],
  ]) {
    assert.throws(() => decodeFrame(encode(bad)), (e: unknown) => e instanceof FrameError, JSON.stringify(bad));
  }
});

test('a refused field is named in the message', () => {
  const message = (bad: unknown): string => {
    try {
      decodeFrame(encode(bad));
    } catch (err) {
      return (err as Error).message;
    }
    throw new Error(`accepted ${JSON.stringify(bad)}`);
  };
  assert.is(message([F.Open, 1, { type: 'http', id: 1234 }]), 'malformed Open frame: open.id must be a string of at most 255 characters or null, got 1234');
  assert.is(message([F.Open, 1, { type: 'http', id: ['abcd'] }]), 'malformed Open frame: open.id must be a string of at most 255 characters or null, got an array');
  assert.match(message([F.Reset, 3, 'bogus']), /^malformed Reset frame: code must be one of local-unreachable, .*, got "bogus"$/);
  assert.match(message([F.Open, 1, { type: 'http', local: 'a\nb' }]), /^malformed Open frame: open\.local must be printable ASCII without spaces/);
  assert.match(message([F.Opened, 1, { id: 'a', url: 'http://a', remotePort: null, tookOver: 'yes' }]), /^malformed Opened frame: opened\.tookOver must be/);
  assert.match(message([F.Open, 1, { type: 'tcp', id: 'a', lane: 'key' }]), /^malformed Open frame: open\.lane must be only with type "http" and an id/);
  assert.match(message([F.Welcome, { v: 1, heartbeatMs: 5000, shard: 2, shards: 2 }]), /^malformed Welcome frame: welcome\.shard must be/);
});

test('malformed access rules in an Open are refused, naming the field and never the password', () => {
  const open = (access: unknown) => encode([F.Open, 1, { type: 'http', access }]);
  const bad: [unknown, RegExp][] = [
    ['x', /open\.access must be a map/],
    [[], /open\.access must be a map/],
    [{ basicAuth: 'me:secret' }, /open\.access\.basicAuth must be a list of at most 16/],
    [{ basicAuth: Array.from({ length: MAX_BASIC_AUTH + 1 }, (_, i) => `u${i}:p`) }, /basicAuth must be a list of at most 16/],
    [{ basicAuth: [5] }, /basicAuth\[0\] must be a string/],
    [{ basicAuth: ['no-colon-s3cr3t'] }, /basicAuth\[0\]: a credential must be USER:PASS/],
    [{ basicAuth: [':s3cr3t'] }, /basicAuth\[0\]: the user of a credential/],
    [{ basicAuth: ['me:'] }, /basicAuth\[0\]: the password for user "me"/],
    [{ basicAuth: ['me:s3cr3t\r\nX: y'] }, /basicAuth\[0\]: the password for user "me"/],
    [{ basicAuth: [`${'u'.repeat(129)}:s3cr3t`] }, /the user of a credential must be 1-128/],
    [{ basicAuth: [`me:${'s3cr3t'.repeat(50)}`] }, /the password for user "me" must be 1-256/],
    [{ allowIp: '10.0.0.0/8' }, /open\.access\.allowIp must be a list/],
    [{ allowIp: Array.from({ length: MAX_CIDRS + 1 }, () => '10.0.0.1') }, /allowIp must be a list of at most 64/],
    [{ allowIp: ['10.0.0.0/33'] }, /allowIp\[0\] must be an IPv4 or IPv6 address or CIDR, got "10.0.0.0\/33"/],
    [{ denyIp: ['::1/129'] }, /denyIp\[0\] must be an IPv4 or IPv6 address or CIDR/],
    [{ denyIp: ['fe80::1%eth0'] }, /denyIp\[0\]/],
    [{ denyIp: ['example.com'] }, /denyIp\[0\]/],
    [{ denyIp: ['10.0.0.0/8', 7] }, /denyIp\[1\]/],
    [{ denyIp: ['10.0.0.0/-1'] }, /denyIp\[0\]/],
    [{ denyIp: ['10.0.0.0/08x'] }, /denyIp\[0\]/],
    [{ denyIp: ['1.2.3'] }, /denyIp\[0\]/],
    [{ expiresAt: 'tomorrow' }, /open\.access\.expiresAt must be an integer/],
    [{ expiresAt: -1 }, /open\.access\.expiresAt must be an integer/],
    [{ expiresAt: 1.5 }, /open\.access\.expiresAt/],
    [{ password: 'x' }, /open\.access\.password must be absent/],
  ];
  for (const [rules, want] of bad) {
    let message = '';
    try {
      decodeFrame(open(rules));
    } catch (err) {
      assert.instance(err, FrameError);
      message = (err as Error).message;
    }
    assert.match(message, want, JSON.stringify(rules));
    assert.not.match(message, /s3cr3t/, `the password is echoed: ${message}`);
  }
});

test('arbitrary access maps decode to valid rules or throw FrameError, nothing else', () => {
  const value = fc.oneof(fc.anything({ maxDepth: 2 }), fc.array(fc.oneof(fc.string(), cidr, credential, fc.integer()), { maxLength: 4 }));
  fc.assert(
    fc.property(fc.dictionary(fc.constantFrom('basicAuth', 'allowIp', 'denyIp', 'expiresAt', 'other'), value), (rules) => {
      try {
        decodeFrame(encode([F.Open, 1, { type: 'http', access: rules }]));
      } catch (err) {
        if (!(err instanceof FrameError)) throw err;
      }
    }),
    { numRuns: 2000 },
  );
});

test('CIDRs: IPv4 and IPv6, bare addresses as a single host', () => {
  assert.equal(parseCidr('10.0.0.0/8'), { address: '10.0.0.0', prefix: 8, family: 'ipv4' });
  assert.equal(parseCidr('127.0.0.1'), { address: '127.0.0.1', prefix: 32, family: 'ipv4' });
  assert.equal(parseCidr('::1'), { address: '::1', prefix: 128, family: 'ipv6' });
  assert.equal(parseCidr('2001:db8::/32'), { address: '2001:db8::', prefix: 32, family: 'ipv6' });
  assert.equal(parseCidr('::ffff:10.0.0.1/104'), { address: '::ffff:10.0.0.1', prefix: 104, family: 'ipv6' });
  for (const bad of ['', '10.0.0.0/', '10.0.0.0/33', '::/129', '256.0.0.1', '10.0.0.0/8/8', 'fe80::1%lo', ' 10.0.0.1', 'x'.repeat(100)]) assert.is(parseCidr(bad), null, bad);
});

test('expiry bounds and rules a tunnel type cannot take', () => {
  const now = Date.parse('2026-06-01T12:00:00Z');
  assert.is(expiryProblem(now + 1000, now), null);
  assert.is(expiryProblem(now, now), 'the expiry 2026-06-01T12:00:00.000Z is in the past');
  assert.is(expiryProblem(now + MAX_EXPIRY_MS, now), null);
  assert.is(accessRulesProblem({ expiresAt: now + MAX_EXPIRY_MS + 1 }, 'http', now), `the expiry ${new Date(now + MAX_EXPIRY_MS + 1).toISOString()} is more than a year away`);
  assert.is(accessRulesProblem({ basicAuth: ['me:pw'] }, 'tcp', now), 'basic auth applies to http tunnels only');
  assert.is(accessRulesProblem({ basicAuth: ['me:pw'], allowIp: ['10.0.0.0/8'], expiresAt: now + 1000 }, 'http', now), null);
});

test('oversized frames are refused before decoding', () => {
  const big = dataFrame(1, Buffer.alloc(MAX_FRAME_BYTES + 1));
  assert.throws(() => decodeFrame(big), (e: unknown) => e instanceof FrameError);
  assert.ok(MAX_DATA_BYTES + 32 < MAX_FRAME_BYTES, 'a full Data frame fits in a message');
});

test('tunnel ids follow the DNS label rules', () => {
  for (const ok of ['abc', 'my-app', 'a1b', 'x'.repeat(63)]) assert.is(tunnelIdProblem(ok, 'localhost'), null, ok);
  for (const bad of ['ab', '-abc', 'abc-', 'ABC', 'a_b', 'x'.repeat(64), 'api', 'www', 'admin', 'auth', 'app', 'static', 'status', 'mail', 'example']) {
    assert.type(tunnelIdProblem(bad, 'example.com'), 'string', bad);
  }
  fc.assert(fc.property(fc.nat(), () => tunnelIdProblem(randomTunnelId(randomBytes), 'localhost') === null));
});


test('a raw StreamOpen written straight into its buffer decodes as the one msgpackr encodes, and passes the decoder', () => {
  // Heads as the edge makes them: latin1 strings from llhttp (bytes 0x80-0xff too), any sizes
  // (str8/16 targets, bin8/16/32 raw heads), end and protocol present or not, sids of every width.
  const latin1 = (max: number) => fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c === 0x7f ? 0x7e : c)), maxLength: max });
  const head = fc.record(
    {
      kind: fc.constant('http' as const),
      method: token,
      target: fc.oneof(latin1(40), latin1(300)).map((t) => `/${t.replace(/ /g, '')}`),
      headers: fc.array(fc.tuple(token, fc.oneof(latin1(30), latin1(3000))), { maxLength: 30 }).map((pairs) => pairs.flat()),
      upgrade: fc.boolean(),
      end: fc.constant(true),
      protocol: fc.constantFrom('h2' as const, 'grpc' as const),
    },
    { requiredKeys: ['kind', 'method', 'target', 'headers', 'upgrade'] },
  );
  const id = fc.oneof(fc.stringMatching(/^[a-z0-9-]{1,40}$/), fc.string({ maxLength: 40 }));
  fc.assert(
    fc.property(sid, id, head, (s, t, h) => {
      const direct = rawStreamOpenFrame(s, t, h as HttpHead);
      const viaMsgpackr = encodeFrame([F.StreamOpen, s, t, withRawHead(h as HttpHead)]);
      assert.equal(decode(direct), decode(viaMsgpackr));
      if (direct.byteLength <= MAX_FRAME_BYTES) assert.equal(decodeFrame(direct), decode(direct));
    }),
    { numRuns: 400 },
  );
});

test('a raw StreamOpen with bytes changed, cut or added: refused with a FrameError, or exactly what msgpack says it is', () => {
  const base = rawStreamOpenFrame(7, 'abc', { kind: 'http', method: 'POST', target: '/x?y=1', headers: ['Host', 'abc.localhost', 'Content-Length', '3'], upgrade: false, protocol: 'grpc' });
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.nat(base.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 3 }), fc.integer({ min: -3, max: 3 }), (edits, resize) => {
      let b = Buffer.from(base);
      for (const [at, v] of edits) b[at] = v;
      if (resize < 0) b = b.subarray(0, b.length + resize);
      else if (resize > 0) b = Buffer.concat([b, Buffer.alloc(resize, 0xc0)]);
      let got: Frame;
      try {
        got = decodeFrame(b);
      } catch (err) {
        assert.instance(err, FrameError);
        return;
      }
      assert.equal(got, decode(b));
    }),
    { numRuns: 3000 },
  );
});

test.run();
