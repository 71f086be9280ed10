import { readFileSync } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { burrowVersion } from '../../version.js';
import type { TunnelObserver } from '../observer.js';
import { curlCommand } from './curl.js';
import { captureMatches, FilterError, isEmptyFilter, parseFilter } from './filter.js';
import { harChunks } from './har.js';
import { parseEdits, replay, ReplayError, type ReplayTarget } from './replay.js';
import type { StatusJson, StatusSource } from './status.js';
import { CaptureStore, type CaptureSummary } from './store.js';

// The request inspector's local web server (`burrow http`, `burrow start`): the page, its JSON
// API, server-sent events for the live list, replay, HAR export and the run's status.
//
//   tunnel client ──TunnelObserver──▶ CaptureStore ──added/updated/cleared──▶ GET /api/events (SSE) ──▶ page
//   GET /api/requests[?method,status,path,text,ids], /api/requests/{id}, …/{id}/curl, /api/requests.har
//   DELETE /api/requests                                          empties the store (Clear)
//   POST /api/requests/{id}/replay ──▶ replay.ts ──▶ local service; recorded as a new capture
//   GET /status (the page), /api/status ◀── StatusSource (status.ts), also sent as SSE `status`
//
// It binds loopback unless told otherwise, and answers only requests whose Host is an IP
// literal or a localhost name: a page on another site that rebinds its DNS name to 127.0.0.1
// would otherwise read the API as same-origin. Nothing sends CORS headers, and a POST from
// another origin is refused, so another site can neither read captures nor trigger replays or
// a Clear.

export const DEFAULT_INSPECT_HOST = '127.0.0.1';
export const DEFAULT_INSPECT_PORT = 4040;
/** Ports tried from the base when the default address is taken (4040, 4041, …). */
export const INSPECT_PORT_TRIES = 10;

const MAX_SSE_CLIENTS = 16;
/** A live-list client this far behind is dropped (it reconnects and gets a fresh snapshot). */
const MAX_SSE_BACKLOG_BYTES = 1024 * 1024;
const SSE_KEEPALIVE_MS = 15_000;
const MAX_API_BODY_BYTES = 2 * 1024 * 1024;
const MAX_CONCURRENT_REPLAYS = 8;

export interface InspectAddress {
  host: string;
  port: number;
}

/** "4040", "127.0.0.1:4040", "localhost:4040", "0.0.0.0:4040", "[::1]:4040" → host and port. */
export function parseInspectAddress(v: string): InspectAddress {
  const s = v.trim();
  const port = (p: string): number => {
    const n = Number(p);
    if (!/^\d+$/.test(p) || n < 1 || n > 65535) throw new Error(`expected a port (4040) or host:port (127.0.0.1:4040), got "${v}"`);
    return n;
  };
  if (/^\d+$/.test(s)) return { host: DEFAULT_INSPECT_HOST, port: port(s) };
  const v6 = /^\[([0-9a-f:.]+)\]:(\d+)$/i.exec(s);
  if (v6 && isIP(v6[1]!) === 6) return { host: v6[1]!, port: port(v6[2]!) };
  const hp = /^([A-Za-z0-9.-]+):(\d+)$/.exec(s);
  if (hp) return { host: hp[1]!, port: port(hp[2]!) };
  throw new Error(`expected a port (4040) or host:port (127.0.0.1:4040), got "${v}"`);
}

/** Loopback names and addresses (anything else exposes the inspector to the network). */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

/**
 * DNS-rebinding guard: the Host a browser sends is the name in its address bar. A name other
 * than an IP literal or localhost may have been pointed at this machine by someone else.
 */
export function hostAllowed(hostHeader: string | undefined): boolean {
  if (!hostHeader) return false;
  let name: string;
  if (hostHeader.startsWith('[')) {
    const end = hostHeader.indexOf(']');
    if (end < 0) return false;
    name = hostHeader.slice(1, end);
    return isIP(name) === 6 && /^(:\d{1,5})?$/.test(hostHeader.slice(end + 1));
  }
  const m = /^([^:]+)(:\d{1,5})?$/.exec(hostHeader);
  if (!m) return false;
  name = m[1]!.toLowerCase();
  return isIP(name) === 4 || name === 'localhost' || name.endsWith('.localhost');
}

export class InspectorListenError extends Error {}

export interface InspectorOptions {
  /** An address the user asked for (--inspect): that one or an error. */
  address?: InspectAddress;
  /** Without `address`: 127.0.0.1 from this port up (INSPECT_PORT_TRIES ports); 4040 unless set. */
  basePort?: number;
  store?: CaptureStore;
}

