import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from '@trufflesuite/uws-js-unofficial';
import { ApiError, unavailableError, type ProblemCode } from '../errors.js';
import { isDatabaseDown } from '../db/sql.js';
import type { Logger } from '../log.js';
import { problemReply, renderProblem, statusLine, type Reply } from './problem.js';
import { clientAddress, type ClientAddress } from './client-address.js';

export { problemReply, statusLine, type Reply };

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

export type RouteHandler = (req: RequestData) => Promise<Reply> | Reply;

/**
 * Answers problem+json on a raw uWS response (tunnel traffic, refusals outside the router): the
 * one renderer besides the router's `send`. `status` overrides the code's own only where a
 * handshake maps codes itself; `closeConnection` ends the connection after the answer. `html`
 * (public tunnel traffic whose visitor prefers text/html, see problem-page.ts): the same problem
 * as a small HTML page; the API always answers JSON.
 */
export function writeProblem(
  res: HttpResponse,
  code: ProblemCode,
  detail: string,
  opts: { extra?: Pick<ApiError, 'errors' | 'headers'>; status?: number; closeConnection?: boolean; html?: boolean } = {},
): void {
  const reply = renderProblem(code, detail, opts);
  res.cork(() => {
    res.writeStatus(statusLine(reply.status));
    for (const [k, v] of Object.entries(reply.headers ?? {})) res.writeHeader(k, v);
    res.end(reply.body, opts.closeConnection);
  });
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
}

type Method = 'get' | 'post' | 'put' | 'del' | 'patch' | 'head' | 'options' | 'any';

/**
 * The request's client address (src/http/client-address.ts), or null after answering 400 and
 * closing: the connection broke the listener's rules (--proxy-protocol without a PROXY header).
 */
export function requireClientAddress(res: HttpResponse, req: HttpRequest): ClientAddress | null {
  const address = clientAddress(res, req);
  if (address === null) {
    res.onAborted(() => undefined);
    writeProblem(res, 'bad-request', 'this listener expects a PROXY protocol header (--proxy-protocol) before the request', { closeConnection: true });
  }
  return address;
}

/** Registers a buffered route: headers copied, body collected up to the limit, handler awaited. */
export function route(server: HttpServer, method: Method, pattern: string, paramCount: number, handler: RouteHandler): void {
  const callback = (res: HttpResponse, req: HttpRequest): void => {
    if (refuseBadFraming(res, req)) return;
    const address = requireClientAddress(res, req);
    if (address === null) return;
    serve(server, res, req, paramCount, handler, address);
  };
  server.app[method](pattern, callback);
  // HEAD is GET without the body (RFC 9110 §9.3.2); `send` leaves the body out.
  if (method === 'get') server.app.head(pattern, callback);
}

