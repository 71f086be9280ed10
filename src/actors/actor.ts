import type { MessagePort, Worker } from 'node:worker_threads';
import { decodeEach, encode } from '../protocol/codec.js';
import { ApiError, fromCodedError, toCodedError, type CodedError } from '../errors.js';
import type { RepliesOf } from '../protocol/messages.js';
import { createLogger, type Logger } from '../log.js';

//   thread A                                 thread B
//   Mailbox.tell(msg) ──msgpack bytes──▶  handler(msg)
//     → TellResult; a failure (closed, encode, post, or the peer's handler threw) → onTellFailure
//   Mailbox.ask(msg, timeout) ─────────▶  handler(msg) → value | throw
//     → Promise<Replies[msg.type]>  ◀── reply {ok,v} | {ok:false,e:{code,detail}}
//
// A channel's request → reply map (protocol/messages.ts: ShardToMainReplies, MainToShardReplies)
// types `ask`: the reply type follows from `msg.type`, so a caller cannot claim another one.
//
// Every message between threads goes through here: msgpack-encoded into an exact-size
// ArrayBuffer that is transferred (not cloned). Cloning a view would copy its whole
// backing buffer; transferring costs nothing. MessagePorts themselves (for the shard
// mesh) are the one thing that cannot be msgpack and travel as `attach` messages. Bulk bytes
// may go beside the msgpack as raw messages (postRaw / onRaw, first byte RAW_TAG).

/** A batch of tells is posted early once it holds this much. */
const BATCH_FLUSH_BYTES = 64 * 1024;

/**
 * The first byte of a raw message (Mailbox.postRaw): bulk bytes that travel beside the msgpack
 * batches instead of inside them. 0xc1 is the one byte msgpack never uses, so no batch or
 * envelope starts with it.
 */
export const RAW_TAG = 0xc1;

type Envelope<M> =
  | { k: 't'; m: M }
  | { k: 'a'; id: number; m: M }
  | { k: 'r'; id: number; ok: true; v: unknown }
  | { k: 'r'; id: number; ok: false; e: CodedError };

export interface PortLike {
  postMessage(value: unknown, transfer?: readonly (ArrayBuffer | MessagePort)[]): void;
  on(event: 'message', listener: (value: unknown) => void): unknown;
  off(event: 'message' | 'close', listener: (value: unknown) => void): unknown;
  /** MessagePort: 'close' once the other end is gone (a Worker never emits it) */
  once?(event: 'close', listener: () => void): unknown;
  /**
   * A port that writes to a socket (a cluster link): sends `head` then `payload` as one message
   * without joining them, so a raw message's payload is not copied. Without it, postRaw copies
   * both into one transferred buffer.
   */
  postParts?(head: Uint8Array, payload: Uint8Array): void;
}

export type Handler<In> = (msg: In) => unknown;

/** Message types of `Out` that are asked: they have a reply in `Replies`. */
export type AskType<Out, Replies> = Extract<TypeOf<Out>, keyof Replies>;
type TypeOf<M> = M extends { type: infer T } ? T : never;

/**
 * Why a tell went nowhere. On the sending side: `closed` (the peer is gone, or the mailbox was
 * closed with the tell still batched), `encode` (msgpack refused the message), `post` (the port
 * refused it). On the receiving side: `handler` (the handler threw or its promise rejected:
 * nobody waits for a tell's outcome, so this is where it is seen).
 */
export type TellFailureReason = 'closed' | 'encode' | 'post' | 'handler';

export interface TellFailure {
  reason: TellFailureReason;
  /** the message's `type` ('?' when it has none) */
  type: string;
  side: 'send' | 'receive';
  error?: unknown;
}

/** What `tell` returns: sent (handed to the port, or to this turn's batch), or why not. */
export type TellResult = { ok: true } | ({ ok: false } & TellFailure);
const TELL_OK: TellResult = Object.freeze({ ok: true });

export type TellFailureHook = (failure: TellFailure) => void;

/** The same failure (reason, side, type) is logged at most this often; the rest are counted. */
const TELL_FAILURE_LOG_EVERY_MS = 10_000;

/**
 * The default onTellFailure: a warning naming the message type, at most one per
 * TELL_FAILURE_LOG_EVERY_MS for each (reason, side, type), with how many it stood for (a peer
 * that went away takes many tells with it).
 */
export function tellFailureLogger(log: () => Logger, everyMs = TELL_FAILURE_LOG_EVERY_MS): TellFailureHook {
  const seen = new Map<string, { at: number; suppressed: number }>();
  return (f) => {
    const key = `${f.side} ${f.reason} ${f.type}`;
    const now = Date.now();
    const s = seen.get(key);
    if (s && now - s.at < everyMs) {
      s.suppressed++;
      return;
    }
    const suppressed = s?.suppressed ?? 0;
    seen.set(key, { at: now, suppressed: 0 });
    const err = f.error instanceof Error ? f.error.message : f.error;
    log().warn({ type: f.type, reason: f.reason, side: f.side, err, ...(suppressed ? { alsoFailedSinceLastReport: suppressed } : {}) }, `mailbox: a "${f.type}" tell failed (${f.reason})`);
  };
}

