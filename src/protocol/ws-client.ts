import http from 'node:http';
import https from 'node:https';
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { WsConnection } from '../protocol/ws-connection.js';
import { lookupLoopbackNames } from './loopback-names.js';

// The client end of the control WebSocket, on a raw socket (RFC 6455, binary messages only).
// Why not undici's WebSocket: a refused upgrade must tell 401 from 403 from 503 (permanent
// vs transient), the socket must get TCP_NODELAY, and writes must report backpressure;
// a browser-shaped WebSocket API gives none of these. Framing is protocol/ws-frames.ts.

export class WsRefused extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    /** The answer's Retry-After in seconds (delta form only, 0..3600); null when absent or other. */
    readonly retryAfterS: number | null = null,
    /** The answer's Content-Type: burrowd's refusals are problem+json, another server's are not. */
    readonly contentType: string | null = null,
  ) {
    super(`upgrade refused with HTTP ${status}`);
  }
}

/** A Retry-After in seconds; an HTTP date or anything else is ignored (the backoff applies). */
function retryAfterOf(v: string | undefined): number | null {
  if (v === undefined || !/^\d{1,4}$/.test(v.trim())) return null;
  const s = Number(v.trim());
  return s <= 3600 ? s : null;
}

/** The client end: connects, checks the 101, then is a WsConnection of role 'client'. */
export class WsClient extends WsConnection {
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
        lookup: lookupLoopbackNames,
        ...(secure && ca ? { ca } : {}),
      });
      req.on('socket', (s: Socket) => s.setNoDelay(true));
      req.on('timeout', () => req.destroy(new Error(`no answer from ${u.host} within ${timeoutMs} ms`)));
      req.on('error', reject);
      req.on('response', (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d.length < 4096 ? d : ''));
        res.on('end', () => reject(new WsRefused(res.statusCode ?? 0, body, retryAfterOf(res.headers['retry-after']), res.headers['content-type'] ?? null)));
        res.on('error', reject);
      });
      req.on('upgrade', (res, socket: Socket, head: Buffer) => {
        if (res.statusCode !== 101) {
          socket.destroy();
          reject(new WsRefused(res.statusCode ?? 0, ''));
          return;
        }
        resolve(new WsClient(socket, head, maxMessageBytes, 'client'));
      });
      req.end();
    });
  }

}
