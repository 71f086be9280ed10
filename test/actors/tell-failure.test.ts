import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MessageChannel } from 'node:worker_threads';
import { Mailbox, tellFailureLogger, type PortLike, type TellFailure } from '../../src/actors/actor.js';
import type { Logger } from '../../src/log.js';

// A failing tell is reported, never dropped silently: `tell` returns why it did not leave and
// the mailbox's onTellFailure hook hears of it with the message type, on the side where it
// failed (sending: closed, encode, post; receiving: the handler threw or rejected).

type Msg = { type: 'note'; v: unknown } | { type: 'boom' } | { type: 'reject' } | { type: 'echo'; v: unknown };
type NoReplies = Record<never, never>;
interface EchoReplies {
  echo: unknown;
}

function pair(opts: { batchTells?: boolean } = {}) {
  const { port1, port2 } = new MessageChannel();
  const sent: TellFailure[] = [];
  const received: TellFailure[] = [];
  const a = new Mailbox<Msg, Msg, EchoReplies>(port1 as unknown as PortLike, { ...opts, onTellFailure: (f) => sent.push(f) });
  const b = new Mailbox<Msg, Msg, NoReplies>(port2 as unknown as PortLike, { onTellFailure: (f) => received.push(f) });
  return { a, b, sent, received, port1, port2, close: () => (port1.close(), port2.close()) };
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));
async function until(what: string, ok: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

test('a tell on a closed mailbox returns closed and is reported with its type', () => {
  const { a, sent, close } = pair();
  assert.equal(a.tell({ type: 'note', v: 1 }), { ok: true });
  a.close();
  const r = a.tell({ type: 'note', v: 2 });
  assert.is(r.ok, false);
  assert.equal(sent, [{ reason: 'closed', type: 'note', side: 'send' }]);
  close();
});

test('an unencodable tell returns encode, is reported, and the mailbox goes on', async () => {
  const { a, b, sent, close } = pair();
  const got: unknown[] = [];
  b.handle((m) => void (m.type === 'note' && got.push(m.v)));
  const r = a.tell({ type: 'note', v: 2n ** 70n });
  assert.is(r.ok, false);
  assert.is(!r.ok && r.reason, 'encode');
  assert.is(sent.length, 1);
  assert.is(sent[0]!.type, 'note');
  assert.match(String((sent[0]!.error as Error).message), /too large/);
  assert.ok(a.tell({ type: 'note', v: 3 }).ok);
  await until('the next tell', () => got.length === 1);
  assert.equal(got, [3]);
  close();
});

test('batched: encode fails at once; tells still batched when the mailbox closes are reported', async () => {
  const { a, sent, close } = pair({ batchTells: true });
  assert.is(a.tell({ type: 'note', v: 2n ** 70n }).ok, false);
  assert.ok(a.tell({ type: 'note', v: 1 }).ok);
  assert.ok(a.tell({ type: 'boom' }).ok);
  a.close('test');
  assert.equal(
    sent.map((f) => `${f.reason} ${f.type}`),
    ['encode note', 'closed note', 'closed boom'],
  );
  await turn();
  assert.is(sent.length, 3, 'the end of the turn posts nothing more');
  close();
});

test('the other end closing its port closes the mailbox: later tells report closed, asks fail at once', async () => {
  const { a, port2, sent } = pair();
  port2.close();
  await until('the close event', () => a.isClosed);
  assert.is(a.tell({ type: 'note', v: 1 }).ok, false);
  assert.equal(sent, [{ reason: 'closed', type: 'note', side: 'send' }]);
  try {
    await a.ask({ type: 'echo', v: 1 }, 5_000);
    assert.unreachable();
  } catch (e) {
    assert.match(String((e as Error).message), /unavailable/);
  }
});

test('a port that refuses the post: the tell returns post', () => {
  const { port1, port2 } = new MessageChannel();
  const sent: TellFailure[] = [];
  const refusing = {
    postMessage() {
      throw new Error('DataCloneError');
    },
    on: port1.on.bind(port1),
    off: port1.off.bind(port1),
  } as unknown as PortLike;
  const a = new Mailbox<Msg, Msg, NoReplies>(refusing, { onTellFailure: (f) => sent.push(f) });
  const r = a.tell({ type: 'note', v: 1 });
  assert.is(!r.ok && r.reason, 'post');
  assert.is(sent[0]!.type, 'note');
  port1.close();
  port2.close();
});

test('the receiving handler throwing or rejecting on a tell is reported there, with the type', async () => {
  const { a, b, received, close } = pair();
  b.handle((m) => {
    if (m.type === 'boom') throw new Error('handler blew up');
    if (m.type === 'reject') return Promise.reject(new Error('async failure'));
    return undefined;
  });
  a.tell({ type: 'boom' });
  a.tell({ type: 'reject' });
  await until('two reports', () => received.length === 2);
  assert.equal(
    received.map((f) => `${f.side} ${f.reason} ${f.type} ${(f.error as Error).message}`),
    ['receive handler boom handler blew up', 'receive handler reject async failure'],
  );
  close();
});

test('an answer that cannot be encoded reaches the asker as an internal error, not a crash', async () => {
  const { a, b, close } = pair();
  b.handle((m) => (m.type === 'echo' ? { big: 2n ** 70n } : undefined));
  try {
    await a.ask({ type: 'echo', v: null }, 1000);
    assert.unreachable();
  } catch (e) {
    assert.match(String((e as Error).message), /^internal: the answer could not be sent/);
  }
  close();
});

test('the default hook logs the message type, throttled per (reason, type) with a count', () => {
  const lines: { obj: Record<string, unknown>; msg: string }[] = [];
  const log = { warn: (obj: Record<string, unknown>, msg: string) => lines.push({ obj, msg }) } as unknown as Logger;
  const hook = tellFailureLogger(() => log, 60_000);
  for (let i = 0; i < 5; i++) hook({ reason: 'closed', type: 'tunnel-stats', side: 'send' });
  hook({ reason: 'closed', type: 'tunnel-down', side: 'send' });
  assert.is(lines.length, 2);
  assert.is(lines[0]!.obj.type, 'tunnel-stats');
  assert.match(lines[0]!.msg, /"tunnel-stats" tell failed \(closed\)/);
  assert.is(lines[1]!.obj.type, 'tunnel-down');
  const next = tellFailureLogger(() => log, 0);
  next({ reason: 'encode', type: 'x', side: 'send' });
  next({ reason: 'encode', type: 'x', side: 'send' });
  assert.is(lines.length, 4, 'nothing is throttled with a zero interval');
});

test.run();
