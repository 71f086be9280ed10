import http from 'node:http';
import https from 'node:https';
import { responseHeaders } from '../../protocol/http-headers.js';
import { describeLocalError } from '../local-error.js';
import { connectOptions, hostPort, withHostHeader, type LocalTarget } from '../local-target.js';
import type { Capture, CaptureStore, Header } from './store.js';

// Replay: the stored request (or an edited copy) sent again straight to the tunnel's LOCAL
// service, not through burrowd (as ngrok does: no visitor, no edge, no access rules), and
// recorded as a new capture whose `replay_of` names the original. It reaches that service as
// the tunnel does (local-target.ts): the same scheme and certificate check, the same Host rule,
// and `localhost` as both loopback addresses. Sent with node:http, whose rawHeaders keep the
// local service's header names as it wrote them (undici's request() gives them lower-cased, and
// a replay then read differently from its original).

/** Where a tunnel's local service is, for replays: the tunnel's own local target. */
export type ReplayTarget = LocalTarget;

/** The changes a user made in "Edit and replay" (all optional). */
export interface ReplayEdits {
  method?: string;
  path?: string;
  headers?: Header[];
  body?: Buffer;
}

export class ReplayError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const REPLAY_TIMEOUT_MS = 30_000;
const MAX_HEADERS = 256;
const MAX_HEADER_BYTES = 64 * 1024;
export const MAX_EDITED_BODY_BYTES = 1024 * 1024;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const PATH = /^\/[\x21-\x7e]*$/;
// Hop-by-hop or framing headers: the new connection frames the body itself (undici refuses
// most of these anyway).
const NOT_REPLAYED = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'expect', 'content-length']);

/** Checks edits from the page or API (hostile input: a bad value is a 400 naming it). */
export function parseEdits(raw: unknown): ReplayEdits {
  if (raw === null || raw === undefined) return {};
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new ReplayError(400, 'the body must be a JSON object: {method?, path?, headers?: [[name, value]…], body?: text, body_base64?: base64}');
  const o = raw as Record<string, unknown>;
  const known = new Set(['method', 'path', 'headers', 'body', 'body_base64']);
  for (const k of Object.keys(o)) if (!known.has(k)) throw new ReplayError(400, `unknown field "${k}" (expected method, path, headers, body or body_base64)`);
  const edits: ReplayEdits = {};
  if (o.method !== undefined) {
    if (typeof o.method !== 'string' || o.method.length > 32 || !TOKEN.test(o.method)) throw new ReplayError(400, `method must be an HTTP method token (e.g. GET), got ${JSON.stringify(o.method)}`);
    edits.method = o.method;
  }
  if (o.path !== undefined) {
    if (typeof o.path !== 'string' || o.path.length > 8192 || !PATH.test(o.path)) {
      throw new ReplayError(400, `path must start with "/" and contain no spaces or control characters (percent-encode them), got ${JSON.stringify(String(o.path).slice(0, 100))}`);
    }
    edits.path = o.path;
  }
  if (o.headers !== undefined) {
    if (!Array.isArray(o.headers) || o.headers.length > MAX_HEADERS) throw new ReplayError(400, `headers must be a list of at most ${MAX_HEADERS} [name, value] pairs`);
    let bytes = 0;
    edits.headers = o.headers.map((h, i) => {
      if (!Array.isArray(h) || h.length !== 2 || typeof h[0] !== 'string' || typeof h[1] !== 'string') throw new ReplayError(400, `headers[${i}] must be a [name, value] pair of strings`);
      const [name, value] = h as [string, string];
      if (!TOKEN.test(name)) throw new ReplayError(400, `headers[${i}]: ${JSON.stringify(name.slice(0, 100))} is not a valid header name`);
      if (!FIELD_VALUE.test(value)) throw new ReplayError(400, `headers[${i}] (${name}): the value may not contain line breaks or control characters`);
      bytes += name.length + value.length;
      if (bytes > MAX_HEADER_BYTES) throw new ReplayError(400, `headers exceed ${MAX_HEADER_BYTES / 1024} KiB`);
      return [name, value] as Header;
    });
  }
  if (o.body !== undefined && o.body_base64 !== undefined) throw new ReplayError(400, 'give body (text) or body_base64, not both');
  if (o.body !== undefined) {
    if (typeof o.body !== 'string') throw new ReplayError(400, 'body must be a string (use body_base64 for binary)');
    edits.body = Buffer.from(o.body, 'utf8');
  }
  if (o.body_base64 !== undefined) {
    if (typeof o.body_base64 !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(o.body_base64)) throw new ReplayError(400, 'body_base64 must be base64');
    edits.body = Buffer.from(o.body_base64, 'base64');
  }
  if (edits.body && edits.body.length > MAX_EDITED_BODY_BYTES) throw new ReplayError(413, `an edited body may be at most ${MAX_EDITED_BODY_BYTES / 1024} KiB`);
  return edits;
}

