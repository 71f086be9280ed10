import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { Readable } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import { F, type Frame, type HttpHead, type ResetCode, type TcpHead } from '../protocol/frames.js';
import { CreditMeter, SendWindow, StreamEnds, type Source } from '../protocol/flow-control.js';
import { responseHeaders } from '../protocol/http-headers.js';
import type { ExchangeObserver } from './observer.js';
import { connectOptions, type LocalTarget } from './local-target.js';

// The client's streams: one visitor request or TCP connection each, toward the local service.
// A stream writes its frames through the Sender of the control connection it arrived on
// (the main connection or a lane, src/client/link.ts).

export interface Sender {
  send(frame: Frame): void;
  sendData(sid: number, bytes: Uint8Array): void;
}

/**
 * One stream on the client: a visitor's HTTP request or TCP connection toward the local
 * service. Flow control and the end/reset bookkeeping are protocol/flow-control.ts's: the
 * SendWindow pauses the local source (pauseSource/resumeSource), the CreditMeter returns
 * credit for bytes the local service took, StreamEnds finishes the stream once.
 * local = local service → visitor (our End), peer = visitor → local service (the server's End).
 */
export abstract class ClientStream implements Source {
  /** Response / TCP bytes we may still send before the server returns credit. */
  protected readonly window = new SendWindow(this);
  protected readonly meter = new CreditMeter((n) => {
    if (!this.ends.done) this.out.send([F.Credit, this.sid, n]);
  });
  protected readonly ends = new StreamEnds(() => this.finished());
  bytesIn = 0;
  bytesOut = 0;
  readonly startedMs = Date.now();
  /** The observer's view of this HTTP exchange (null: nobody observes; it copies ≤ 64 KiB a body). */
  capture: ExchangeObserver | null = null;
  /** The local service gave no answer: its error, or null for a timeout (see local-error.ts). */
  localFailure: { err: Error | null } | null = null;

  constructor(
    readonly sid: number,
    protected readonly out: Sender,
    protected readonly onFinish: (s: ClientStream) => void,
  ) {}

  get done(): boolean {
    return this.ends.done;
  }

  /** Bytes from the server toward the local service. */
  abstract onData(bytes: Buffer): void;
  /** Ends the local service's input (request body end, TCP FIN). */
  protected abstract endDestination(): void;
  /** Tears down the local side's sockets and requests. */
  protected abstract destroy(): void;
  abstract pause(): void;
  abstract resume(): void;

  onCredit(bytes: number): void {
    this.window.grant(bytes);
  }

  /** The server's End: the visitor finished sending. */
  onEnd(): void {
    if (this.ends.endPeer() !== 'ok') return;
    this.endDestination();
    this.ends.settle();
  }

  onReset(code: ResetCode): void {
    this.capture?.fail(code);
    if (!this.ends.finish()) return;
    this.destroy();
  }

  /** The connection is gone: drop everything without reporting (the owner clears its map). */
  abort(): void {
    this.capture?.fail('connection-lost');
    this.ends.finish(false);
    this.destroy();
  }

  /** Bytes from the local service toward the visitor. */
  protected forward(chunk: Buffer): void {
    if (this.ends.done) return;
    this.bytesOut += chunk.length;
    this.capture?.responseBody(chunk);
    this.out.sendData(this.sid, chunk);
    this.window.spend(chunk.length);
  }

  /** The local service finished sending. */
  protected localEnded(): void {
    if (!this.ends.endLocal()) return;
    this.out.send([F.End, this.sid]);
    this.ends.settle();
  }

  protected reset(code: ResetCode): void {
    if (this.ends.done) return;
    this.capture?.fail(code);
    this.out.send([F.Reset, this.sid, code]);
    this.ends.finish();
  }

  protected finished(): void {
    this.capture?.end(); // after a fail, a no-op
    this.onFinish(this);
  }
}

