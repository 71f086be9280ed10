import { EventEmitter } from 'node:events';
import { STATUS_CODES } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { ExchangeObserver, ObservedHead, StatusLine } from '../observer.js';
import { headersOfRaw } from '../../protocol/raw-head.js';
import { grpcMessages, isGrpcContentType, printable } from '../../protocol/grpc-framing.js';
import type { ReplayTarget } from './replay.js';

// The inspector's memory: the last requests of every tunnel of this `burrow` process, with the
// first 64 KiB of each body. Bounded by count (a ring: the oldest capture goes first) and by
// bytes (every kept byte is counted, heads included, and the oldest captures are dropped while
// the total is over budget), so a busy or hostile visitor costs at most the budget, however many
// or however large the requests are.

export interface CaptureLimits {
  /** Captures kept (the newest). */
  maxEntries: number;
  /** Bytes kept of each body; the rest is counted and dropped. */
  maxBodyBytes: number;
  /** Bytes kept of each head's header names and values; later headers are dropped. */
  maxHeadBytes: number;
  /** All kept bytes together (bodies + heads + a fixed cost per capture). */
  maxTotalBytes: number;
}

export const DEFAULT_LIMITS: CaptureLimits = {
  maxEntries: 500,
  maxBodyBytes: 64 * 1024,
  maxHeadBytes: 32 * 1024,
  maxTotalBytes: 96 * 1024 * 1024,
};

/** Bookkeeping bytes charged per capture (object, strings, timings) on top of heads and bodies. */
const CAPTURE_OVERHEAD_BYTES = 512;

export type Header = [name: string, value: string];
export type CaptureState = 'pending' | 'complete' | 'failed';

const NO_HEADERS: readonly string[] = [];

/**
 * One side (request or response) of a capture. Recording is cheap (it runs on the tunnel's hot
 * path, for every request, page open or not): the head is the client's own flat array, kept by
 * reference (the client never changes one it handed over) and paired into Header[] when read;
 * a body is one copy per chunk, joined when read.
 */
class Side {
  /** The flat head [name, value, …] as handed over; only its first `headerFields` entries are kept. */
  private flat: readonly string[] = NO_HEADERS;
  private headerFields = 0;
  private pairs: Header[] | null = null;
  /** A head kept as the bytes it came in, made into fields when first read. */
  private raw: Uint8Array | null = null;
  headersTruncated = false;
  /** The kept body: nothing, one copied chunk, or several. */
  private chunks: Buffer | Buffer[] | null = null;
  /** Bytes kept of the body. */
  kept = 0;
  /** Bytes seen of the body (kept or not). */
  size = 0;

  /** Keeps headers up to `maxHeadBytes` (by reference); returns the bytes kept. */
  setHeaders(flat: readonly string[], maxHeadBytes: number): number {
    let used = 0;
    let i = 0;
    for (; i + 1 < flat.length; i += 2) {
      const cost = String(flat[i]).length + String(flat[i + 1]).length + 4;
      if (used + cost > maxHeadBytes) {
        this.headersTruncated = true;
        break;
      }
      used += cost;
    }
    // Cut short: only the kept part stays (the rest was not counted against the budget).
    this.flat = this.headersTruncated ? flat.slice(0, i) : flat;
    this.headerFields = i;
    this.pairs = null;
    return used;
  }

  /**
   * Keeps a head that came as bytes (one copy: the frame it came in is not the inspector's to
   * keep); its fields are made only when a page or --json reads them. Returns the bytes kept.
   */
  setRawHead(raw: Uint8Array, maxHeadBytes: number): number {
    if (raw.byteLength > maxHeadBytes) return this.setHeaders(headersOfRaw(raw), maxHeadBytes);
    this.raw = Buffer.from(raw);
    this.flat = NO_HEADERS;
    this.headerFields = 0;
    this.pairs = null;
    return raw.byteLength;
  }

  /** The kept headers as [name, value] pairs (made on the first read). */
  get headers(): Header[] {
    if (this.pairs) return this.pairs;
    if (this.raw !== null) {
      this.flat = headersOfRaw(this.raw);
      this.headerFields = this.flat.length;
      this.raw = null;
    }
    const out: Header[] = [];
    for (let i = 0; i < this.headerFields; i += 2) out.push([String(this.flat[i]), String(this.flat[i + 1])]);
    return (this.pairs = out);
  }

  /** Copies at most the room left under `maxBodyBytes`; returns the bytes kept. */
  addBody(chunk: Uint8Array, maxBodyBytes: number): number {
    this.size += chunk.byteLength;
    const room = maxBodyBytes - this.kept;
    if (room <= 0 || chunk.byteLength === 0) return 0;
    const n = Math.min(room, chunk.byteLength);
    // A copy: the caller's buffer is reused or transferred after this returns.
    const copy = Buffer.allocUnsafe(n);
    copy.set(n === chunk.byteLength ? chunk : chunk.subarray(0, n));
    if (this.chunks === null) this.chunks = copy;
    else if (Array.isArray(this.chunks)) this.chunks.push(copy);
    else this.chunks = [this.chunks, copy];
    this.kept += n;
    return n;
  }