export interface Inspector {
  /** http://host:port of the page */
  url: string;
  store: CaptureStore;
  /**
   * The observer to give a tunnel's client; its captures are labelled `tunnel` (a function: the
   * id, once the server assigned one) and replays of them go to `target`. `credentials`: the
   * tunnel's basic-auth USER:PASS, which "Copy as cURL" adds when asked (the edge removes the
   * visitor's Authorization, so the capture does not hold it).
   */
  observer(tunnel: string | (() => string), target: ReplayTarget, credentials?: string | null): TunnelObserver;
  /** What the status page and the page's header show (tunnels, server, connection). */
  showStatus(source: StatusSource): void;
  close(): Promise<void>;
}

let page: Buffer | null = null;
function pageHtml(): Buffer {
  // dist/src/client/inspector/server.js → the package root → the one static page (kept as HTML
  // so it stays a plain file to read and edit; tsc does not copy it).
  page ??= readFileSync(new URL('../../../../src/client/inspector/page.html', import.meta.url));
  return page;
}

const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
};

function problem(res: ServerResponse, status: number, title: string, detail: string, extra: Record<string, string> = {}): void {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { ...SECURITY_HEADERS, ...extra, 'content-type': 'application/problem+json' });
  res.end(JSON.stringify({ type: 'about:blank', title, status, detail }));
}

function json(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify(value));
}

