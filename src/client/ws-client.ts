import http from 'node:http';
import https from 'node:https';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { WS_CLOSE, WS_OP, WsDecoder, WsFrameError, encodeClosePayload, encodeWsHeader, parseClosePayload } from '../protocol/ws-frames.js';

// The client end of the control WebSocket, on a raw socket (RFC 6455, binary messages only).
// Why not undici's WebSocket: a refused upgrade must tell 401 from 403 from 503 (permanent
// vs transient), the socket must get TCP_NODELAY, and writes must report backpressure;
// a browser-shaped WebSocket API gives none of these. Framing is protocol/ws-frames.ts.

export class WsRefused extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`upgrade refused with HTTP ${status}`);
  }
}

export interface WsClientEvents {
  message: [Buffer];
  close: [number, string];
  drain: [];
}

export class WsClient extends EventEmitter<WsClientEvents> {
  private readonly decoder: WsDecoder;
  private fragments: Buffer[] = [];
  private closed = false;

  private constructor(
    readonly socket: Socket,
    head: Buffer,
    maxMessageBytes: number,
  ) {
    super();
    this.decoder = new WsDecoder({ maxPayloadBytes: maxMessageBytes, expectMasked: false });
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => this.onData(d));
    socket.on('drain', () => this.emit('drain'));
    socket.on('error', () => undefined);
    socket.on('close', () => this.finish(WS_CLOSE.Abnormal, 'connection lost'));
    if (head.length) setImmediate(() => this.onData(head));
  }

  /** `ca`: the certificates to verify a wss:// server with (default: Node's roots). */
  static connect(url: string, headers: Record<string, string>, maxMessageBytes: number, timeoutMs: number, ca?: string[]): Promise<WsClient> {
    const u = new URL(url);
    const secure = u.protocol === 'https:' || u.protocol === 'wss:';
    const lib = secure ? https : http;
    return new Promise((resolve, reject) => {
      const req = lib.request({
        host: u.hostname,
        port: u.port || (secure ? 443 : 80),
        path: u.pathname + u.search,
        method: 'GET',
        headers: {
          ...headers,
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': randomBytes(16).toString('base64'),
        },
        timeout: timeoutMs,
        ...(secure && ca ? { ca } : {}),
      });
      req.on('socket', (s: Socket) => s.setNoDelay(true));
      req.on('timeout', () => req.destroy(new Error(`no answer from ${u.host} within ${timeoutMs} ms`)));
      req.on('error', reject);
      req.on('response', (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d.length < 4096 ? d : ''));
        res.on('end', () => reject(new WsRefused(res.statusCode ?? 0, body)));
        res.on('error', reject);
      });
      req.on('upgrade', (res, socket: Socket, head: Buffer) => {
        if (res.statusCode !== 101) {
          socket.destroy();
          reject(new WsRefused(res.statusCode ?? 0, ''));
          return;
        }
        resolve(new WsClient(socket, head, maxMessageBytes));
      });
      req.end();
    });
  }

  /** Sends one binary message; false when the socket's buffer is over its high-water mark. */
  send(payload: Uint8Array): boolean {
    if (this.closed) return false;
    this.corkTick();
    return this.writeFrame(WS_OP.Binary, payload);
  }

  /** Sends one binary message made of two buffers (a frame head and a payload), no copy. */
  sendParts(head: Uint8Array, payload: Uint8Array): boolean {
    if (this.closed) return false;
    this.corkTick();
    this.writeHeader(WS_OP.Binary, head.byteLength + payload.byteLength);
    this.socket.write(head);
    return this.socket.write(payload);
  }

  /**
   * Frames written in one loop turn leave in one writev: the socket stays corked until
   * setImmediate (libuv's check phase, after every socket read of this turn). With nextTick,
   * each local response read was its own write; per turn, 64 concurrent requests measured
   * 12.4k -> 15.9k req/s and a small request beside a bulk download 10.5 -> 5.2 ms p50.
   */
  private corked = false;
  private readonly uncork = (): void => {
    this.corked = false;
    this.socket.uncork();
  };
  private corkTick(): void {
    if (this.corked) return;
    this.corked = true;
    this.socket.cork();
    setImmediate(this.uncork);
  }

  /** The connection ended (a close frame either way, or the socket went). */
  get isClosed(): boolean {
    return this.closed;
  }

  get bufferedBytes(): number {
    return this.socket.writableLength;
  }

  private writeFrame(op: number, payload: Uint8Array): boolean {
    const n = payload.byteLength;
    this.writeHeader(op, n);
    if (n === 0) return !this.socket.writableNeedDrain;
    return this.socket.write(payload);
  }

  private writeHeader(op: number, n: number): void {
    this.socket.write(encodeWsHeader(op, n, true));
  }

  close(code = 1000, reason = ''): void {
    if (this.closed) return;
    this.writeFrame(WS_OP.Close, encodeClosePayload(code, reason));
    this.socket.end();
    this.finish(code, reason);
  }

  destroy(): void {
    this.socket.destroy();
    this.finish(WS_CLOSE.Abnormal, 'destroyed');
  }

  private finish(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.destroy();
    this.emit('close', code, reason);
  }

  private onData(d: Buffer): void {
    this.decoder.push(d);
    try {
      while (!this.closed && this.handleOne());
    } catch (err) {
      if (!(err instanceof WsFrameError)) throw err;
      this.close(err.closeCode, err.message);
    }
  }

  private handleOne(): boolean {
    const frame = this.decoder.next();
    if (!frame) return false;
    const { op, fin, payload } = frame;
    switch (op) {
      case WS_OP.Ping:
        this.writeFrame(WS_OP.Pong, payload);
        return true;
      case WS_OP.Pong:
        return true;
      case WS_OP.Close: {
        const { code, reason } = parseClosePayload(payload);
        this.writeFrame(WS_OP.Close, payload.subarray(0, 2));
        this.socket.end();
        this.finish(code, reason);
        return false;
      }
      default: {
        if (op !== WS_OP.Continuation) this.fragments = [];
        if (fin && this.fragments.length === 0) {
          this.emit('message', payload);
          return true;
        }
        this.fragments.push(payload);
        if (fin) {
          const all = Buffer.concat(this.fragments);
          this.fragments = [];
          this.emit('message', all);
        }
        return true;
      }
    }
  }
}
