import type { HttpRequest, HttpResponse } from '@trufflesuite/uws-js-unofficial';
import { PROBLEMS, type ProblemCode } from '../errors.js';
import { afterCallbacks, corkHeldByOther, insideCallbackOf } from '../http/cork.js';
import { requireClientAddress, statusLine, wantsClose, writeProblem } from '../http/uws.js';
import { prefersHtml } from '../http/problem-page.js';
import { CreditMeter, SendWindow } from '../protocol/flow-control.js';
import { type HttpHead, type ResetCode, type ResponseHead } from '../protocol/frames.js';
import { invalidResponseHead, requestHeaders } from '../protocol/http-headers.js';
import type { Downstream, Upstream } from './stream.js';
import type { VisitorLimit } from './visitor-limit.js';
import { countHttpAnswer } from './metrics.js';

// Public HTTP ingress: a visitor request for <id>.<domain> on this shard's uWS app.
//
//   uWS res/req ─▶ HttpVisitor ─Upstream─▶ TunnelStream (tunnel on this shard)
//                                      └─▶ MeshUpstream (tunnel on another shard, edge/mesh.ts)
//
// uWS rules kept here: `req` is read synchronously; nothing touches `res` after onAborted or
// after the response ended; every write goes through res.cork (one syscall for head and body),
// and writes that arrive inside another socket's callback (the control WebSocket's message
// handler, where `res` cannot cork) wait for the end of the loop turn (src/http/cork.ts).
// Flow control (protocol/flow-control.ts): a SendWindow pauses the request body (res.pause)
// when the stream's credit runs out; a CreditMeter reports response bytes consumed only once
// uWS accepted them, so a slow visitor holds back only its own stream.

/** Finds where a request for `tunnelId` goes: an Upstream, or null (unknown tunnel). */
export type OpenUpstream = (tunnelId: string, head: HttpHead, down: HttpVisitor) => Upstream | null;

/** Response chunks under this size wait for the cork rather than go out uncorked. */
const DEFER_MAX_BYTES = 16 * 1024;

const NO_BODY_STATUS = (s: number): boolean => s === 204 || s === 304 || (s >= 100 && s < 200);

const RESET_STATUS: Record<ResetCode, [ProblemCode, string]> = {
  'local-unreachable': ['bad-gateway', 'the tunnel client could not reach its local service'],
  'local-timeout': ['gateway-timeout', 'the local service did not answer in time'],
  'visitor-gone': ['bad-gateway', 'the request was abandoned'],
  protocol: ['bad-gateway', 'the tunnel client broke the protocol'],
  closing: ['bad-gateway', 'the tunnel client went away'],
  'no-tunnel': ['not-found', 'no tunnel is registered for this host'],
  busy: ['unavailable', 'the tunnel has too many open requests'],
};

export class HttpVisitor implements Downstream {
  up: Upstream | null = null;
  private gone = false;
  private responded = false;
  private finished = false;
  /** Request bytes we may still send before the client returns credit. */
  private readonly window = new SendWindow({
    pause: () => this.res.pause(),
    resume: () => {
      if (!this.gone) this.res.resume();
    },
  });
  /** Response bytes uWS accepted, reported to the client as credit. */
  private readonly meter = new CreditMeter((n) => this.up?.credit(n));
  /** Response framing: declared length (tryEnd) or chunked (write). */
  private total: number | null = null;
  /** Response chunks uWS did not take yet (copies: frame buffers die after the callback). */
  private queue: Buffer[] = [];
  private queueStart = 0;
  private chunk: Uint8Array | null = null;
  /** Response chunks (copies) and end that arrived while another socket held the cork. */
  private deferred: Buffer[] | null = null;
  private deferredEnd = false;
  private flushScheduled = false;
  onDone: (() => void) | null = null;
  get ended(): boolean {
    return this.finished;
  }

  private readonly corkedChunk = (): void => {
    if (this.head || this.deferred) this.corkedFlush();
    if (this.gone || this.finished) this.meter.accepted(this.chunk!.byteLength);
    else this.writeChunk(this.chunk!);
  };