  get truncated(): boolean {
    return this.size > this.kept;
  }

  body(): Buffer {
    if (Array.isArray(this.chunks)) this.chunks = Buffer.concat(this.chunks);
    return this.chunks ?? Buffer.alloc(0);
  }

  drop(): void {
    this.chunks = null;
    this.raw = null;
    this.flat = NO_HEADERS;
    this.headerFields = 0;
    this.pairs = null;
  }

  /** The kept body as gRPC's length-prefixed messages, when its content-type is gRPC's (parsed here, when read). */
  grpcFraming(): GrpcFramingJson | null {
    let type: string | undefined;
    for (const [name, value] of this.headers) if (name.length === 12 && name.toLowerCase() === 'content-type') type = value;
    if (!isGrpcContentType(type)) return null;
    const f = grpcMessages(this.body(), !this.truncated);
    return {
      messages: f.messages.map((m) => ({
        offset: m.offset,
        compressed: m.compressed,
        length: m.length,
        data_hex: Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength).toString('hex'),
        preview: printable(m.data),
        truncated: m.data.byteLength < m.length,
      })),
      more: f.more,
      cut: f.cut,
      error: f.error,
    };
  }

  toJSON(): SideJson {
    return { headers: this.headers, body_base64: this.body().toString('base64'), truncated: this.truncated, size: this.size, headers_truncated: this.headersTruncated, grpc: this.grpcFraming() };
  }
}

/** One side of a capture in the JSON API. */
export interface SideJson {
  headers: Header[];
  body_base64: string;
  truncated: boolean;
  size: number;
  headers_truncated: boolean;
  /** A gRPC body's messages (its content-type is application/grpc…); null for other bodies. */
  grpc: GrpcFramingJson | null;
}

/** A gRPC body as its length-prefixed messages, within the bytes kept (src/protocol/grpc-framing.ts). */
export interface GrpcFramingJson {
  messages: {
    /** Where its 5-byte prefix starts in the body. */
    offset: number;
    compressed: boolean;
    /** The length its prefix declares. */
    length: number;
    /** Its kept bytes, in hex (fewer than `length` when the capture stopped inside it: `truncated`). */
    data_hex: string;
    /** Its kept bytes with every byte that is not printable ASCII as '.'. */
    preview: string;
    truncated: boolean;
  }[];
  /** Messages past the first 1,000, counted and not listed. */
  more: number;
  /** The capture stopped inside a prefix or a message (the body was longer than the bytes kept). */
  cut: boolean;
  /** Where and why the body stops being gRPC framing, or null. */
  error: string | null;
}

/** The list's view of a capture (what the live list shows; no heads or bodies). */
export interface CaptureSummary {
  id: string;
  tunnel: string;
  method: string;
  path: string;
  status: number | null;
  /** The reason phrase the local service sent ("OK"); the standard one when it sent none. */
  status_text: string;
  /** The response's HTTP version as the local service wrote it ("HTTP/1.1", "HTTP/2"); null before it. */
  http_version: string | null;
  /** The visitor's protocol: "HTTP/1.1" (HTTP/1.x), "h2" (an HTTP/2 stream), "gRPC" (an HTTP/2 stream with gRPC's content-type). */
  protocol: CaptureProtocol;
  /** A gRPC call's status code (grpc-status, from the trailers or a trailers-only head); null for other exchanges. */
  grpc_status: number | null;
  /** Its grpc-message, percent-decoded (at most 1,000 characters); null when it sent none. */
  grpc_message: string | null;
  duration_ms: number | null;
  started_at: string;
  state: CaptureState;
  error: string | null;
  /** What the edge answered the visitor with when the local service gave no answer (502, 504). */
  visitor_status: number | null;
  replay_of: string | null;
  /** The tunnel asks for basic auth: its visitors' credentials were checked and removed at the edge. */
  basic_auth: boolean;
}

export type CaptureJson = CaptureSummary & {
  request: SideJson;
  response: SideJson;
};

export type CaptureProtocol = 'HTTP/1.1' | 'h2' | 'gRPC';
const PROTOCOL_NAMES = { h2: 'h2', grpc: 'gRPC' } as const;

