import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import '../helpers/property.js';
import {
  MAX_CLOSE_REASON_BYTES, WS_CLOSE, WS_OP, WsDecoder, WsFrameError, encodeClosePayload, encodeWsFrame, encodeWsHeader, isValidCloseCode, parseClosePayload, writeWsHeader, wsHeaderBytes,
  type WsFrame,
} from '../../src/protocol/ws-frames.js';

// The RFC 6455 codec shared by the tunnel client and the edge's WebSocket relay: frames
// survive encode → decode whatever the chunk boundaries, and no input of a peer's makes the
// decoder do anything but return a well-formed frame, wait for more, or throw WsFrameError.

const MAX = 4096;

interface Spec {
  op: number;
  fin: boolean;
  payload: Uint8Array;
}

/** A valid frame sequence: data messages (maybe fragmented) with control frames between fragments. */
const control: fc.Arbitrary<Spec> = fc.record({
  op: fc.constantFrom(WS_OP.Ping, WS_OP.Pong, WS_OP.Close),
  fin: fc.constant(true),
  payload: fc.uint8Array({ maxLength: 125 }),
});
const message: fc.Arbitrary<Spec[]> = fc
  .tuple(fc.constantFrom(WS_OP.Text, WS_OP.Binary), fc.array(fc.uint8Array({ maxLength: 300 }), { minLength: 1, maxLength: 4 }), fc.array(fc.option(control), { maxLength: 4 }))
  .map(([op, parts, controls]) =>
    parts.flatMap((payload, i) => {
      const frame: Spec = { op: i === 0 ? op : WS_OP.Continuation, fin: i === parts.length - 1, payload };
      const c = controls[i];
      return c && i < parts.length - 1 ? [frame, c] : [frame];
    }),
  );
const sequence = fc.array(fc.oneof(message, control.map((c) => [c])), { maxLength: 6 }).map((m) => m.flat());
/** Payloads crossing the 7-bit / 16-bit length encodings. */
const bigFrame: fc.Arbitrary<Spec> = fc
  .constantFrom(125, 126, 127, 65535, 65536, 70000)
  .map((n) => ({ op: WS_OP.Binary, fin: true, payload: Uint8Array.from({ length: n }, (_, i) => i & 0xff) }));

/** Splits `bytes` at the given cut points (sorted, deduplicated, clipped). */
function split(bytes: Buffer, cuts: number[]): Buffer[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let prev = 0;
  for (const c of [...at, bytes.length]) {
    out.push(bytes.subarray(prev, c));
    prev = c;
  }
  return out;
}

/** Feeds chunks one at a time and drains after each; WsFrameError propagates. */
function decodeAll(chunks: Buffer[], opts: { maxPayloadBytes: number; expectMasked: boolean; splitPayloads?: boolean }): WsFrame[] {
  const d = new WsDecoder(opts);
  const out: WsFrame[] = [];
  for (const c of chunks) {
    d.push(c);
    // A split payload is joined here (its pieces are views of `chunks`, checked by the test below).
    for (let f = d.next(); f; f = d.next()) out.push({ op: f.op, fin: f.fin, payload: Buffer.concat([f.payload, ...(f.more ?? [])]) });
  }
  assert.is(d.bufferedBytes, 0, 'every byte consumed');
  return out;
}

/** A masked frame with a real (non-zero) key, as a browser would send it. */
function maskedWithKey(op: number, payload: Uint8Array, key: Uint8Array, fin = true): Buffer {
  const f = encodeWsFrame(op, payload, true, fin);
  const at = f.length - payload.byteLength - 4;
  f.set(key, at);
  for (let i = 0; i < payload.byteLength; i++) f[at + 4 + i] = payload[i]! ^ key[i & 3]!;
  return f;
}

/** Runs `fn`; returns its WsFrameError's close code, fails on success or any other throw. */
function codeOf(fn: () => unknown): number {
  try {
    fn();
  } catch (err) {
    if (err instanceof WsFrameError) return err.closeCode;
    throw err;
  }
  throw new Error('expected a WsFrameError');
}

test('frame sequences round-trip through arbitrary chunk boundaries, masked and not', () => {
  fc.assert(
    fc.property(sequence, fc.array(fc.nat(), { maxLength: 12 }), fc.boolean(), (frames, cuts, masked) => {
      const wire = Buffer.concat(frames.map((f) => encodeWsFrame(f.op, f.payload, masked, f.fin)));
      const got = decodeAll(split(wire, cuts), { maxPayloadBytes: MAX, expectMasked: masked });
      assert.equal(
        got.map((f) => [f.op, f.fin, [...f.payload]]),
        frames.map((f) => [f.op, f.fin, [...f.payload]]),
      );
    }),
  );
});

test('non-zero masking keys are undone', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 300 }), fc.uint8Array({ minLength: 4, maxLength: 4 }), fc.array(fc.nat(), { maxLength: 6 }), (payload, key, cuts) => {
      const got = decodeAll(split(maskedWithKey(WS_OP.Binary, payload, key), cuts), { maxPayloadBytes: MAX, expectMasked: true });
      assert.equal([...got[0]!.payload], [...payload]);
    }),
  );
});