  constructor(
    private readonly res: HttpResponse,
    private readonly method: string,
    /** The visitor sent `Connection: close`: uWS closes after the response; we must say so. */
    private readonly close = false,
    /** The visitor's Accept prefers text/html (a browser): errors are an HTML page. */
    private readonly html = false,
  ) {}

  // ---- visitor side ----
  aborted(): void {
    this.gone = true;
    if (!this.finished) {
      this.finished = true;
      this.up?.reset('visitor-gone');
      this.onDone?.();
    }
  }

  bodyChunk(chunk: ArrayBuffer, isLast: boolean): void {
    if (this.gone || !this.up) return;
    if (chunk.byteLength > 0) {
      this.up.data(new Uint8Array(chunk));
      this.window.spend(chunk.byteLength, !isLast);
    }
    if (isLast) this.up.end();
  }

  // ---- Downstream: tunnel → visitor ----
  credit(bytes: number): void {
    this.window.grant(bytes);
  }

  response(head: ResponseHead): void {
    if (this.gone || this.responded) return;
    const invalid = invalidResponseHead(head.status, head.headers);
    if (invalid) return this.problem('bad-gateway', `the tunnel's local service sent an invalid response header: ${invalid}`, 'protocol');
    if (head.status < 200) {
      // Interim responses (100, 103…) are not relayed; the final one follows. 101 is only
      // meaningful for an upgrade, and those go through upgrade.ts.
      if (head.status === 101) this.problem('bad-gateway', "the tunnel's local service switched protocols on a plain request", 'protocol');
      return;
    }
    this.responded = true;
    const h = head.headers;
    for (let i = 0; i < h.length; i += 2) {
      if (h[i]!.length === 14 && h[i]!.toLowerCase() === 'content-length') {
        const n = Number(h[i + 1]);
        if (Number.isSafeInteger(n) && n >= 0) this.total = n;
      }
    }
    this.head = head;
    if ((this.method === 'HEAD' || NO_BODY_STATUS(head.status) || this.total === 0) && !corkHeldByOther(this.res)) {
      this.res.cork(this.corkedFlush);
      return;
    }
    // The head waits for the first body bytes (usually in the same read of the control
    // socket) so head and body leave in one write; it goes alone at the end of this loop turn
    // otherwise (a long poll or an event stream must get its head at once).
    this.scheduleFlush();
  }