export class Capture {
  readonly request = new Side();
  readonly response = new Side();
  status: number | null = null;
  statusLine: StatusLine | null = null;
  grpcStatus: number | null = null;
  grpcMessage: string | null = null;
  durationMs: number | null = null;
  state: CaptureState = 'pending';
  error: string | null = null;
  visitorStatus: number | null = null;
  /** When the request head arrived (epoch ms; formatted only when read). */
  readonly startedAtMs = Date.now();
  private readonly t0 = performance.now();
  private startedIso: string | null = null;
  /** Set when the ring dropped it or the store was cleared: later observer calls change nothing and count nothing. */
  evicted = false;
  /** Bytes this capture holds, as charged to the store. */
  bytes = CAPTURE_OVERHEAD_BYTES;

  constructor(
    readonly id: string,
    readonly tunnel: string,
    readonly method: string,
    readonly path: string,
    readonly replayOf: string | null,
    /** Where a replay of it goes (its tunnel's local service); null: not replayable. */
    readonly target: ReplayTarget | null,
    /** The tunnel's basic-auth credential (USER:PASS), for "Copy as cURL" when asked; never in the JSON. */
    readonly credentials: string | null = null,
    readonly protocol: CaptureProtocol = 'HTTP/1.1',
  ) {}

  get startedAt(): Date {
    return new Date(this.startedAtMs);
  }

  finishTiming(): void {
    if (this.durationMs === null) this.durationMs = Math.round((performance.now() - this.t0) * 10) / 10;
  }

  summary(): CaptureSummary {
    return {
      id: this.id,
      tunnel: this.tunnel,
      method: this.method,
      path: this.path,
      status: this.status,
      status_text: this.status === null ? '' : this.statusLine?.reason || (STATUS_CODES[this.status] ?? ''),
      http_version: this.statusLine?.version ?? null,
      protocol: this.protocol,
      grpc_status: this.grpcStatus,
      grpc_message: this.grpcMessage,
      duration_ms: this.durationMs,
      started_at: (this.startedIso ??= this.startedAt.toISOString()),
      state: this.state,
      error: this.error,
      visitor_status: this.visitorStatus,
      replay_of: this.replayOf,
      basic_auth: this.credentials !== null,
    };
  }

  toJSON(): CaptureJson {
    return { ...this.summary(), request: this.request.toJSON(), response: this.response.toJSON() };
  }
}

/** The observer that fills one capture, and the capture. */
export interface CaptureHandle extends ExchangeObserver {
  readonly capture: Capture;
}

export interface CaptureStoreEvents {
  /** A new capture (its request head arrived). */
  added: [CaptureSummary];
  /** A capture's response head arrived, or it ended or failed. */
  updated: [CaptureSummary];
  /** Every capture was dropped (the page's Clear). */
  cleared: [];
}

export class CaptureStore extends EventEmitter<CaptureStoreEvents> {
  private readonly captures = new Map<string, Capture>();
  /** The kept captures oldest first, from `head` on (a queue: eviction takes from the front in O(1)). */
  private order: (Capture | undefined)[] = [];
  private head = 0;
  private nextId = 1;
  private total = 0;

  constructor(readonly limits: CaptureLimits = DEFAULT_LIMITS) {
    super();
    // Any number of page tabs may listen; the server bounds them itself.
    this.setMaxListeners(0);
  }

  /** Bytes held by all kept captures. */
  get bytes(): number {
    return this.total;
  }

  get size(): number {
    return this.captures.size;
  }

  /** Newest first. */
  list(): Capture[] {
    return (this.order.slice(this.head) as Capture[]).reverse();
  }

  get(id: string): Capture | undefined {
    return this.captures.get(id);
  }

  /** Drops every capture; exchanges still in flight fill nothing any more. */
  clear(): void {
    for (const c of this.captures.values()) this.forget(c);
    this.captures.clear();
    this.order = [];
    this.head = 0;
    this.total = 0;
    this.emit('cleared');
  }

  /** Starts a capture for a request head; the returned observer fills it. */
  begin(
    tunnel: string,
    head: ObservedHead,
    opts: { replayOf?: string; target?: ReplayTarget; credentials?: string | null } = {},
  ): CaptureHandle {
    const c = new Capture(String(this.nextId++), tunnel, String(head.method), String(head.target), opts.replayOf ?? null, opts.target ?? null, opts.credentials ?? null, head.protocol ? PROTOCOL_NAMES[head.protocol] : 'HTTP/1.1');
    c.bytes += c.method.length + c.path.length + tunnel.length;
    c.bytes += head.raw ? c.request.setRawHead(head.raw, this.limits.maxHeadBytes) : c.request.setHeaders(head.headers, this.limits.maxHeadBytes);
    this.captures.set(c.id, c);
    this.order.push(c);
    this.total += c.bytes;
    this.evict(c);
    // A summary is built only for a listener (a page open: see server.ts).
    if (this.listenerCount('added') > 0) this.emit('added', c.summary());
    return new Recorder(this, c);
  }

  /** Counts `n` more bytes kept by `c` (a Recorder's; `c` is not evicted). */
  charge(c: Capture, n: number): void {
    if (n === 0 || c.evicted) return;
    c.bytes += n;
    this.total += n;
    this.evict(c);
  }