test('16- and 64-bit lengths round-trip byte by byte', () => {
  fc.assert(
    fc.property(bigFrame, fc.boolean(), (f, masked) => {
      const wire = encodeWsFrame(f.op, f.payload, masked);
      const header = encodeWsHeader(f.op, f.payload.byteLength, masked);
      assert.equal([...wire.subarray(0, header.length)], [...header]);
      const [got] = decodeAll(split(wire, [1, 2, 3, 5, 9, 11, 13]), { maxPayloadBytes: 1 << 20, expectMasked: masked });
      assert.ok(Buffer.from(f.payload).equals(got!.payload));
    }),
    { numRuns: 30 },
  );
});

test('arbitrary bytes yield frames, wait, or throw WsFrameError; nothing else', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), fc.array(fc.nat(), { maxLength: 8 }), fc.boolean(), fc.boolean(), (bytes, cuts, expectMasked, splitPayloads) => {
      const d = new WsDecoder({ maxPayloadBytes: 64, expectMasked, splitPayloads });
      try {
        for (const c of split(Buffer.from(bytes), cuts)) {
          d.push(c);
          for (let i = 0, f = d.next(); f; f = d.next(), i++) {
            assert.ok(i < 200, 'bounded');
            assert.ok(f.payload.length + (f.more ?? []).reduce((a, m) => a + m.length, 0) <= 64);
            if (f.op >= 0x8) assert.ok(f.fin && f.payload.length <= 125);
          }
        }
      } catch (err) {
        if (!(err instanceof WsFrameError)) throw err;
        assert.ok([WS_CLOSE.ProtocolError, WS_CLOSE.TooBig].includes(err.closeCode as 1002 | 1009), `code ${err.closeCode}`);
      }
    }),
  );
});

function decodeOne(bytes: number[] | Buffer, opts = { maxPayloadBytes: MAX, expectMasked: false }): WsFrame[] {
  return decodeAll([Buffer.from(bytes)], opts);
}

test('malformed headers are refused with 1002 from the first two bytes', () => {
  for (const rsv of [0x40, 0x20, 0x10]) assert.is(codeOf(() => decodeOne([0x82 | rsv, 0x00])), WS_CLOSE.ProtocolError, `rsv ${rsv}`);
  for (const op of [0x3, 0x7, 0xb, 0xf]) assert.is(codeOf(() => decodeOne([0x80 | op, 0x00])), WS_CLOSE.ProtocolError, `op ${op}`);
  assert.is(codeOf(() => decodeOne([0x09, 0x00])), WS_CLOSE.ProtocolError, 'fragmented ping');
  assert.is(codeOf(() => decodeOne([0x89, 126])), WS_CLOSE.ProtocolError, 'ping over 125 bytes');
  assert.is(codeOf(() => decodeOne([0x80, 0x00])), WS_CLOSE.ProtocolError, 'continuation with nothing to continue');
  assert.is(codeOf(() => decodeOne([0x02, 0x00, 0x81, 0x00])), WS_CLOSE.ProtocolError, 'new message inside a fragmented one');
  assert.is(codeOf(() => decodeOne([0x82, 0x80, 0, 0, 0, 0])), WS_CLOSE.ProtocolError, 'masked frame from a server');
  assert.is(codeOf(() => decodeOne([0x82, 0x00], { maxPayloadBytes: MAX, expectMasked: true })), WS_CLOSE.ProtocolError, 'unmasked frame from a client');
  assert.is(codeOf(() => decodeOne([0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0])), WS_CLOSE.ProtocolError, '64-bit length with the high bit');
});

test('the payload limit holds per frame and per fragmented message, before the payload arrives', () => {
  const limit = { maxPayloadBytes: 1000, expectMasked: false };
  // Only the header is pushed: the decoder must refuse without waiting for 2^53 bytes.
  assert.is(codeOf(() => decodeOne([0x82, 127, 0, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], limit)), WS_CLOSE.TooBig);
  assert.is(codeOf(() => decodeOne([0x82, 126, 0x03, 0xe9], limit)), WS_CLOSE.TooBig, '1001 bytes');
  assert.is(decodeOne(encodeWsFrame(WS_OP.Binary, new Uint8Array(1000), false), limit).length, 1, 'exactly the limit');
  const parts = Buffer.concat([
    encodeWsFrame(WS_OP.Binary, new Uint8Array(600), false, false),
    encodeWsFrame(WS_OP.Ping, new Uint8Array(100), false),
    encodeWsFrame(WS_OP.Continuation, new Uint8Array(401), false),
  ]);
  assert.is(codeOf(() => decodeOne(parts, limit)), WS_CLOSE.TooBig, 'fragments summing over the limit');
  // After a whole message the count starts again.
  const two = Buffer.concat([encodeWsFrame(WS_OP.Binary, new Uint8Array(600), false, false), encodeWsFrame(WS_OP.Continuation, new Uint8Array(400), false), encodeWsFrame(WS_OP.Binary, new Uint8Array(1000), false)]);
  assert.is(decodeOne(two, limit).length, 3);
});

