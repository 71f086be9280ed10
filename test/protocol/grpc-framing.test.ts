import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { grpcMessages, isGrpcContentType, printable } from '../../src/protocol/grpc-framing.js';

// The inspector's reading of a captured gRPC body: length-prefixed messages, and what it says
// about bytes that are not (a peer may send anything; the capture may stop anywhere).

/** One message on the wire: flag, big-endian length, bytes. */
function frame(data: string | Buffer, flag = 0, length?: number): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data) : data;
  const prefix = Buffer.alloc(5);
  prefix[0] = flag;
  prefix.writeUInt32BE(length ?? body.length, 1);
  return Buffer.concat([prefix, body]);
}

const listed = (bytes: Buffer, complete: boolean, max?: number) => {
  const f = grpcMessages(bytes, complete, max);
  return { ...f, messages: f.messages.map((m) => [m.offset, m.compressed, m.length, Buffer.from(m.data).toString('latin1')]) };
};

test('messages in order, with their flag, declared length and bytes; a zero-length message is one too', () => {
  const body = Buffer.concat([frame('hello'), frame(''), frame('zz', 1)]);
  assert.equal(listed(body, true), {
    messages: [
      [0, false, 5, 'hello'],
      [10, false, 0, ''],
      [15, true, 2, 'zz'],
    ],
    more: 0,
    cut: false,
    error: null,
  });
  assert.equal(listed(Buffer.alloc(0), true), { messages: [], more: 0, cut: false, error: null });
});

test('a truncated prefix: an error in a whole body, the capture\'s cut in a longer one', () => {
  const body = Buffer.concat([frame('ok'), Buffer.from([0, 0, 0])]);
  const whole = listed(body, true);
  assert.equal(whole.messages, [[0, false, 2, 'ok']]);
  assert.is(whole.error, 'byte 7: 3 bytes left, short of a 5-byte message prefix');
  assert.is(whole.cut, false);
  const cut = listed(body, false);
  assert.is(cut.error, null);
  assert.is(cut.cut, true);
  assert.is(listed(Buffer.from([0]), true).error, 'byte 0: 1 byte left, short of a 5-byte message prefix');
});

test('a length beyond the captured bytes: the part that is there, and why it stops', () => {
  // Declares 4 GiB - 1 with 3 bytes after it: nothing is read or allocated past the buffer.
  const body = frame('abc', 0, 0xffffffff);
  const whole = listed(body, true);
  assert.equal(whole.messages, [[0, false, 0xffffffff, 'abc']]);
  assert.is(whole.error, 'byte 0: a message of 4294967295 bytes, but 3 follow');
  const cut = listed(body, false);
  assert.equal(cut.messages, [[0, false, 0xffffffff, 'abc']]);
  assert.is(cut.cut, true);
  assert.is(cut.error, null);
});

test('a flag other than 0 or 1 ends the listing: what follows is not framing', () => {
  const body = Buffer.concat([frame('a'), Buffer.from('HTTP/1.1 200 OK\r\n')]);
  const f = listed(body, true);
  assert.equal(f.messages, [[0, false, 1, 'a']]);
  assert.is(f.error, "byte 6: a message's compressed flag is 0 or 1, not 72");
  // grpc-web's trailer frame (0x80) is not gRPC's.
  assert.match(listed(frame('grpc-status: 0', 0x80), true).error ?? '', /not 128/);
});

test('past the listing bound the rest is counted, not listed', () => {
  const body = Buffer.concat(Array.from({ length: 25 }, () => frame('')));
  const f = listed(body, true, 10);
  assert.is(f.messages.length, 10);
  assert.is(f.more, 15);
  assert.is(f.error, null);
  // A whole 64 KiB capture of empty messages stays bounded.
  assert.is(grpcMessages(Buffer.alloc(64 * 1024 - 1), false).messages.length, 1000);
});

test('gRPC content types; grpc-web and look-alikes are not', () => {
  for (const v of ['application/grpc', 'application/grpc+proto', 'Application/GRPC+json', 'application/grpc; charset=x']) assert.ok(isGrpcContentType(v), v);
  for (const v of ['application/grpc-web', 'application/grpc-web+proto', 'application/grpcx', 'application/json', '', undefined, null]) assert.not.ok(isGrpcContentType(v), String(v));
});

test('printable: ASCII as itself, other bytes as dots', () => {
  assert.is(printable(Buffer.from([0x41, 0x00, 0x7f, 0x20, 0xff, 0x7e])), 'A.. .~');
});

test.run();