export class HttpStream extends ClientStream {
  private readonly req: http.ClientRequest;
  private res: http.IncomingMessage | null = null;
  private upgraded: net.Socket | null = null;
  private status = 0;
  private readonly headTimer: NodeJS.Timeout;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: HttpHead, local: LocalTarget, agent: http.Agent, timeoutMs: number) {
    super(sid, out, onFinish);
    this.req = (local.tls ? https : http).request({
      host: local.host, port: local.port, method: head.method, path: head.target, headers: head.headers, agent: head.upgrade ? false : agent, setHost: false, ...connectOptions(local),
    });
    this.req.on('socket', (s: net.Socket) => s.setNoDelay(true));
    this.headTimer = setTimeout(() => {
      this.localFailure ??= { err: null };
      this.reset('local-timeout');
      this.req.destroy();
    }, timeoutMs);
    this.req.on('error', (err) => {
      clearTimeout(this.headTimer);
      if (!this.res && !this.upgraded) this.localFailure ??= { err };
      this.reset(this.res || this.upgraded ? 'closing' : 'local-unreachable');
    });
    this.req.on('drain', () => this.meter.drained());
    // Expect: 100-continue: the origin's go-ahead reaches the visitor, who then sends the body.
    this.req.on('continue', () => {
      if (!this.done) this.out.send([F.Response, this.sid, { status: 100, headers: [] }]);
    });
    this.req.on('response', (res) => this.onResponse(res));
    this.req.on('upgrade', (res, socket: net.Socket, rest: Buffer) => this.onUpgrade(res, socket, rest));
    // A request without a body (head.end) goes out whole now. An upgrade request has no
    // body either; the visitor's End comes only when it closes the upgraded connection.
    if (head.end && !head.upgrade) {
      this.ends.endPeer();
      this.req.end();
    } else if (head.upgrade) this.req.end();
  }

  private onResponse(res: http.IncomingMessage): void {
    clearTimeout(this.headTimer);
    if (this.done) return void res.destroy();
    this.res = res;
    this.status = res.statusCode ?? 502;
    const headers = responseHeaders(res.rawHeaders);
    this.capture?.response(this.status, headers);
    this.out.send([F.Response, this.sid, { status: this.status, headers }]);
    res.on('data', (chunk: Buffer) => this.forward(chunk));
    res.on('end', () => this.localEnded());
    res.on('error', () => this.reset('closing'));
  }

  /** 101: from now on raw bytes both ways (WebSocket or any other upgraded protocol). */
  private onUpgrade(res: http.IncomingMessage, socket: net.Socket, rest: Buffer): void {
    clearTimeout(this.headTimer);
    if (this.done) return void socket.destroy();
    socket.setNoDelay(true);
    this.upgraded = socket;
    this.status = 101;
    // The upgraded bytes (WebSocket frames) are no HTTP body: the capture ends with the 101.
    this.capture?.response(101, res.rawHeaders);
    this.capture?.end();
    this.capture = null;
    this.out.send([F.Response, this.sid, { status: 101, headers: res.rawHeaders }]);
    if (rest.length) this.forward(rest);
    socket.on('data', (chunk: Buffer) => this.forward(chunk));
    socket.on('drain', () => this.meter.drained());
    socket.on('end', () => this.localEnded());
    socket.on('error', () => this.reset('closing'));
    socket.on('close', () => this.reset('closing'));
  }

  onData(bytes: Buffer): void {
    if (this.done) return;
    this.bytesIn += bytes.length;
    if (!this.upgraded) this.capture?.requestBody(bytes);
    this.meter.wrote(bytes.length, (this.upgraded ?? this.req).write(bytes));
  }
  protected endDestination(): void {
    if (this.upgraded) this.upgraded.end();
    else if (!this.head.upgrade) this.req.end();
  }
  protected destroy(): void {
    clearTimeout(this.headTimer);
    this.upgraded?.destroy();
    this.res?.destroy();
    this.req.destroy();
  }
  pause(): void {
    (this.upgraded ?? this.res)?.pause();
  }
  resume(): void {
    (this.upgraded ?? this.res)?.resume();
  }
  get statusCode(): number {
    return this.status;
  }
  protected override finished(): void {
    clearTimeout(this.headTimer);
    super.finished();
  }
}

/**
 * A plain (non-upgrade) HTTP request on undici's Pool. Measured here against node:http with a
 * keep-alive Agent at 64 concurrent small requests: about 40% less client CPU per request, and
 * the single-threaded client is the busiest process on the tunnel's path.
 */