test('close payloads: valid codes and UTF-8 reasons round-trip, others are refused', () => {
  const validCode = fc.oneof(fc.integer({ min: 1000, max: 1003 }), fc.integer({ min: 1007, max: 1014 }), fc.integer({ min: 3000, max: 4999 }));
  fc.assert(
    fc.property(validCode, fc.string({ unit: 'grapheme', maxLength: 60 }), (code, reason) => {
      const p = encodeClosePayload(code, reason);
      assert.ok(p.length <= 125);
      const got = parseClosePayload(p);
      assert.is(got.code, code);
      assert.ok(reason.startsWith(got.reason), 'the reason, or a prefix of it cut on a character boundary');
    }),
  );
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 65535 }).filter((c) => !isValidCloseCode(c)), (code) => {
      assert.is(codeOf(() => parseClosePayload(encodeClosePayload(code))), WS_CLOSE.ProtocolError);
    }),
  );
  for (const code of [999, 1004, 1005, 1006, 1015, 1016, 2999, 5000]) assert.not.ok(isValidCloseCode(code), `${code}`);
  assert.equal(parseClosePayload(new Uint8Array(0)), { code: WS_CLOSE.NoStatus, reason: '' });
  assert.is(codeOf(() => parseClosePayload(new Uint8Array([0x03]))), WS_CLOSE.ProtocolError, '1-byte payload');
  assert.is(codeOf(() => parseClosePayload(new Uint8Array([0x03, 0xe8, 0xc3, 0x28]))), WS_CLOSE.InvalidPayload, 'invalid UTF-8');
  // A long multi-byte reason is cut to 123 bytes without splitting a character.
  const long = encodeClosePayload(1000, 'é'.repeat(100));
  assert.ok(long.length - 2 <= MAX_CLOSE_REASON_BYTES);
  assert.is(parseClosePayload(long).reason, 'é'.repeat(61));
});

test('a frame masked with a non-zero key (a browser or another client) is unmasked, whatever its length', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 300 }), fc.integer({ min: 1, max: 0xffffffff }), (payload, key) => {
      const head = encodeWsHeader(WS_OP.Binary, payload.length, true);
      head.writeUInt32BE(key, head.length - 4);
      const masked = Buffer.from(payload).map((b, i) => b ^ ((key >>> (24 - 8 * (i & 3))) & 0xff));
      const d = new WsDecoder({ maxPayloadBytes: MAX, expectMasked: true });
      d.push(Buffer.concat([head, masked]));
      const f = d.next()!;
      assert.equal([...f.payload], [...payload]);
    }),
    { seed: 17, numRuns: 200 },
  );
});

test('a frame header written in place: every length form, masked with the zero key or not', () => {
  const cases: [number, string][] = [
    [0, '8200'], [125, '827d'], [126, '827e007e'], [65535, '827effff'], [65536, '827f0000000000010000'], [2 ** 32 + 5, '827f0000000100000005'],
  ];
  for (const [len, hex] of cases) {
    const b = Buffer.alloc(16, 0xee);
    assert.is(writeWsHeader(b, 1, WS_OP.Binary, len, false), 1 + hex.length / 2);
    assert.is(b.subarray(1, 1 + hex.length / 2).toString('hex'), hex, `length ${len}`);
    assert.is(b[0], 0xee);
    assert.is(wsHeaderBytes(len, true), hex.length / 2 + 4);
    const m = Buffer.alloc(16, 0xee);
    const end = writeWsHeader(m, 0, WS_OP.Binary, len, true);
    assert.is(m[1]! & 0x80, 0x80);
    assert.is(m.subarray(end - 4, end).toString('hex'), '00000000');
  }
});

test('split payloads: a data frame across reads comes as views of them, the same bytes, control frames whole', () => {
  fc.assert(
    fc.property(sequence, fc.array(fc.nat(), { maxLength: 12 }), fc.boolean(), (frames, cuts, masked) => {
      const wire = Buffer.concat(frames.map((f) => encodeWsFrame(f.op, f.payload, masked, f.fin)));
      const chunks = split(wire, cuts);
      const d = new WsDecoder({ maxPayloadBytes: MAX, expectMasked: masked, splitPayloads: true });
      const got: WsFrame[] = [];
      for (const c of chunks) {
        d.push(c);
        for (let f = d.next(); f; f = d.next()) {
          if (f.more) {
            assert.ok(f.op < 0x8, 'a control frame in pieces');
            // Views, not copies: every piece shares memory with a chunk pushed.
            for (const p of [f.payload, ...f.more]) assert.ok(chunks.some((c) => c.buffer === p.buffer), 'a piece that is a copy');
          }
          got.push({ op: f.op, fin: f.fin, payload: Buffer.concat([f.payload, ...(f.more ?? [])]) });
        }
      }
      assert.equal(got.map((f) => [f.op, f.fin, [...f.payload]]), frames.map((f) => [f.op, f.fin, [...f.payload]]));
    }),
    { numRuns: 300 },
  );
});

test.run();
