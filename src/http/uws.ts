import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from '@trufflesuite/uws-js-unofficial';
import { ApiError, problemOf, type ProblemCode } from '../errors.js';
import type { Logger } from '../log.js';

// The only file that touches uWS HttpRequest/HttpResponse for buffered (non-streaming)
// routes. uWS rules this file keeps so no handler has to:
//  - `req` is valid only synchronously inside the route callback: copy everything first.
//  - a response must not be touched after onAborted fired; every write after an await
//    goes through res.cork() so headers and body leave in one syscall.
//  - bodies arrive as chunks whose ArrayBuffer is reused after the callback: copy them.

export interface RequestData {
  method: string;
  /** Path without the query string. */
  path: string;
  query: URLSearchParams;
  /** Lower-case names; the last value wins for repeated headers. */
  headers: Map<string, string>;
  /** Path parameters in pattern order. */
  params: string[];
  ip: string;
  body: Buffer;
}

export interface Reply {
  status: number;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

export type RouteHandler = (req: RequestData) => Promise<Reply> | Reply;

/** Hands a request to someone else before any parsing (public tunnel traffic by Host). */
export type HostDispatch = (res: HttpResponse, req: HttpRequest) => boolean;

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK', 201: '201 Created', 204: '204 No Content', 302: '302 Found', 303: '303 See Other',
  400: '400 Bad Request', 401: '401 Unauthorized', 403: '403 Forbidden', 404: '404 Not Found',
  405: '405 Method Not Allowed', 409: '409 Conflict', 413: '413 Payload Too Large',
  415: '415 Unsupported Media Type', 429: '429 Too Many Requests', 500: '500 Internal Server Error',
  502: '502 Bad Gateway', 503: '503 Service Unavailable', 504: '504 Gateway Timeout',
};

export function statusLine(status: number): string {
  return STATUS_TEXT[status] ?? `${status} Status`;
}

export function problemReply(code: ProblemCode, detail: string, extra?: Pick<ApiError, 'errors' | 'headers'>): Reply {
  const body = problemOf(code, detail, extra?.errors);
  return {
    status: body.status,
    headers: { 'content-type': 'application/problem+json', ...extra?.headers },
    body: JSON.stringify(body),
  };
}

export function jsonReply(status: number, value: unknown): Reply {
  return { status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(value) };
}

/** Counts requests in flight so a drain can wait for them, and refuses new ones while draining. */
export class Inflight {
  count = 0;
  draining = false;
  private waiters: (() => void)[] = [];
  enter(): void {
    this.count++;
  }
  leave(): void {
    this.count--;
    if (this.count === 0) for (const w of this.waiters.splice(0)) w();
  }
  /** Resolves when nothing is in flight, or after `timeoutMs` (whichever first). */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.count === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(false), timeoutMs);
      this.waiters.push(() => {
        clearTimeout(t);
        resolve(true);
      });
    });
  }
}

export interface HttpServer {
  app: TemplatedApp;
  inflight: Inflight;
  log: Logger;
  maxBodyBytes: number;
  dispatch?: HostDispatch;
}

type Method = 'get' | 'post' | 'put' | 'del' | 'patch' | 'head' | 'options' | 'any';

export function remoteIp(res: HttpResponse): string {
  const text = Buffer.from(res.getRemoteAddressAsText()).toString();
  // IPv4 clients on a dual-stack socket show up as ::ffff:a.b.c.d
  return text.startsWith('0000:0000:0000:0000:0000:ffff:') || text.startsWith('::ffff:') ? text.slice(text.lastIndexOf(':') + 1) : text;
}

/** Registers a buffered route: headers copied, body collected up to the limit, handler awaited. */
export function route(server: HttpServer, method: Method, pattern: string, paramCount: number, handler: RouteHandler): void {
  server.app[method](pattern, (res, req) => {
    if (server.dispatch?.(res, req)) return;
    serve(server, res, req, paramCount, handler);
  });
}

function serve(server: HttpServer, res: HttpResponse, req: HttpRequest, paramCount: number, handler: RouteHandler): void {
  const { inflight, maxBodyBytes, log } = server;
  const url = req.getUrl();
  const headers = new Map<string, string>();
  req.forEach((k, v) => headers.set(k, v));
  const params: string[] = [];
  let badParam: string | null = null;
  for (let i = 0; i < paramCount; i++) {
    const raw = req.getParameter(i) ?? '';
    try {
      params.push(decodeURIComponent(raw));
    } catch {
      badParam = raw; // a malformed %-escape: answered 400 below, never thrown out of the route
      params.push(raw);
    }
  }
  const data: RequestData = {
    method: req.getMethod().toUpperCase(),
    path: url,
    query: new URLSearchParams(req.getQuery() ?? ''),
    headers,
    params,
    ip: remoteIp(res),
    body: Buffer.alloc(0),
  };
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });

  const send = (reply: Reply, closeConnection = false): void => {
    if (aborted) return;
    res.cork(() => {
      res.writeStatus(statusLine(reply.status));
      for (const [k, v] of Object.entries(reply.headers ?? {})) res.writeHeader(k, v);
      if (inflight.draining) res.writeHeader('connection', 'close');
      res.end(reply.body ?? '', closeConnection || inflight.draining);
    });
  };

  if (inflight.draining) {
    send(problemReply('unavailable', 'server is shutting down'), true);
    return;
  }
  if (badParam !== null) {
    send(problemReply('bad-request', `path segment "${badParam}" has a malformed %-escape`));
    return;
  }

  const declared = Number(headers.get('content-length') ?? 0);
  const hasBody = headers.has('content-length') || headers.has('transfer-encoding');
  if (declared > maxBodyBytes) {
    // Close: the client may still be sending a body we will not read.
    send(problemReply('payload-too-large', `request body of ${declared} bytes is over the ${maxBodyBytes}-byte limit`), true);
    return;
  }

  inflight.enter();
  const finish = (reply: Reply, close = false): void => {
    send(reply, close);
    inflight.leave();
  };
  const run = (): void => {
    Promise.resolve()
      .then(() => handler(data))
      .then(
        (reply) => finish(reply),
        (err: unknown) => {
          // An 'internal' ApiError is another thread's exception (toCodedError keeps its
          // message for the log): its text is ours, not the caller's.
          if (err instanceof ApiError && err.code !== 'internal') return finish(problemReply(err.code, err.detail, err));
          log.error({ err, path: data.path }, 'unhandled error in route');
          finish(problemReply('internal', 'the server failed to handle this request; it has been logged'));
        },
      );
  };

  if (!hasBody || data.method === 'GET' || data.method === 'HEAD') {
    run();
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  res.onData((chunk, isLast) => {
    if (size < 0) return;
    size += chunk.byteLength;
    if (size > maxBodyBytes) {
      size = -1;
      finish(problemReply('payload-too-large', `request body is over the ${maxBodyBytes}-byte limit`), true);
      return;
    }
    chunks.push(Buffer.from(chunk.slice(0)));
    if (isLast) {
      data.body = Buffer.concat(chunks);
      run();
    }
  });
}

export function closeListen(uws: { us_listen_socket_close(s: us_listen_socket): void }, s: us_listen_socket | null): void {
  if (s) uws.us_listen_socket_close(s);
}

/** Closes the App's listen sockets and every connection (present in the binary, missing from its typings). */
export function closeApp(app: TemplatedApp): void {
  (app as TemplatedApp & { close(): void }).close();
}