/** Writes chunks with backpressure (the API's lists may be ~100 MiB). */
async function stream(res: ServerResponse, chunks: Iterable<string>): Promise<void> {
  for (const c of chunks) {
    if (res.destroyed) return;
    if (!res.write(c)) {
      await new Promise<void>((resolve) => {
        const go = () => {
          res.off('drain', go);
          res.off('close', go);
          resolve();
        };
        res.on('drain', go);
        res.on('close', go);
      });
    }
  }
  res.end();
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    req.on('data', (c: Buffer) => {
      n += c.length;
      if (n > limit) {
        reject(new ReplayError(413, `the request body may be at most ${limit / 1024 / 1024} MiB`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** Another site's page may POST here (forms need no CORS): only our own origin may. */
function crossOrigin(req: IncomingMessage): string | null {
  const site = req.headers['sec-fetch-site'];
  if (site && site !== 'same-origin' && site !== 'none') return `Sec-Fetch-Site: ${site}`;
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== `http://${req.headers.host}`) return `Origin: ${origin}`;
  return null;
}

class InspectorServer {
  private readonly sse = new Set<ServerResponse>();
  private replays = 0;
  private readonly keepalive: NodeJS.Timeout;
  private statusSource: StatusSource | null = null;
  private readonly statusChanged = () => {
    if (this.sse.size > 0) this.broadcast(this.statusEvent());
  };

  // Every request passes the store (the tunnel's hot path): it builds summaries only for
  // listeners, and these listen only while a page has the live list open.
  private readonly onAdded = (s: CaptureSummary) => this.broadcast(`event: added\ndata: ${JSON.stringify(s)}\n\n`);
  private readonly onUpdated = (s: CaptureSummary) => this.broadcast(`event: updated\ndata: ${JSON.stringify(s)}\n\n`);
  private listening = false;

  constructor(readonly store: CaptureStore) {
    store.on('cleared', () => this.broadcast('event: cleared\ndata: {}\n\n'));
    this.keepalive = setInterval(() => this.broadcast(': keepalive\n\n'), SSE_KEEPALIVE_MS);
    this.keepalive.unref();
  }

  /** Listens to the store while (and only while) a live list is open. */
  private followStore(): void {
    const want = this.sse.size > 0;
    if (want === this.listening) return;
    this.listening = want;
    if (want) {
      this.store.on('added', this.onAdded);
      this.store.on('updated', this.onUpdated);
    } else {
      this.store.off('added', this.onAdded);
      this.store.off('updated', this.onUpdated);
    }
  }

  showStatus(source: StatusSource): void {
    this.statusSource?.off('changed', this.statusChanged);
    this.statusSource = source;
    source.on('changed', this.statusChanged);
    this.statusChanged();
  }

  /** Before the CLI handed a source (or in tests without one): nothing known but the version. */
  private status(): StatusJson {
    const s = this.statusSource?.status() ?? { server: { url: '', version: null, latency_ms: null }, state: 'connecting' as const, state_detail: null, tunnels: [] };
    return { version: burrowVersion(), ...s };
  }

  private statusEvent(): string {
    return `event: status\ndata: ${JSON.stringify(this.status())}\n\n`;
  }

  closeStreams(): void {
    this.statusSource?.off('changed', this.statusChanged);
    clearInterval(this.keepalive);
    for (const r of this.sse) r.end();
    this.sse.clear();
    this.followStore();
  }

  private broadcast(text: string): void {
    for (const r of this.sse) {
      if (r.writableLength > MAX_SSE_BACKLOG_BYTES) {
        this.sse.delete(r);
        r.destroy();
        continue;
      }
      r.write(text);
    }
    this.followStore();
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.route(req, res).catch((err: unknown) => {
      if (err instanceof FilterError) problem(res, 400, 'Bad Request', err.message);
      else if (err instanceof ReplayError) problem(res, err.status, err.status === 413 ? 'Payload Too Large' : err.status === 409 ? 'Conflict' : 'Bad Request', err.message);
      else problem(res, 500, 'Internal Server Error', `the inspector failed: ${(err as Error).message}`);
    });
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hostAllowed(req.headers.host)) {
      return problem(res, 403, 'Forbidden', `the inspector answers only to an IP address or localhost in the Host header, not ${JSON.stringify(req.headers.host ?? '')} (this stops other sites reaching it through DNS rebinding): open it as http://127.0.0.1:<port>`);
    }
    const url = new URL(req.url ?? '/', 'http://inspector');
    const path = url.pathname;
    const method = req.method ?? 'GET';
    const only = (...allowed: string[]): boolean => {
      if (allowed.includes(method) || (allowed.includes('GET') && method === 'HEAD')) return true;
      const allow = allowed.flatMap((m) => (m === 'GET' ? ['GET', 'HEAD'] : [m])).join(', ');
      problem(res, 405, 'Method Not Allowed', `${path} accepts ${allowed.join(' or ')}`, { allow });
      return false;
    };
    // One page: it shows the status view at /status.
    if (path === '/' || path === '/index.html' || path === '/status') {
      if (!only('GET')) return;
      res.writeHead(200, {
        ...SECURITY_HEADERS,
        'content-type': 'text/html; charset=utf-8',
        // The page is self-contained: inline script and style, its own API, nothing else.
        'content-security-policy': "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
      });
      return void res.end(method === 'HEAD' ? undefined : pageHtml());
    }
    if (path === '/api/requests') {
      if (!only('GET', 'DELETE')) return;
      if (method === 'DELETE') {
        const foreign = crossOrigin(req);
        if (foreign) return problem(res, 403, 'Forbidden', `clearing is refused to other sites (${foreign})`);
        this.store.clear();
        res.writeHead(204, SECURITY_HEADERS);
        return void res.end();
      }
      const filter = parseFilter(url.searchParams);
      // view=summary: the list's rows only (the page asks which rows a filter keeps); ids=1,2:
      // only those (the page asks about new rows alone).
      const summary = url.searchParams.get('view') === 'summary';
      const ids = url.searchParams.get('ids');
      const kept = ids === null ? this.store.list() : ids.split(',', this.store.limits.maxEntries).flatMap((id) => this.store.get(id) ?? []);
      const list = isEmptyFilter(filter) ? kept : kept.filter((c) => captureMatches(c, filter));
      res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'application/json; charset=utf-8' });
      return stream(res, (function* () {
        yield '[';
        for (let i = 0; i < list.length; i++) yield (i ? ',' : '') + JSON.stringify(summary ? list[i]!.summary() : list[i]);
        yield ']';
      })());
    }
    if (path === '/api/status') {
      if (!only('GET')) return;
      return json(res, 200, this.status());
    }
    if (path === '/api/requests.har') {
      if (!only('GET')) return;
      const stamp = new Date().toISOString().replace(/[:.]/g, '-');
      res.writeHead(200, {
        ...SECURITY_HEADERS,
        'content-type': 'application/json; charset=utf-8',
        'content-disposition': `attachment; filename="burrow-${stamp}.har"`,
      });
      return stream(res, harChunks(this.store.list().reverse(), burrowVersion()));
    }
    if (path === '/api/events') {
      if (!only('GET')) return;
      return this.events(req, res);
    }
    const m = /^\/api\/requests\/([^/]+)(\/replay|\/curl)?$/.exec(path);
    if (m) {
      const id = m[1]!;
      const capture = /^\d{1,15}$/.test(id) ? this.store.get(id) : undefined;
      if (m[2] !== '/replay') {
        if (!only('GET')) return;
        if (!capture) return problem(res, 404, 'Not Found', `no request ${JSON.stringify(id)} is kept (the inspector keeps the last ${this.store.limits.maxEntries})`);
        if (!m[2]) return json(res, 200, capture);
        // ?credentials=1: with the tunnel's basic-auth credential (the page's toggle, off by default).
        const withCredentials = url.searchParams.get('credentials') === '1';
        res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8' });
        return void res.end(method === 'HEAD' ? undefined : `${curlCommand(capture, withCredentials)}\n`);
      }
      if (!only('POST')) return;
      const foreign = crossOrigin(req);
      if (foreign) return problem(res, 403, 'Forbidden', `replay is refused to other sites (${foreign})`);
      const type = req.headers['content-type'];
      const raw = await readBody(req, MAX_API_BODY_BYTES);
      if (raw.length && !/^application\/json\b/i.test(type ?? '')) return problem(res, 415, 'Unsupported Media Type', 'send the edits as application/json, or no body to replay as is');
      if (!capture) return problem(res, 404, 'Not Found', `no request ${JSON.stringify(id)} is kept (the inspector keeps the last ${this.store.limits.maxEntries})`);
      let edits;
      try {
        edits = parseEdits(raw.length ? JSON.parse(raw.toString('utf8')) : null);
      } catch (err) {
        if (err instanceof SyntaxError) throw new ReplayError(400, `the body is not JSON: ${err.message}`);
        throw err;
      }
      if (this.replays >= MAX_CONCURRENT_REPLAYS) return problem(res, 429, 'Too Many Requests', `at most ${MAX_CONCURRENT_REPLAYS} replays at a time`, { 'retry-after': '1' });
      this.replays++;
      try {
        const c = await replay(this.store, capture, edits);
        return json(res, 200, c);
      } finally {
        this.replays--;
      }
    }
    return problem(res, 404, 'Not Found', `no such page: ${path} (the API is under /api/requests)`);
  }

  private events(req: IncomingMessage, res: ServerResponse): void {
    if (this.sse.size >= MAX_SSE_CLIENTS) return problem(res, 503, 'Service Unavailable', `at most ${MAX_SSE_CLIENTS} live views at a time: close another tab`, { 'retry-after': '5' });
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8' });
    if (req.method === 'HEAD') return void res.end();
    // The list as it is now (newest first), then every change as it happens.
    res.write(`retry: 2000\nevent: snapshot\ndata: ${JSON.stringify(this.store.list().map((c) => c.summary()))}\n\n${this.statusEvent()}`);
    this.sse.add(res);
    this.followStore();
    res.on('close', () => {
      this.sse.delete(res);
      this.followStore();
    });
  }
}

function listenOn(server: http.Server, addr: InspectAddress): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      server.off('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      server.off('error', onError);
      resolve();
    };
    server.once('error', onError);
    server.once('listening', onListening);
    server.listen(addr.port, addr.host);
  });
}

