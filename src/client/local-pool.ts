import net from 'node:net';
import tls from 'node:tls';
import { ResponseParser, type ResponseHead } from '../protocol/http1-parser.js';
import { connectOptions, type LocalTarget } from './local-target.js';

// Raw keep-alive connections to the local service, for the tunnel's HTTP streams. Each request
// is written as bytes on one of them and its answer read with llhttp (the parser Node itself
// uses), only to find where it ends and check its head: the answer's bytes are relayed as they
// came, and the edge parses them again before a visitor sees any.
//
//   RawHttpStream ─acquire─▶ LocalPool ─▶ idle LocalConn, or a new one (net / tls.connect)
//        ◀── head/body/end (ResponseParser) ◀── local service
//   answer complete and reusable ─release─▶ idle (at most MAX_IDLE), else closed
//
// Requests without a body share at most `maxActive` connections (the rest wait, in order): a
// burst of visitors must not open thousands of connections to a dev server. Uploads take a
// connection outside that bound: one that stalls holds its own connection, not a shared slot.

const MAX_IDLE = 256;

/** What a connection tells the stream it currently carries. */
export interface ConnUser {
  onResponseHead(h: ResponseHead): void;
  onResponseBody(chunk: Buffer): void;
  onResponseEnd(): void;
  /** Raw bytes read from the local service (what the parser consumed of them belongs to this user). */
  onRaw(chunk: Buffer): void;
  onDrain(): void;
  /** The local service half-closed (end of a close-delimited answer, or of an upgraded stream). */
  onEof(): void;
  /** The connection failed or closed; `reused`: it had carried an earlier request. */
  onConnError(err: Error | null, reused: boolean): void;
}

/** One connection to the local service and its response parser. */
export class LocalConn {
  readonly socket: net.Socket;
  readonly parser: ResponseParser;
  user: ConnUser | null = null;
  /** It carried a request before (a failure before any answer may be a stale keep-alive). */
  reused = false;
  /** After a 101: raw bytes both ways, never back to the pool. */
  upgraded = false;
  private closed = false;

  constructor(local: LocalTarget, private readonly pool: LocalPool) {
    this.parser = new ResponseParser({
      head: (h) => this.user?.onResponseHead(h),
      body: (chunk) => this.user?.onResponseBody(chunk),
      end: () => this.user?.onResponseEnd(),
    });
    const opts = { host: local.host, port: local.port, noDelay: true, allowHalfOpen: true, ...connectOptions(local) };
    this.socket = local.tls ? tls.connect(opts) : net.connect(opts);
    this.socket.setNoDelay(true);
    this.socket.on('data', (chunk: Buffer) => this.user?.onRaw(chunk));
    this.socket.on('drain', () => this.user?.onDrain());
    this.socket.on('error', (err) => this.lost(err));
    this.socket.on('end', () => {
      if (this.user) this.user.onEof();
      else this.lost(null);
    });
    this.socket.on('close', () => this.lost(null));
  }

  private lost(err: Error | null): void {
    if (this.closed) return;
    this.closed = true;
    this.pool.forget(this);
    this.parser.close();
    const u = this.user;
    this.user = null;
    u?.onConnError(err, this.reused);
    this.socket.destroy();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  destroy(): void {
    this.lost(null);
  }
}

/** A request waiting for a connection (the stream itself: no closure per request). */
export interface ConnWaiter {
  granted(c: LocalConn): void;
}

export class LocalPool {
  private readonly idle: LocalConn[] = [];
  private readonly all = new Set<LocalConn>();
  private sharedActive = 0;
  private readonly waiting: ConnWaiter[] = [];
  private closed = false;

  constructor(
    private readonly local: LocalTarget,
    private readonly maxActive: number,
  ) {}

  /**
   * A connection for one request: `shared` requests (no body) wait for one of `maxActive`;
   * `fresh` (an upgrade, or a retry after a stale keep-alive) never takes an idle one.
   * Calls the waiter's `granted` at once or when a shared slot frees.
   */
  acquire(shared: boolean, fresh: boolean, waiter: ConnWaiter): void {
    if (shared && this.sharedActive >= this.maxActive) {
      this.waiting.push(waiter);
      return;
    }
    if (shared) this.sharedActive++;
    waiter.granted(this.take(fresh));
  }

  /** A new connection in place of one that failed (the request keeps its slot). */
  fresh(): LocalConn {
    return this.take(true);
  }

  private take(fresh: boolean): LocalConn {
    if (!fresh) {
      for (let c = this.idle.pop(); c; c = this.idle.pop()) if (!c.isClosed) return c;
    }
    const c = new LocalConn(this.local, this);
    this.all.add(c);
    return c;
  }

  /** The request is over: its connection goes back to the idle list when `reusable`, else closes. */
  release(c: LocalConn, shared: boolean, reusable: boolean): void {
    c.user = null;
    if (reusable && !this.closed && !c.isClosed && !c.upgraded && this.idle.length < MAX_IDLE) {
      c.reused = true;
      // The last stream may have paused it (its window spent by the answer's last bytes).
      c.socket.resume();
      this.idle.push(c);
    } else c.destroy();
    if (!shared) return;
    const next = this.waiting.shift();
    if (next) next.granted(this.take(false));
    else this.sharedActive--;
  }

  /** A connection closed on its own. */
  forget(c: LocalConn): void {
    this.all.delete(c);
    const i = this.idle.indexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
  }

  /** The tunnel ends: every connection, idle or busy. */
  close(): void {
    this.closed = true;
    this.waiting.length = 0;
    for (const c of [...this.all]) c.destroy();
  }
}
