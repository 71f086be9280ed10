import http from 'node:http';
import type { ClientHttp2Session } from 'node:http2';
import net from 'node:net';
import { withDeadline } from '../helpers/deadline.js';

// Local services and raw visitors for the tunnel tests (real sockets on 127.0.0.1).

/**
 * Answers `bytes` of 0x62 in 64 KiB writes that wait for 'drain' (a service that keeps no more
 * than its socket takes); `onCut` when the answer could not be finished (its stream was reset).
 */
export function streamLargeAnswer(res: http.ServerResponse, bytes: number, onCut: () => void): void {
  res.writeHead(200, { 'content-length': String(bytes), 'content-type': 'application/octet-stream' });
  const chunk = Buffer.alloc(64 * 1024, 0x62);
  let left = bytes;
  const pump = (): void => {
    while (left > 0) {
      left -= chunk.byteLength;
      if (!res.write(chunk)) return void res.once('drain', pump);
    }
    res.end();
  };
  res.on('close', () => {
    if (!res.writableFinished) onCut();
  });
  pump();
}

export interface Local {
  port: number;
  server: http.Server | net.Server;
  close(): Promise<void>;
}

export function listen(server: http.Server | net.Server): Promise<Local> {
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      resolve({
        port,
        server,
        close: () =>
          new Promise<void>((r) => {
            (server as http.Server).closeAllConnections?.();
            server.close(() => r());
          }),
      });
    });
  });
}

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  rawHeaders: string[];
  body: Buffer;
}

/** One request to the tunnel's public side with Host <id>.localhost. */
export function visit(port: number, host: string, opts: { method?: string; path?: string; headers?: Record<string, string> | string[]; body?: Buffer | string; agent?: http.Agent | false } = {}, ms = 10_000): Promise<Reply> {
  return withDeadline(
    new Promise<Reply>((resolve, reject) => {
      const headers = Array.isArray(opts.headers) ? ['Host', host, ...opts.headers] : { host, ...opts.headers };
      const req = http.request({ host: '127.0.0.1', port, method: opts.method ?? 'GET', path: opts.path ?? '/', headers, agent: opts.agent ?? false, setHost: false });
      req.on('error', reject);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, rawHeaders: res.rawHeaders, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      req.end(opts.body);
    }),
    ms,
    `${opts.method ?? 'GET'} ${host}${opts.path ?? '/'}`,
  );
}

export function once<T extends unknown[]>(emitter: { once(ev: string, f: (...a: T) => void): unknown }, ev: string, ms: number): Promise<T> {
  return withDeadline(new Promise<T>((r) => emitter.once(ev, (...a: T) => r(a))), ms, `event ${ev}`);
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One bodiless HTTP/2 request on `session`: its status and body. */
export function h2Get(session: ClientHttp2Session, authority: string, path = '/'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':path': path, ':authority': authority });
    let status = 0;
    let body = '';
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => resolve({ status, body }));
    req.on('error', reject);
    req.end();
  });
}
