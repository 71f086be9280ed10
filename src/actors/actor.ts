import type { MessagePort, Worker } from 'node:worker_threads';
import { decodeEach, encode } from '../protocol/codec.js';
import { ApiError, fromCodedError, toCodedError, type CodedError } from '../errors.js';

//   thread A                                 thread B
//   Mailbox.tell(msg) ──msgpack bytes──▶  handler(msg)
//   Mailbox.ask(msg, timeout) ─────────▶  handler(msg) → value | throw
//                          ◀── reply {ok,v} | {ok:false,e:{code,detail}}
//
// Every message between threads goes through here: msgpack-encoded into an exact-size
// ArrayBuffer that is transferred (not cloned). Cloning a view would copy its whole
// backing buffer; transferring costs nothing. MessagePorts themselves (for the shard
// mesh) are the one thing that cannot be msgpack and travel as `attach` messages.

/** A batch of tells is posted early once it holds this much. */
const BATCH_FLUSH_BYTES = 64 * 1024;

type Envelope<M> =
  | { k: 't'; m: M }
  | { k: 'a'; id: number; m: M }
  | { k: 'r'; id: number; ok: true; v: unknown }
  | { k: 'r'; id: number; ok: false; e: CodedError };

export interface PortLike {
  postMessage(value: unknown, transfer?: readonly (ArrayBuffer | MessagePort)[]): void;
  on(event: 'message', listener: (value: unknown) => void): unknown;
  off(event: 'message', listener: (value: unknown) => void): unknown;
}

export type Handler<In> = (msg: In) => unknown;

interface Pending {
  resolve(v: unknown): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/** Attachments: a MessagePort with a small plain description, outside the msgpack path. */
export interface Attachment {
  attach: string;
  port: MessagePort;
  meta: Record<string, unknown>;
}

/**
 * One end of a typed channel. `Out` is what this side sends, `In` what it receives.
 * The handler runs one message at a time on this thread's event loop; its return
 * value (or promise) answers an ask.
 */
export class Mailbox<Out, In> {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private handler: Handler<In> = () => undefined;
  private attachHandler: (a: Attachment) => void = () => undefined;
  private closed = false;
  private readonly onMessage = (raw: unknown): void => this.receive(raw);
  /** Tells of this loop turn, already encoded (a message may hold views valid only now). */
  private batch: Buffer[] | null = null;
  private batchBytes = 0;
  private batchScheduled = false;
  private readonly flushBatch = (): void => {
    const parts = this.batch;
    const bytes = this.batchBytes;
    this.batch = null;
    this.batchBytes = 0;
    if (parts && !this.closed) this.transfer(parts, bytes);
  };
  private readonly endOfTurn = (): void => {
    this.batchScheduled = false;
    this.flushBatch();
  };

  /**
   * batchTells: the tells of one loop turn travel as one message (posted from setImmediate).
   * A postMessage costs microseconds and a wake-up of the other thread, so a channel that
   * carries many small messages under load (the shard mesh) sends one per turn instead.
   */
  constructor(
    private readonly port: PortLike,
    private readonly opts: { batchTells?: boolean } = {},
  ) {
    port.on('message', this.onMessage);
  }

  handle(handler: Handler<In>): this {
    this.handler = handler;
    return this;
  }

  onAttach(handler: (a: Attachment) => void): this {
    this.attachHandler = handler;
    return this;
  }

  tell(msg: Out): void {
    if (this.closed) return;
    if (!this.opts.batchTells) return this.post({ k: 't', m: msg });
    const packed = encode({ k: 't', m: msg } satisfies Envelope<Out>);
    if (this.batch) this.batch.push(packed);
    else this.batch = [packed];
    this.batchBytes += packed.byteLength;
    // Bulk bytes go at once: the peer starts on them while this thread reads more.
    if (this.batchBytes >= BATCH_FLUSH_BYTES) return this.flushBatch();
    if (this.batchScheduled) return;
    this.batchScheduled = true;
    setImmediate(this.endOfTurn);
  }

  ask<R = unknown>(msg: Out, timeoutMs: number): Promise<R> {
    if (this.closed) return Promise.reject(new ApiError('unavailable', 'peer thread is gone'));
    const id = this.nextId++;
    return new Promise<R>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ApiError('unavailable', `no answer from peer thread within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      this.post({ k: 'a', id, m: msg });
    });
  }

  attach(attach: string, port: MessagePort, meta: Record<string, unknown> = {}): void {
    this.port.postMessage({ attach, port, meta } satisfies Attachment, [port]);
  }

  /** Fails every outstanding ask (the peer died) and stops listening. */
  close(reason = 'peer thread is gone'): void {
    if (this.closed) return;
    this.closed = true;
    this.batch = null;
    this.port.off('message', this.onMessage);
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new ApiError('unavailable', reason));
      this.pending.delete(id);
    }
  }

  /** Anything but a batched tell: waiting tells go first, so the peer sees the order we sent. */
  private post(env: Envelope<Out>): void {
    if (this.batch) this.flushBatch();
    this.postNow(env);
  }

  private postNow(env: Envelope<Out>): void {
    const packed = encode(env);
    this.transfer([packed], packed.byteLength);
  }

  /** Packed envelopes, back to back, in one exact-size buffer that is transferred. */
  private transfer(parts: Buffer[], bytes: number): void {
    const exact = new Uint8Array(bytes);
    let at = 0;
    for (const p of parts) {
      exact.set(p, at);
      at += p.byteLength;
    }
    this.port.postMessage(exact, [exact.buffer]);
  }

  private receive(raw: unknown): void {
    if (!(raw instanceof Uint8Array)) {
      if (raw && typeof raw === 'object' && 'attach' in raw) this.attachHandler(raw as Attachment);
      return;
    }
    // One envelope, or a batch of tells back to back.
    decodeEach(raw, (value) => {
      if (!this.closed) this.receiveOne(value as Envelope<In>);
    });
  }

  private receiveOne(env: Envelope<In>): void {
    switch (env.k) {
      case 't':
        this.run(env.m, undefined);
        return;
      case 'a':
        this.run(env.m, env.id);
        return;
      case 'r': {
        const p = this.pending.get(env.id);
        if (!p) return; // answered after its timeout: dropped on purpose
        this.pending.delete(env.id);
        clearTimeout(p.timer);
        if (env.ok) p.resolve(env.v);
        else p.reject(fromCodedError(env.e));
        return;
      }
    }
  }

  private run(msg: In, replyId: number | undefined): void {
    let result: unknown;
    try {
      result = this.handler(msg);
    } catch (err) {
      if (replyId !== undefined) this.post({ k: 'r', id: replyId, ok: false, e: toCodedError(err) });
      return;
    }
    if (replyId === undefined) {
      if (result instanceof Promise) result.catch(() => undefined);
      return;
    }
    Promise.resolve(result).then(
      (v) => !this.closed && this.post({ k: 'r', id: replyId, ok: true, v: v ?? null }),
      (err) => !this.closed && this.post({ k: 'r', id: replyId, ok: false, e: toCodedError(err) }),
    );
  }
}

export function mailboxOfWorker<Out, In>(w: Worker): Mailbox<Out, In> {
  return new Mailbox<Out, In>(w as unknown as PortLike);
}