/** Starts the inspector; rejects with InspectorListenError when no address could be bound. */
export async function startInspector(opts: InspectorOptions = {}): Promise<Inspector> {
  const store = opts.store ?? new CaptureStore();
  const inspector = new InspectorServer(store);
  const server = http.createServer({ maxHeaderSize: 16 * 1024 }, (req, res) => inspector.handle(req, res));
  server.headersTimeout = 10_000;
  server.requestTimeout = 60_000;
  const candidates: InspectAddress[] = opts.address
    ? [opts.address]
    : Array.from({ length: INSPECT_PORT_TRIES }, (_, i) => ({ host: DEFAULT_INSPECT_HOST, port: (opts.basePort ?? DEFAULT_INSPECT_PORT) + i })).filter((a) => a.port <= 65535);
  let bound: InspectAddress | null = null;
  let lastError: NodeJS.ErrnoException | null = null;
  for (const addr of candidates) {
    try {
      await listenOn(server, addr);
      bound = addr;
      break;
    } catch (err) {
      lastError = err as NodeJS.ErrnoException;
      if (lastError.code !== 'EADDRINUSE') break;
    }
  }
  if (!bound) {
    inspector.closeStreams();
    const first = candidates[0]!;
    const what = candidates.length > 1 ? `ports ${first.port}-${candidates.at(-1)!.port} on ${first.host} are all taken` : `${first.host}:${first.port}: ${lastError?.code === 'EADDRINUSE' ? 'address in use' : (lastError?.message ?? 'cannot listen')}`;
    throw new InspectorListenError(what);
  }
  const host = bound.host.includes(':') ? `[${bound.host}]` : bound.host;
  const port = (server.address() as { port: number }).port; // the real one when asked for port 0
  return {
    url: `http://${host}:${port}`,
    store,
    observer(tunnel, target, credentials = null) {
      const label = typeof tunnel === 'function' ? tunnel : () => tunnel;
      return { request: (head) => store.begin(label(), head, { target, credentials }) };
    },
    showStatus: (source) => inspector.showStatus(source),
    close: () =>
      new Promise<void>((resolve) => {
        inspector.closeStreams();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