  /** `c` changed (response head, end, failure): tells a listener, if any. */
  changed(c: Capture): void {
    if (!c.evicted && this.listenerCount('updated') > 0) this.emit('updated', c.summary());
  }

  /** Drops the oldest captures while over a bound (never `keep`, the one being filled). */
  private evict(keep: Capture): void {
    while (this.captures.size > this.limits.maxEntries || this.total > this.limits.maxTotalBytes) {
      const old = this.takeOldest(keep);
      if (!old) break;
      this.captures.delete(old.id);
      this.total -= old.bytes;
      this.forget(old);
    }
    // The queue's spent front is dropped once it is most of the array (amortised O(1)).
    if (this.head > 64 && this.head * 2 > this.order.length) {
      this.order = this.order.slice(this.head);
      this.head = 0;
    }
  }

  /** Takes the oldest capture other than `keep` off the queue; null when `keep` is all there is. */
  private takeOldest(keep: Capture): Capture | null {
    const order = this.order;
    const first = this.head;
    if (first >= order.length) return null;
    let old = order[first]!;
    if (old === keep) {
      if (first + 1 >= order.length) return null;
      // The second oldest goes; `keep` moves into its place, so the order stays oldest first.
      old = order[first + 1]!;
      order[first + 1] = keep;
    }
    order[first] = undefined;
    this.head = first + 1;
    return old;
  }

  private forget(c: Capture): void {
    c.evicted = true;
    c.request.drop();
    c.response.drop();
  }
}

/** The observer that fills one capture (a class: no closures per request). */
class Recorder implements CaptureHandle {
  constructor(
    private readonly store: CaptureStore,
    readonly capture: Capture,
  ) {}

  requestBody(chunk: Uint8Array): void {
    const c = this.capture;
    if (!c.evicted) this.store.charge(c, c.request.addBody(chunk, this.store.limits.maxBodyBytes));
  }

  response(status: number, headers: readonly string[], line?: StatusLine): void {
    const c = this.capture;
    if (c.evicted || c.status !== null) return;
    c.status = status;
    c.statusLine = line ?? null;
    c.grpcStatus = grpcStatusOf(headers);
    this.grpcMessage(headers);
    this.store.charge(c, c.response.setHeaders(headers, this.store.limits.maxHeadBytes));
    this.store.changed(c);
  }

  responseBody(chunk: Uint8Array): void {
    const c = this.capture;
    if (!c.evicted) this.store.charge(c, c.response.addBody(chunk, this.store.limits.maxBodyBytes));
  }

  trailers(fields: readonly string[]): void {
    const c = this.capture;
    if (c.evicted) return;
    c.grpcStatus = grpcStatusOf(fields) ?? c.grpcStatus;
    this.grpcMessage(fields);
  }

  /** Keeps a grpc-message of `fields` (a trailers-only head's, or the trailers'), counted in the budget. */
  private grpcMessage(fields: readonly string[]): void {
    const c = this.capture;
    const message = grpcMessageOf(fields);
    if (message === null) return;
    this.store.charge(c, message.length - (c.grpcMessage?.length ?? 0));
    c.grpcMessage = message;
  }

  end(): void {
    this.settle('complete', null);
  }

  fail(reason: string, visitorStatus?: number | null): void {
    this.settle('failed', String(reason), visitorStatus ?? null);
  }

  private settle(state: CaptureState, error: string | null, visitorStatus: number | null = null): void {
    const c = this.capture;
    if (c.state !== 'pending') return;
    c.state = state;
    c.error = error;
    if (c.status === null) c.visitorStatus = visitorStatus;
    c.finishTiming();
    this.store.changed(c);
  }
}

/** Characters of a grpc-message kept. */
const MAX_GRPC_MESSAGE_CHARS = 1000;

/** The grpc-message of a field list, percent-decoded as gRPC encodes it (invalid escapes left as sent), or null. */
function grpcMessageOf(fields: readonly string[]): string | null {
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i]!.length !== 12 || fields[i]!.toLowerCase() !== 'grpc-message') continue;
    const sent = fields[i + 1]!.slice(0, 3 * MAX_GRPC_MESSAGE_CHARS);
    let text: string;
    try {
      text = decodeURIComponent(sent);
    } catch {
      text = sent;
    }
    return text.slice(0, MAX_GRPC_MESSAGE_CHARS);
  }
  return null;
}

/** The grpc-status of a field list (0–16, as gRPC defines them), or null. */
function grpcStatusOf(fields: readonly string[]): number | null {
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i]!.toLowerCase() !== 'grpc-status') continue;
    const v = fields[i + 1]!;
    return /^\d{1,2}$/.test(v) ? Number(v) : null;
  }
  return null;
}