function serve(server: HttpServer, res: HttpResponse, req: HttpRequest, paramCount: number, handler: RouteHandler, address: ClientAddress): void {
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
    ip: address.ip,
    body: Buffer.alloc(0),
  };
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });

  // RFC 9112 §9.6: a client that says close gets `Connection: close` back; Node's agent
  // otherwise reuses the socket uWS closes.
  const clientCloses = wantsClose(headers.get('connection'));
  const send = (reply: Reply, closeConnection = false): void => {
    if (aborted) return;
    const close = closeConnection || inflight.draining || clientCloses;
    res.cork(() => {
      res.writeStatus(statusLine(reply.status));
      for (const [k, v] of Object.entries(reply.headers ?? {})) res.writeHeader(k, v);
      // uWS does not echo a close the client asked for (it only closes); RFC 9112 §9.6 wants it said.
      if (clientCloses) res.writeHeader('connection', 'close');
      if (data.method === 'HEAD') {
        // The GET's headers, no body. endWithoutBody() without arguments: given a length (or
        // undefined) this uWS build writes `Content-Length: 9223372036854775808` or leaves the
        // response pending, so the length is written here.
        res.writeHeader('content-length', String(Buffer.byteLength(reply.body ?? '')));
        if (close && !clientCloses) res.writeHeader('connection', 'close');
        res.endWithoutBody();
        return;
      }
      // end(…, true) closes once the response is out, and says so unless the client asked.
      res.end(reply.body ?? '', close);
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
    if (aborted) return;
    const onChunk = refuseBody(res, problemReply('payload-too-large', `request body of ${declared} bytes is over the ${maxBodyBytes}-byte limit`), clientCloses, () => aborted);
    if (onChunk) res.onData((_chunk, isLast) => onChunk(isLast));
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
          // Routes outside the API table (browser login) meet the database too: an outage is
          // a 503 with Retry-After there as well, not a 500.
          if (isDatabaseDown(err)) {
            log.warn({ err: { code: (err as { code?: string }).code, message: (err as Error).message }, path: data.path }, 'database unavailable');
            const down = unavailableError('the database is unreachable; try again shortly');
            return finish(problemReply(down.code, down.detail, down));
          }
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
  let refused: ((isLast: boolean) => void) | null = null;
  res.onData((chunk, isLast) => {
    if (size < 0) {
      refused?.(isLast); // refused: the rest is read and dropped
      return;
    }
    size += chunk.byteLength;
    if (size > maxBodyBytes) {
      size = -1;
      inflight.leave();
      if (aborted) return;
      refused = refuseBody(res, problemReply('payload-too-large', `request body is over the ${maxBodyBytes}-byte limit`), clientCloses, () => aborted);
      refused?.(isLast);
      return;
    }
    chunks.push(Buffer.from(chunk.slice(0)));
    if (isLast) {
      data.body = Buffer.concat(chunks);
      run();
    }
  });
}

/** True when a Connection header value has the `close` option. */
export function wantsClose(connection: string | undefined): boolean {
  return connection !== undefined && connection.split(',').some((t) => t.trim().toLowerCase() === 'close');
}

/** A refused upload that pauses this long is taken as stopped (RFC 9112 §9.5 lets clients stop). */
const REFUSAL_QUIET_MS = 1_000;
/** Nor is a refused upload read for longer than this (nginx's lingering_time). */
const REFUSAL_LINGER_MS = 30_000;

/**
 * Answers a request whose body will not be read (413) at once, with `Connection: close`, and
 * goes on reading and dropping the body, so a client still uploading reads the 413 instead of
 * EPIPE or a reset (nginx's lingering close), then closes as told. Not `end(…, true)`: uWS then
 * sends FIN at once and Node's clients fail their upload with EPIPE.
 *
 * When the client itself said `Connection: close`, uWS closes the moment the response ends, and
 * the reset for the body bytes still arriving can destroy the 413 before the client read it. Such
 * a response goes out chunked and ends once the body is in, or once the upload has been quiet
 * for REFUSAL_QUIET_MS (a client that stopped sending, as RFC 9112 §9.5 allows, still gets its
 * response's end), or after REFUSAL_LINGER_MS. Returns the `onChunk(isLast)` to call for each
 * further body chunk, or null when the response is already complete.
 */
function refuseBody(res: HttpResponse, reply: Reply, clientCloses: boolean, isAborted: () => boolean): ((isLast: boolean) => void) | null {
  res.cork(() => {
    res.writeStatus(statusLine(reply.status));
    for (const [k, v] of Object.entries(reply.headers ?? {})) res.writeHeader(k, v);
    res.writeHeader('connection', 'close');
    if (clientCloses) res.write(reply.body ?? '');
    else res.end(reply.body ?? '');
  });
  if (!clientCloses) return null;
  let ended = false;
  const end = (): void => {
    if (ended) return;
    ended = true;
    clearTimeout(quiet);
    clearTimeout(limit);
    if (!isAborted()) res.cork(() => res.end());
  };
  let quiet = setTimeout(end, REFUSAL_QUIET_MS);
  const limit = setTimeout(end, REFUSAL_LINGER_MS);
  return (isLast) => {
    if (ended) return;
    if (isLast) return end();
    clearTimeout(quiet);
    quiet = setTimeout(end, REFUSAL_QUIET_MS);
  };
}

/** uWS's own send buffer (cork) size: a response larger than this is written before we return. */
const CORK_BUFFER_BYTES = 16 * 1024;

/**
 * Refuses a request whose body framing uWS cannot or should not be trusted with, before any
 * routing (API and tunnels). Duplicate Content-Length values that differ would let uWS frame by
 * the first while a proxy behind frames by another (smuggling). A Content-Length that is not 1–9
 * digits (this uWS build reads at most 9) is handed to the route and then the connection is reset
 * as soon as the callback returns, discarding whatever was corked: the answer is padded past the
 * cork buffer so uWS writes it to the socket during `end`, before that reset.
 */
function refuseBadFraming(res: HttpResponse, req: HttpRequest): boolean {
  let length: string | null = null;
  let reply = null as Reply | null;
  req.forEach((k, v) => {
    if (reply || k !== 'content-length') return;
    if (length !== null && length !== v) {
      reply = problemReply('bad-request', `conflicting Content-Length headers (${length} and ${v})`);
    } else if (!/^\d{1,9}$/.test(v)) {
      reply = /^\d+$/.test(v)
        ? problemReply('payload-too-large', `a Content-Length of ${v} bytes is over what this server accepts (999999999 bytes at most; chunked bodies are not limited by this)`)
        : problemReply('bad-request', `Content-Length ${JSON.stringify(v.slice(0, 32))} is not a number of bytes`);
    }
    length = v;
  });
  if (!reply) return false;
  const r: Reply = reply;
  const body = String(r.body ?? '');
  // JSON allows trailing whitespace: the padding keeps the problem document valid.
  const padded = body + ' '.repeat(Math.max(0, CORK_BUFFER_BYTES + 1 - body.length));
  res.onAborted(() => undefined);
  res.cork(() => {
    res.writeStatus(statusLine(r.status));
    for (const [k, v] of Object.entries(r.headers ?? {})) res.writeHeader(k, v);
    res.end(padded, true);
  });
  return true;
}

export function closeListen(uws: { us_listen_socket_close(s: us_listen_socket): void }, s: us_listen_socket | null): void {
  if (s) uws.us_listen_socket_close(s);
}

/** Closes the App's listen sockets and every connection (present in the binary, missing from its typings). */
export function closeApp(app: TemplatedApp): void {
  (app as TemplatedApp & { close(): void }).close();
}