let defaultLog: Logger | null = null;
/** Mailboxes without a hook of their own log here (this thread's one lazily made logger). */
const defaultTellFailureHook = tellFailureLogger(() => (defaultLog ??= createLogger('warn', { part: 'mailbox' })));

function typeOf(msg: unknown): string {
  const t = (msg as { type?: unknown } | null)?.type;
  return typeof t === 'string' ? t : '?';
}

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

export interface MailboxOptions {
  /** the tells of one loop turn travel as one message (see the constructor) */
  batchTells?: boolean;
  /** told of every tell that failed, either side (default: a throttled warning on this thread's log) */
  onTellFailure?: TellFailureHook;
}

/**
 * One end of a typed channel. `Out` is what this side sends, `In` what it receives, `Replies`
 * what the peer answers each asked message type (by default the map declared for `Out` in
 * protocol/messages.ts). The handler runs one message at a time on this thread's event loop;
 * its return value (or promise) answers an ask.
 */
export class Mailbox<Out, In, Replies = RepliesOf<Out>> {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private handler: Handler<In> = () => undefined;
  private rawHandler: (raw: Uint8Array) => void = () => undefined;
  private attachHandler: (a: Attachment) => void = () => undefined;
  private closed = false;
  private readonly onMessage = (raw: unknown): void => this.receive(raw);
  /** Tells of this loop turn, already encoded (a message may hold views valid only now). */
  private batch: Buffer[] | null = null;
  /** the message types of `batch`, in order (what a failure of the batch reports) */
  private batchTypes: string[] = [];
  private batchBytes = 0;
  private tellFailure: TellFailureHook;
  private batchScheduled = false;
  private readonly flushBatch = (): void => {
    const parts = this.batch;
    const bytes = this.batchBytes;
    const types = this.batchTypes;
    this.batch = null;
    this.batchTypes = [];
    this.batchBytes = 0;
    if (!parts) return;
    if (this.closed) {
      for (const type of types) this.tellFailure({ reason: 'closed', type, side: 'send' });
      return;
    }
    try {
      this.transfer(parts, bytes);
    } catch (error) {
      for (const type of types) this.tellFailure({ reason: 'post', type, side: 'send', error });
    }
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
    private readonly opts: MailboxOptions = {},
  ) {
    this.tellFailure = opts.onTellFailure ?? defaultTellFailureHook;
    port.on('message', this.onMessage);
    // A MessagePort says when its other end is gone (that thread ended or closed it): from then
    // on a tell would vanish in the port, so the mailbox closes and reports them instead.
    if (typeof port.once === 'function') port.once('close', this.onPortClose);
  }

  private readonly onPortClose = (): void => this.close('the peer closed its port');

  /** Where failed tells are reported from now on (see TellFailure). */
  onTellFailure(hook: TellFailureHook): this {
    this.tellFailure = hook;
    return this;
  }

  /** True once close() ran or the port's other end went away. */
  get isClosed(): boolean {
    return this.closed;
  }

  handle(handler: Handler<In>): this {
    this.handler = handler;
    return this;
  }

  /** Where raw messages (postRaw on the other side, RAW_TAG first) go; a throw is the port's (a link closes). */
  onRaw(handler: (raw: Uint8Array) => void): this {
    this.rawHandler = handler;
    return this;
  }

  /**
   * Sends `head` (whose first byte is RAW_TAG) and `payload` as one message outside msgpack,
   * after every tell before it (this turn's batch leaves first, so the order holds). Bulk bytes
   * pay neither msgpack's copy nor the batch's: none at all through a port with postParts, one
   * into the transferred buffer otherwise. The receiver's onRaw gets the message whole.
   */
  postRaw(head: Uint8Array, payload: Uint8Array): TellResult {
    if (this.closed) return this.failed({ reason: 'closed', type: 'raw', side: 'send' });
    try {
      if (this.batch) this.flushBatch();
      if (this.port.postParts) this.port.postParts(head, payload);
      else {
        const exact = new Uint8Array(head.byteLength + payload.byteLength);
        exact.set(head, 0);
        exact.set(payload, head.byteLength);
        this.port.postMessage(exact, [exact.buffer]);
      }
    } catch (error) {
      return this.failed({ reason: 'post', type: 'raw', side: 'send', error });
    }
    return TELL_OK;
  }

  onAttach(handler: (a: Attachment) => void): this {
    this.attachHandler = handler;
    return this;
  }