  private head: ResponseHead | null = null;

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    afterCallbacks(this.flush);
  }
  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.gone || this.finished) return this.dropDeferred();
    try {
      this.res.cork(this.corkedFlush);
    } catch (err) {
      // Deferred work of a frame runs from setImmediate, outside the control connection's
      // handler: an escape here would end the shard.
      this.fault(err);
    }
  };

  /** Our own bug surfaced on this response: drop it and let the carrier end its connection. */
  private fault(err: unknown): void {
    const wasOpen = !this.gone && !this.finished;
    this.gone = true;
    this.finished = true;
    if (wasOpen) {
      try {
        this.res.close();
      } catch {
        // already closed by uWS
      }
      this.onDone?.();
    }
    if (this.up?.fault) this.up.fault(err);
    else this.up?.reset('protocol');
  }

  /** True while no response was started and the visitor is still there (an upgrade may answer). */
  get awaitingResponse(): boolean {
    return !this.gone && !this.finished && !this.responded;
  }
  /** Head, deferred chunks and deferred end, in order, inside one cork. */
  private readonly corkedFlush = (): void => {
    if (this.head) this.writeHead();
    const chunks = this.deferred;
    this.deferred = null;
    if (chunks) for (const c of chunks) {
      if (this.gone || this.finished) this.meter.accepted(c.byteLength);
      else this.writeChunk(c);
    }
    if (this.deferredEnd) {
      this.deferredEnd = false;
      this.endNow();
    }
  };
  /** The visitor left before a deferred flush: the client's window still gets its credit back. */
  private dropDeferred(): void {
    const chunks = this.deferred;
    this.deferred = null;
    this.deferredEnd = false;
    if (chunks) for (const c of chunks) this.meter.accepted(c.byteLength);
  }

  /** Status line and headers (inside a cork). uWS writes Content-Length and Date itself. */
  private writeHead(): void {
    const head = this.head!;
    this.head = null;
    const h = head.headers;
    countHttpAnswer(head.status);
    this.res.writeStatus(statusLine(head.status));
    for (let i = 0; i < h.length; i += 2) {
      const name = h[i]!;
      if ((name.length === 14 || name.length === 4) && (name.toLowerCase() === 'content-length' || name.toLowerCase() === 'date')) continue;
      this.res.writeHeader(name, h[i + 1]!);
    }
    if (this.close) this.res.writeHeader('Connection', 'close');
    if (this.method === 'HEAD' || NO_BODY_STATUS(head.status)) {
      // endWithoutBody() without arguments: given undefined this uWS build writes
      // `Content-Length: 9223372036854775808`, given a number it leaves the response pending.
      // A HEAD or 304 keeps the origin's length (RFC 9110 §8.6); a 204 has none.
      if (this.total !== null && head.status !== 204) this.res.writeHeader('Content-Length', String(this.total));
      this.res.endWithoutBody();
      this.complete();
    } else if (this.total === 0) {
      this.res.end();
      this.complete();
    }
  }

  data(bytes: Uint8Array): void {
    if (this.gone || this.finished) {
      // Still return the credit so the client's window does not leak.
      this.meter.accepted(bytes.byteLength);
      return;
    }
    // Inside another socket's callback a small chunk is copied and waits for the cork. A large
    // one goes now, after whatever waits before it: it is a send of its own either way, and
    // the head's few uncorked sends are paid once per large response.
    if (bytes.byteLength < DEFER_MAX_BYTES && corkHeldByOther(this.res)) {
      (this.deferred ??= []).push(Buffer.from(bytes));
      this.scheduleFlush();
      return;
    }
    this.chunk = bytes;
    this.res.cork(this.corkedChunk);
    this.chunk = null;
  }

  private writeChunk(bytes: Uint8Array): void {
    if (this.head) this.writeHead();
    const n = bytes.byteLength;
    if (this.total === null) {
      // Chunked: uWS buffers what the socket does not take; report it once drained.
      const taken = this.res.write(bytes);
      this.meter.wrote(n, taken);
      if (!taken) this.armWritable();
      return;
    }
    if (this.queue.length > 0) {
      this.queue.push(Buffer.from(bytes));
      return;
    }
    const start = this.res.getWriteOffset();
    const [ok, done] = this.res.tryEnd(bytes, this.total);
    if (done) {
      this.meter.accepted(n);
      this.complete();
      return;
    }
    if (ok) {
      this.meter.accepted(n);
      return;
    }
    // Only part was taken: keep the whole chunk and where it started; onWritable goes on.
    this.queue.push(Buffer.from(bytes));
    this.queueStart = start;
    this.armWritable();
  }

  private armed = false;
  private armWritable(): void {
    if (this.armed) return;
    this.armed = true;
    this.res.onWritable((offset) => this.onWritable(offset));
  }

  private onWritable(offset: number): boolean {
    if (this.gone || this.finished) return true;
    if (this.total === null) {
      this.meter.drained();
      return true;
    }
    while (this.queue.length > 0) {
      const head = this.queue[0]!;
      const [ok, done] = this.res.tryEnd(head.subarray(offset - this.queueStart), this.total);
      if (done) {
        this.meter.accepted(head.byteLength);
        this.queue.length = 0;
        this.complete();
        return true;
      }
      if (!ok) return false;
      this.queue.shift();
      this.meter.accepted(head.byteLength);
      offset = this.res.getWriteOffset();
      this.queueStart = offset;
    }
    return true;
  }

  end(): void {
    if (this.gone || this.finished) return;
    if (!this.responded) return this.problem('bad-gateway', 'the local service sent no response');
    if (this.deferred || this.head || corkHeldByOther(this.res)) {
      this.deferredEnd = true;
      this.scheduleFlush();
      return;
    }
    this.endNow();
  }

  private endNow(): void {
    if (this.gone || this.finished) return;
    if (this.total === null) {
      this.res.cork(() => {
        if (this.head) this.writeHead();
        this.res.end();
      });
      this.complete();
    } else if (this.queue.length === 0) {
      // The client said "end" before the declared length: the visitor cannot be told
      // otherwise than by closing the connection.
      this.res.close();
      this.complete();
    }
    // else: tryEnd completes the response once the queue drains.
  }

  reset(code: ResetCode): void {
    if (this.gone || this.finished) return;
    this.dropDeferred();
    if (!this.responded || this.head) {
      this.head = null;
      // Codes are checked at decode; a code of a newer peer still answers 502.
      const [problem, detail] = RESET_STATUS[code] ?? RESET_STATUS.protocol;
      this.problem(problem, detail);
      return;
    }
    this.finished = true;
    this.gone = true;
    this.res.close();
    this.onDone?.();
  }

  /** Answers a short problem+json (404 unknown tunnel, 502, 504). */
  problem(code: ProblemCode, detail: string, resetWith: ResetCode = 'visitor-gone'): void {
    if (this.gone || this.finished) return;
    this.responded = true;
    countHttpAnswer(PROBLEMS[code].status);
    writeProblem(this.res, code, detail, { html: this.html, ...(this.close ? { extra: { headers: { Connection: 'close' } } } : {}) });
    this.complete();
    // The stream (if any) is over for us; tell the other side.
    this.up?.reset(resetWith);
  }

  private complete(): void {
    if (this.finished) return;
    this.finished = true;
    this.onDone?.();
  }
}

