import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import fc from 'fast-check';
import '../helpers/property.js';
import { FrontConnection, type Exchange, type FrontHost } from '../../src/edge/front-connection.js';
import type { VisitorResponse } from '../../src/edge/visitor-response.js';
import type { RequestHead } from '../../src/protocol/http1-parser.js';
import { createLogger } from '../../src/log.js';

// The front's connection state machine in process, on a fake socket: fast-check sequences of a
// visitor's bytes (pipelined requests, valid and broken, cut anywhere), its FIN, the socket's
// close, and the answers of whoever serves each request, in any order. Whatever the order:
// nothing throws; one request at a time reaches the host, each told its end or abort once;
// what goes out is one well-formed answer per request in order, never after the socket ended;
// and a FIN with every answer given ends the connection. (test/edge/property.test.ts attacks
// the same code from outside, through real sockets and a real burrowd.)

/** The parts of a net.Socket FrontConnection, VisitorResponse and SendTimeout use. */
class FakeSocket extends EventEmitter {
  out: Buffer[] = [];
  ended = false;
  destroyed = false;
  paused = false;
  writableLength = 0;
  writableNeedDrain = false;
  bytesWritten = 0;
  writtenAfterEnd = 0;
  setNoDelay(): this {
    return this;
  }
  cork(): void {}
  uncork(): void {}
  pause(): this {
    this.paused = true;
    return this;
  }
  resume(): this {
    this.paused = false;
    return this;
  }
  write(chunk: string | Uint8Array, enc?: BufferEncoding): boolean {
    if (this.ended || this.destroyed) this.writtenAfterEnd++;
    const b = typeof chunk === 'string' ? Buffer.from(chunk, enc ?? 'utf8') : Buffer.from(chunk);
    this.out.push(b);
    this.bytesWritten += b.length;
    return true;
  }
  end(): this {
    this.ended = true;
    return this;
  }
  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    queueMicrotask(() => this.emit('close'));
    return this;
  }
  get writableEnded(): boolean {
    return this.ended;
  }
}

interface Served {
  head: RequestHead;
  response: VisitorResponse;
  ended: number;
  aborted: number;
  answered: boolean;
}

const log = createLogger('silent');
const flush = () => new Promise<void>((r) => setImmediate(r));

/** A request as bytes: valid ones of each framing, and two the parser refuses. */
const request = fc.oneof(
  fc.constant('GET /a HTTP/1.1\r\nHost: t.localhost\r\n\r\n'),
  fc.constant('POST /b HTTP/1.1\r\nHost: t.localhost\r\nContent-Length: 5\r\n\r\nhello'),
  fc.constant('POST /c HTTP/1.1\r\nHost: t.localhost\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n'),
  fc.constant('GET /d HTTP/1.0\r\nHost: t.localhost\r\n\r\n'),
  fc.constant('GET /e HTTP/1.1\r\nHost: t.localhost\r\nConnection: close\r\n\r\n'),
  fc.constant('GET /f HTTP/1.1\r\nHost: t.localhost\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n'),
  fc.constant('G\x00T / HTTP/1.1\r\n\r\n'),
);

type Step = { kind: 'bytes'; n: number } | { kind: 'answer'; chunked: boolean } | { kind: 'fin' } | { kind: 'close' } | { kind: 'tick' };
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 5, arbitrary: fc.integer({ min: 1, max: 40 }).map((n): Step => ({ kind: 'bytes', n })) },
  { weight: 4, arbitrary: fc.boolean().map((chunked): Step => ({ kind: 'answer', chunked })) },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'fin' }) },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'close' }) },
  { weight: 2, arbitrary: fc.constant<Step>({ kind: 'tick' }) },
);