  /**
   * Sends `msg`, answered by nobody. Never throws: a tell that cannot leave (closed, encode,
   * post) returns why and is reported to onTellFailure with its type; one the peer's handler
   * fails on is reported there, on the peer's side. (Tells in a batch are encoded here, so only
   * a port refusing the whole batch, or a close before it leaves, is reported later.)
   */
  tell(msg: Out): TellResult {
    if (this.closed) return this.failed({ reason: 'closed', type: typeOf(msg), side: 'send' });
    let packed: Buffer;
    try {
      packed = encode({ k: 't', m: msg } satisfies Envelope<Out>);
    } catch (error) {
      return this.failed({ reason: 'encode', type: typeOf(msg), side: 'send', error });
    }
    if (!this.opts.batchTells) {
      try {
        if (this.batch) this.flushBatch();
        this.transfer([packed], packed.byteLength);
      } catch (error) {
        return this.failed({ reason: 'post', type: typeOf(msg), side: 'send', error });
      }
      return TELL_OK;
    }
    if (this.batch) this.batch.push(packed);
    else this.batch = [packed];
    this.batchTypes.push(typeOf(msg));
    this.batchBytes += packed.byteLength;
    // Bulk bytes go at once: the peer starts on them while this thread reads more.
    if (this.batchBytes >= BATCH_FLUSH_BYTES) {
      this.flushBatch();
      return TELL_OK;
    }
    if (this.batchScheduled) return TELL_OK;
    this.batchScheduled = true;
    setImmediate(this.endOfTurn);
    return TELL_OK;
  }

  private failed(f: TellFailure): TellResult {
    this.tellFailure(f);
    return { ok: false, ...f };
  }

  /**
   * Asks the peer and resolves with its answer, whose type the channel's reply map gives for
   * `msg.type`; rejects with the peer's coded error, or `unavailable` after `timeoutMs` or
   * when the peer is gone.
   */
  ask<T extends AskType<Out, Replies>>(msg: Out & { type: T }, timeoutMs: number): Promise<Replies[T]>;
  /**
   * @deprecated The caller names the reply type, unchecked: use the overload above (no type
   * argument), which reads it from the channel's reply map. Kept for call sites not yet moved.
   */
  ask<R>(msg: Out, timeoutMs: number): Promise<R>;
  ask(msg: Out, timeoutMs: number): Promise<unknown> {
    if (this.closed) return Promise.reject(new ApiError('unavailable', 'peer thread is gone'));
    const id = this.nextId++;
    return new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ApiError('unavailable', `no answer from peer thread within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      try {
        this.post({ k: 'a', id, m: msg });
      } catch (err) {
        // Not encodable (or the port refused it): fail now, not at the timeout.
        clearTimeout(timer);
        this.pending.delete(id);
        reject(err);
      }
    });
  }

  attach(attach: string, port: MessagePort, meta: Record<string, unknown> = {}): void {
    this.port.postMessage({ attach, port, meta } satisfies Attachment, [port]);
  }

  /** Fails every outstanding ask (the peer died) and stops listening. */
  close(reason = 'peer thread is gone'): void {
    if (this.closed) return;
    this.closed = true;
    // Tells still batched never leave now: reported, not dropped silently.
    if (this.batch) this.flushBatch();
    this.port.off('message', this.onMessage);
    this.port.off('close', this.onPortClose);
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
    if (raw[0] === RAW_TAG) {
      if (!this.closed) this.rawHandler(raw);
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
    } catch (error) {
      if (replyId !== undefined) this.reply(replyId, false, error);
      else this.tellFailure({ reason: 'handler', type: typeOf(msg), side: 'receive', error });
      return;
    }
    if (replyId === undefined) {
      if (result instanceof Promise) result.catch((error: unknown) => this.tellFailure({ reason: 'handler', type: typeOf(msg), side: 'receive', error }));
      return;
    }
    Promise.resolve(result).then(
      (v) => this.reply(replyId, true, v),
      (err) => this.reply(replyId, false, err),
    );
  }

  /** Answers ask `id`; a value that cannot be encoded answers as an `internal` error instead. */
  private reply(id: number, ok: boolean, value: unknown): void {
    if (this.closed) return;
    try {
      if (ok) this.post({ k: 'r', id, ok: true, v: value ?? null });
      else this.post({ k: 'r', id, ok: false, e: toCodedError(value) });
    } catch (err) {
      try {
        this.post({ k: 'r', id, ok: false, e: { code: 'internal', detail: `the answer could not be sent: ${(err as Error).message}` } });
      } catch {
        // The port itself refuses: the asker's timeout answers.
      }
    }
  }
}

export function mailboxOfWorker<Out, In, Replies = RepliesOf<Out>>(w: Worker): Mailbox<Out, In, Replies> {
  return new Mailbox<Out, In, Replies>(w as unknown as PortLike);
}