export class PoolHttpStream extends ClientStream {
  private status = 0;
  private resumeSocket: (() => void) | null = null;
  private abortRequest: ((err?: Error) => void) | null = null;
  private readonly body: Readable | null;
  private readonly headTimer: NodeJS.Timeout;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: HttpHead, pool: Pool, timeoutMs: number) {
    super(sid, out, onFinish);
    if (head.end) this.ends.endPeer();
    // Request bodies stream through a Readable: what it buffered is accepted when undici pulls (read()).
    this.body = head.end ? null : new Readable({ read: () => this.meter.drained() });
    this.headTimer = setTimeout(() => {
      this.localFailure ??= { err: null };
      this.reset('local-timeout');
      this.abortRequest?.();
    }, timeoutMs);
    pool.dispatch(
      { path: head.target, method: head.method, headers: head.headers, body: this.body, headersTimeout: 0, bodyTimeout: 0 },
      {
        onConnect: (abort: (err?: Error) => void) => {
          this.abortRequest = abort;
          if (this.done) abort();
        },
        onHeaders: (status: number, raw: Buffer[], resume: () => void) => {
          if (status < 200) return true; // 1xx interim answers are not relayed
          clearTimeout(this.headTimer);
          if (this.done) return false;
          this.status = status;
          this.resumeSocket = resume;
          const headers = responseHeaders(raw.map((b) => b.toString('latin1')));
          this.capture?.response(status, headers);
          this.out.send([F.Response, this.sid, { status, headers }]);
          return true;
        },
        onData: (chunk: Buffer) => {
          this.forward(chunk);
          return !this.window.paused && !this.done;
        },
        onComplete: () => this.localEnded(),
        onError: (err: Error) => {
          clearTimeout(this.headTimer);
          if (!this.status && !this.done) this.localFailure ??= { err };
          this.reset(this.status ? 'closing' : 'local-unreachable');
        },
      } as unknown as Dispatcher.DispatchHandler,
    );
  }

  onData(bytes: Buffer): void {
    if (this.done || !this.body) return;
    this.bytesIn += bytes.length;
    this.capture?.requestBody(bytes);
    this.meter.wrote(bytes.length, this.body.push(bytes));
  }
  protected endDestination(): void {
    this.body?.push(null);
  }
  protected destroy(): void {
    clearTimeout(this.headTimer);
    this.abortRequest?.();
    this.body?.destroy();
  }
  pause(): void {
    // onData's return value pauses the socket; nothing else to do.
  }
  resume(): void {
    this.resumeSocket?.();
  }
  get statusCode(): number {
    return this.status;
  }
  protected override finished(): void {
    clearTimeout(this.headTimer);
    super.finished();
  }
}

/** undici refuses an Expect header (100-continue); such requests take the node:http path. */
export function poolCanCarry(head: HttpHead): boolean {
  if (head.upgrade) return false;
  for (let i = 0; i < head.headers.length; i += 2) if (head.headers[i]!.toLowerCase() === 'expect') return false;
  return true;
}

export class TcpStream extends ClientStream {
  private readonly sock: net.Socket;
  private connected = false;

  constructor(sid: number, out: Sender, onFinish: (s: ClientStream) => void, readonly head: TcpHead, local: LocalTarget) {
    super(sid, out, onFinish);
    this.sock = net.connect({ host: local.host, port: local.port, noDelay: true, allowHalfOpen: true, lookup: connectOptions(local).lookup });
    this.sock.on('connect', () => (this.connected = true));
    this.sock.on('data', (chunk: Buffer) => this.forward(chunk));
    this.sock.on('drain', () => this.meter.drained());
    this.sock.on('end', () => this.localEnded());
    this.sock.on('error', (err) => {
      if (!this.connected && !this.done) this.localFailure ??= { err };
      this.reset(this.connected ? 'closing' : 'local-unreachable');
    });
    // Both directions ended normally: the stream is already done and this is a no-op.
    this.sock.on('close', () => this.reset('closing'));
  }
  onData(bytes: Buffer): void {
    if (this.done) return;
    this.bytesIn += bytes.length;
    this.meter.wrote(bytes.length, this.sock.write(bytes));
  }
  protected endDestination(): void {
    this.sock.end();
  }
  protected destroy(): void {
    this.sock.destroy();
  }
  pause(): void {
    this.sock.pause();
  }
  resume(): void {
    this.sock.resume();
  }
}