/**
 * Serves one public request. Called from the shard's HostDispatch with the raw uWS objects;
 * `open` finds the tunnel (local or over the mesh). `dropAuthorization`: the header held the
 * tunnel's basic-auth password (edge/access.ts), which the client and local service never see.
 */
export function serveVisitor(res: HttpResponse, req: HttpRequest, tunnelId: string, open: OpenUpstream, limit?: VisitorLimit, dropAuthorization = false): void {
  const method = req.getCaseSensitiveMethod();
  const query = req.getQuery();
  const target = query ? `${req.getUrl()}?${query}` : req.getUrl();
  const raw: string[] = [];
  req.forEach((k, v) => {
    if (!(dropAuthorization && k === 'authorization')) raw.push(k, v);
  });
  const client = requireClientAddress(res, req);
  if (client === null) return;
  const ip = client.ip;
  const html = prefersHtml(req.getHeader('accept'));
  if (limit && !limit.admit(ip, res, html)) return;
  // WebSocket upgrades are caught by the ws route (upgrade.ts); any other Upgrade (h2c...)
  // is served as a plain request, its Upgrade/Connection headers dropped as hop-by-hop.
  const upgrade = false;
  const contentLength = req.getHeader('content-length');
  const hasBody = (contentLength !== '' && contentLength !== '0') || req.getHeader('transfer-encoding') !== '';
  const visitor = new HttpVisitor(res, method.toUpperCase(), wantsClose(req.getHeader('connection')), html);
  res.onAborted(() => insideCallbackOf(res, () => visitor.aborted()));
  const head: HttpHead = { kind: 'http', method, target, headers: requestHeaders(raw, client, upgrade), upgrade, end: !hasBody };
  const up = insideCallbackOf(res, () => open(tunnelId, head, visitor));
  limit?.track(ip, visitor);
  if (!up) {
    visitor.problem('not-found', `no tunnel is registered for "${tunnelId}"`);
    return;
  }
  visitor.up = up;
  if (hasBody) res.onData((chunk, isLast) => insideCallbackOf(res, () => visitor.bodyChunk(chunk, isLast)));
}