/** Why the replay got no answer, in the words the status screen uses for a visitor's request. */
function describe(err: unknown, target: LocalTarget, timedOut: boolean): string {
  if (timedOut) return describeLocalError(null, hostPort(target), REPLAY_TIMEOUT_MS);
  return describeLocalError(err instanceof Error ? err : new Error(String(err)), hostPort(target));
}

/** Sends `original` (with `edits`) to `target` and records it; resolves with the new capture. */
export async function replay(store: CaptureStore, original: Capture, edits: ReplayEdits): Promise<Capture> {
  const target = original.target;
  if (!target) throw new ReplayError(409, `request ${original.id} has no local service to replay to`);
  if (!edits.body && original.request.truncated) {
    throw new ReplayError(409, `the request body was ${original.request.size} bytes and only its first ${original.request.kept} were kept: replay it with an edited body`);
  }
  const method = edits.method ?? original.method;
  const path = edits.path ?? original.path;
  const headers = (edits.headers ?? original.request.headers).filter(([n]) => !NOT_REPLAYED.has(n.toLowerCase()));
  const body = edits.body ?? original.request.body();
  // The tunnel's Host rule applies after any edit, as it does to every visitor's request.
  const flat = withHostHeader(headers.flatMap(([n, v]) => [n, v]), target);
  // node:http adds neither when given the headers as a list: HTTP/1.1 needs a Host, and a body its length.
  if (!flat.some((n, i) => i % 2 === 0 && n.toLowerCase() === 'host')) flat.unshift('Host', hostPort(target));
  if (body.length || !['GET', 'HEAD'].includes(method)) flat.push('Content-Length', String(body.length));
  const obs = store.begin(original.tunnel, { method, target: path, headers: flat }, { replayOf: original.id, target, credentials: original.credentials });
  if (body.length) obs.requestBody(body);
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), REPLAY_TIMEOUT_MS);
  try {
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      // The path goes as is (not resolved against the origin): //elsewhere.example/ stays a path
      // on the local service. No agent: a replay is one request on its own connection.
      const req = (target.tls ? https : http).request({ host: target.host, port: target.port, method, path, headers: flat, setHost: false, agent: false, signal: ac.signal, ...connectOptions(target) });
      req.on('response', resolve);
      req.on('error', reject);
      req.end(body.length ? body : undefined);
    });
    // The same hop-by-hop rule as a tunnelled response, so a replay reads like its original.
    obs.response(res.statusCode ?? 0, responseHeaders(res.rawHeaders), { version: res.httpVersion === '1.0' ? 'HTTP/1.0' : 'HTTP/1.1', reason: res.statusMessage ?? '' });
    for await (const chunk of res) obs.responseBody(chunk as Buffer);
    obs.end();
  } catch (err) {
    obs.fail(describe(err, target, ac.signal.aborted));
  } finally {
    clearTimeout(timer);
  }
  return obs.capture;
}