/** The status codes of the answers in `out`, in order (each answer's head starts a line with HTTP/1.1). */
function statuses(out: string): number[] {
  return [...out.matchAll(/(?:^|\r\n)HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
}

test('any order of bytes, FIN, close and answers: one request at a time, each answered once in order, nothing after the end', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 4 }), fc.array(step, { maxLength: 40 }), async (requests, steps) => {
      const socket = new FakeSocket();
      const served: Served[] = [];
      let concurrent = 0;
      let maxConcurrent = 0;
      const host: FrontHost = {
        log,
        exchange(_conn, head, response): Exchange {
          const s: Served = { head, response, ended: 0, aborted: 0, answered: false };
          served.push(s);
          concurrent++;
          maxConcurrent = Math.max(maxConcurrent, concurrent);
          return {
            requestBody() {
              assert.is(s.ended + s.aborted, 0, 'body after the end or an abort');
            },
            requestEnd() {
              s.ended++;
            },
            abort() {
              s.aborted++;
              concurrent--;
            },
          };
        },
      };
      const conn = new FrontConnection(socket as unknown as Socket, '127.0.0.1', host);
      const wire = Buffer.from(requests.join(''), 'latin1');
      let fed = 0;
      let finned = false;
      const answer = (chunked: boolean): void => {
        const s = served.find((x) => !x.answered && x.aborted === 0);
        if (!s) return;
        s.answered = true;
        if (s.ended === 1) concurrent--;
        if (chunked) {
          s.response.head(200, ['X-Seq', String(served.indexOf(s))], null);
          s.response.body(Buffer.from('ok'));
          s.response.end();
        } else {
          s.response.head(200, ['X-Seq', String(served.indexOf(s))], 2);
          s.response.body(Buffer.from('ok'));
        }
      };
      for (const st of steps) {
        if (socket.destroyed) break;
        if (st.kind === 'bytes' && fed < wire.length && !finned) {
          const piece = wire.subarray(fed, Math.min(wire.length, fed + st.n));
          fed += piece.length;
          socket.emit('data', piece);
        } else if (st.kind === 'answer') answer(st.chunked);
        else if (st.kind === 'fin' && !finned) {
          finned = true;
          socket.emit('end');
        } else if (st.kind === 'close') socket.destroy();
        else if (st.kind === 'tick') await flush();
      }
      // Whatever is still open gets its answers, then the visitor finishes.
      for (let i = 0; i < 8 && !socket.destroyed; i++) {
        answer(false);
        await flush();
      }
      if (!finned && !socket.destroyed) {
        socket.emit('end');
        await flush();
        for (let i = 0; i < 8 && !socket.destroyed; i++) {
          answer(false);
          await flush();
        }
      }
      await flush();

      assert.ok(maxConcurrent <= 1, `${maxConcurrent} requests at once on one connection`);
      for (const s of served) assert.ok(s.ended <= 1 && s.aborted <= 1, `end ${s.ended} abort ${s.aborted}`);
      assert.is(socket.writtenAfterEnd, 0, 'bytes written after the socket ended');
      // The answers on the wire: the served ones (200) in order, then at most one refusal
      // (4xx/5xx) that closes the connection.
      const got = statuses(Buffer.concat(socket.out).toString('latin1'));
      const ok = got.filter((c) => c === 200).length;
      assert.ok(ok <= served.length, `${ok} answers for ${served.length} requests`);
      const firstRefusal = got.findIndex((c) => c !== 200);
      if (firstRefusal >= 0) assert.is(firstRefusal, got.length - 1, `an answer after a refusal: ${got.join(',')}`);
      const seq = [...Buffer.concat(socket.out).toString('latin1').matchAll(/X-Seq: (\d+)/g)].map((m) => Number(m[1]));
      assert.equal(seq, [...seq].sort((a, b) => a - b), 'answers out of order');
      // Every request read whole and answered, and the FIN seen: the connection ended.
      if (!socket.destroyed && served.every((s) => s.answered || s.aborted)) assert.ok(socket.ended, 'a finished visitor left a connection open');
      conn.release();
      socket.destroy();
      await flush();
    }),
    { numRuns: 300 },
  );
});

test('pipelined requests wait for the answer before them, and reading pauses while they wait', async () => {
  const socket = new FakeSocket();
  const served: Served[] = [];
  const host: FrontHost = {
    log,
    exchange(_conn, head, response) {
      served.push({ head, response, ended: 0, aborted: 0, answered: false });
      return { requestBody() {}, requestEnd() {}, abort() {} };
    },
  };
  const conn = new FrontConnection(socket as unknown as Socket, '127.0.0.1', host);
  socket.emit('data', Buffer.from('GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n'));
  assert.equal(served.map((s) => s.head.target), ['/1']);
  assert.ok(socket.paused, 'reading goes on while a pipelined request waits');
  served[0]!.response.head(200, [], 0);
  assert.equal(served.map((s) => s.head.target), ['/1', '/2']);
  served[1]!.response.head(204, [], null);
  await flush();
  assert.equal(statuses(Buffer.concat(socket.out).toString('latin1')), [200, 204]);
  assert.not.ok(socket.paused);
  conn.release();
  socket.destroy();
});

test('an upgrade refused after the exchange took the socket over: the answer goes out, then the socket ends', async () => {
  const socket = new FakeSocket();
  const later: { refuse?: () => void } = {};
  const host: FrontHost = {
    log,
    exchange(conn, _head, response) {
      return {
        requestBody() {},
        requestEnd() {},
        abort() {},
        upgraded() {
          // As the control handshake does: the socket is taken, the key checked later.
          conn.detach();
          later.refuse = () => {
            response.closeAfter();
            response.problem('unauthorized', 'no such key');
          };
        },
      };
    },
  };
  const conn = new FrontConnection(socket as unknown as Socket, '127.0.0.1', host);
  socket.emit('data', Buffer.from('GET /tunnel HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n'));
  assert.ok(later.refuse, 'the exchange took the upgrade');
  await flush();
  later.refuse!();
  await flush();
  assert.equal(statuses(Buffer.concat(socket.out).toString('latin1')), [401]);
  assert.ok(socket.ended, 'the refused connection is left open');
  assert.is(socket.writtenAfterEnd, 0);
  conn.release();
  socket.destroy();
});

test.run();
