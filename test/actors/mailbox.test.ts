import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MessageChannel } from 'node:worker_threads';
import { EventEmitter } from 'node:events';
import { Mailbox, RAW_TAG, type PortLike } from '../../src/actors/actor.js';
import { ApiError } from '../../src/errors.js';

type Msg = { type: 'echo'; v: unknown } | { type: 'fail' } | { type: 'slow' } | { type: 'note'; v: number };

function pair(opts: { batchTells?: boolean } = {}) {
  const { port1, port2 } = new MessageChannel();
  const a = new Mailbox<Msg, Msg>(port1 as unknown as PortLike, opts);
  const b = new Mailbox<Msg, Msg>(port2 as unknown as PortLike);
  return { a, b, close: () => (port1.close(), port2.close()) };
}

test('ask answers with the handler value, binary payloads intact', async () => {
  const { a, b, close } = pair();
  b.handle((m) => (m.type === 'echo' ? m.v : null));
  const bytes = Buffer.from([0, 1, 2, 255]);
  const v = await a.ask<{ s: string; b: Uint8Array; n: number }>({ type: 'echo', v: { s: 'é', b: bytes, n: 2 ** 40 } }, 1000);
  assert.is(v.s, 'é');
  assert.equal([...v.b], [0, 1, 2, 255]);
  assert.is(v.n, 2 ** 40);
  close();
});

test('a coded error crosses threads as {code, detail}', async () => {
  const { a, b, close } = pair();
  b.handle(() => {
    throw new ApiError('conflict', 'id taken');
  });
  try {
    await a.ask({ type: 'fail' }, 1000);
    assert.unreachable();
  } catch (e) {
    assert.instance(e, ApiError);
    assert.is((e as ApiError).code, 'conflict');
    assert.is((e as ApiError).detail, 'id taken');
  }
  close();
});

test('an unanswered ask fails after its timeout with unavailable', async () => {
  const { a, b, close } = pair();
  b.handle(() => new Promise(() => undefined));
  const t0 = Date.now();
  try {
    await a.ask({ type: 'slow' }, 100);
    assert.unreachable();
  } catch (e) {
    assert.is((e as ApiError).code, 'unavailable');
    assert.ok(Date.now() - t0 >= 95);
  }
  close();
});

test('close fails every outstanding ask at once', async () => {
  const { a, b, close } = pair();
  b.handle(() => new Promise(() => undefined));
  const p = a.ask({ type: 'slow' }, 10_000);
  a.close('peer died');
  try {
    await p;
    assert.unreachable();
  } catch (e) {
    assert.is((e as ApiError).detail, 'peer died');
  }
  close();
});

test('tells arrive in order', async () => {
  const { a, b, close } = pair();
  const seen: number[] = [];
  const done = new Promise<void>((resolve) =>
    b.handle((m) => {
      if (m.type === 'note') seen.push(m.v);
      if (seen.length === 100) resolve();
    }),
  );
  for (let i = 0; i < 100; i++) a.tell({ type: 'note', v: i });
  await done;
  assert.equal(seen, [...Array(100).keys()]);
  close();
});

test('batched tells: one message per loop turn, in order with asks', async () => {
  const { a, b, close } = pair({ batchTells: true });
  const seen: unknown[] = [];
  b.handle((m) => {
    if (m.type === 'note') seen.push(m.v);
    if (m.type === 'echo') return seen.slice();
  });
  for (let i = 0; i < 50; i++) a.tell({ type: 'note', v: i });
  // An ask goes out after the tells queued before it.
  const before = await a.ask<number[]>({ type: 'echo', v: null }, 1000);
  assert.equal(before, [...Array(50).keys()]);
  for (let i = 50; i < 100; i++) a.tell({ type: 'note', v: i });
  const posted: number[] = [];
  const port = (a as unknown as { port: { postMessage(v: unknown, t?: unknown): void } }).port;
  const post = port.postMessage.bind(port);
  port.postMessage = (v, t) => (posted.push((v as Uint8Array).byteLength), post(v, t));
  for (let i = 100; i < 150; i++) a.tell({ type: 'note', v: i });
  const after = await a.ask<number[]>({ type: 'echo', v: null }, 1000);
  assert.equal(after, [...Array(150).keys()]);
  assert.is(posted.length, 2, 'the 50 tells of one turn went as one message, then the ask');
  close();
});

test('a batched tell carries the bytes it was given, not what the buffer holds later', async () => {
  const { a, b, close } = pair({ batchTells: true });
  const got = new Promise<Uint8Array>((resolve) => b.handle((m) => m.type === 'echo' && resolve(m.v as Uint8Array)));
  const scratch = new Uint8Array([1, 2, 3]);
  a.tell({ type: 'echo', v: scratch });
  scratch.fill(9);
  assert.equal([...(await got)], [1, 2, 3]);
  close();
});

/** Tells (their `v`) and raw messages (their payload as text) in the order `b` got them. */
function collect(b: Mailbox<Msg, Msg>): string[] {
  const seen: string[] = [];
  b.handle((m) => void (m.type === 'note' && seen.push(`tell ${m.v}`)));
  b.onRaw((raw) => seen.push(`raw ${Buffer.from(raw.subarray(2)).toString()}`));
  return seen;
}

const rawHead = Buffer.from([RAW_TAG, 7]);

test('raw messages keep their place among batched tells, whole, and copied from the sender\'s buffer', async () => {
  const { a, b, close } = pair({ batchTells: true });
  const seen = collect(b);
  a.tell({ type: 'note', v: 1 });
  a.tell({ type: 'note', v: 2 });
  const payload = Buffer.from('bulk');
  a.postRaw(rawHead, payload);
  payload.fill(0);
  a.tell({ type: 'note', v: 3 });
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(seen, ['tell 1', 'tell 2', 'raw bulk', 'tell 3']);
  close();
});

test('a port with postParts gets a raw message as its two parts, after the batch before it', () => {
  const posted: string[] = [];
  const port = Object.assign(new EventEmitter(), {
    postMessage: (v: unknown) => void posted.push(`batch of ${(v as Uint8Array).byteLength}`),
    postParts: (head: Uint8Array, payload: Uint8Array) => void posted.push(`parts ${head[0]} ${Buffer.from(payload).toString()}`),
  });
  const a = new Mailbox<Msg, Msg>(port as unknown as PortLike, { batchTells: true });
  a.tell({ type: 'note', v: 1 });
  a.postRaw(rawHead, Buffer.from('bulk'));
  assert.is(posted.length, 2);
  assert.match(posted[0]!, /^batch of \d+$/);
  assert.is(posted[1], `parts ${RAW_TAG} bulk`);
  a.close();
  assert.is(a.postRaw(rawHead, Buffer.from('late')).ok, false, 'a closed mailbox sends nothing');
});

test.run();
