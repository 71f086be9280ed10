import type { Capture, Header } from './store.js';

// HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) of the kept captures, oldest first as
// browsers export it. Bodies are text when they are valid UTF-8 of a textual type, else base64
// (`encoding: "base64"` on response content; `_encoding` on postData, which HAR 1.2 lacks).
// Only the kept part of a body is exported; `_truncated` says when that is not all of it.

export interface HarHeader {
  name: string;
  value: string;
}

const TEXTUAL = /^(text\/|application\/(json|[\w.+-]+\+json|xml|[\w.+-]+\+xml|javascript|ecmascript|x-www-form-urlencoded|graphql)|image\/svg\+xml)/i;

function header(headers: readonly Header[], name: string): string | undefined {
  const n = name.toLowerCase();
  return headers.find(([k]) => k.toLowerCase() === n)?.[1];
}

/** Text when `body` is valid UTF-8 and its type is textual (or unknown and it decodes). */
export function bodyAsText(body: Buffer, contentType: string | undefined): string | null {
  if (contentType && !TEXTUAL.test(contentType.trim())) return null;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return null;
  }
}

function queryString(path: string): HarHeader[] {
  const q = path.indexOf('?');
  if (q < 0) return [];
  const out: HarHeader[] = [];
  for (const [name, value] of new URLSearchParams(path.slice(q + 1))) out.push({ name, value });
  return out;
}

function cookies(headers: readonly Header[], name: 'cookie' | 'set-cookie'): HarHeader[] {
  const out: HarHeader[] = [];
  for (const [k, v] of headers) {
    if (k.toLowerCase() !== name) continue;
    const parts = name === 'cookie' ? v.split(';') : [v.split(';')[0] ?? ''];
    for (const p of parts) {
      const eq = p.indexOf('=');
      if (eq > 0) out.push({ name: p.slice(0, eq).trim(), value: p.slice(eq + 1).trim() });
    }
  }
  return out;
}

/**
 * The public URL a visitor asked for: scheme and host from the X-Forwarded-Proto and
 * X-Forwarded-Host the edge sets (a visitor's own are dropped there), so a Host rewritten for the
 * local service (--host-header) does not leak in; Host when the edge's are missing.
 */
export function visitorUrl(c: Capture): string {
  const h = c.request.headers;
  const proto = (header(h, 'x-forwarded-proto') ?? 'http').split(',')[0]!.trim() === 'https' ? 'https' : 'http';
  const host = header(h, 'x-forwarded-host') || header(h, 'host') || 'localhost';
  return `${proto}://${host}${c.path.startsWith('/') ? c.path : `/${c.path}`}`;
}

export function harEntry(c: Capture): Record<string, unknown> {
  const reqBody = c.request.body();
  const resBody = c.response.body();
  const reqType = header(c.request.headers, 'content-type');
  const resType = header(c.response.headers, 'content-type');
  const reqText = bodyAsText(reqBody, reqType);
  const resText = bodyAsText(resBody, resType);
  const time = c.durationMs ?? 0;
  const request: Record<string, unknown> = {
    method: c.method,
    url: visitorUrl(c),
    httpVersion: 'HTTP/1.1',
    cookies: cookies(c.request.headers, 'cookie'),
    headers: c.request.headers.map(([name, value]) => ({ name, value })),
    queryString: queryString(c.path),
    headersSize: -1,
    bodySize: c.request.size,
  };
  if (c.request.size > 0) {
    request.postData = {
      mimeType: reqType ?? '',
      text: reqText ?? reqBody.toString('base64'),
      ...(reqText === null ? { _encoding: 'base64' } : {}),
      ...(c.request.truncated ? { _truncated: true } : {}),
    };
  }
  return {
    startedDateTime: c.startedAt.toISOString(),
    time,
    request,
    response: {
      status: c.status ?? 0,
      statusText: c.statusLine?.reason ?? '',
      httpVersion: c.statusLine?.version ?? 'HTTP/1.1',
      cookies: cookies(c.response.headers, 'set-cookie'),
      headers: c.response.headers.map(([name, value]) => ({ name, value })),
      content: {
        size: c.response.size,
        mimeType: resType ?? '',
        text: resText ?? resBody.toString('base64'),
        ...(resText === null ? { encoding: 'base64' } : {}),
        ...(c.response.truncated ? { _truncated: true } : {}),
      },
      redirectURL: header(c.response.headers, 'location') ?? '',
      headersSize: -1,
      bodySize: c.status === null ? -1 : c.response.size,
      ...(c.error ? { _error: c.error } : {}),
    },
    cache: {},
    timings: { send: 0, wait: time, receive: 0 },
    ...(c.replayOf ? { _replayOf: c.replayOf } : {}),
    _id: c.id,
    _tunnel: c.tunnel,
  };
}

/** The HAR document's text, entries oldest first. Built per entry: the store may hold ~100 MiB. */
export function* harChunks(captures: readonly Capture[], version: string): Generator<string> {
  yield `{"log":{"version":"1.2","creator":{"name":"burrow","version":${JSON.stringify(version)}},"pages":[],"entries":[`;
  let first = true;
  for (const c of captures) {
    yield (first ? '' : ',') + JSON.stringify(harEntry(c));
    first = false;
  }
  yield ']}}';
}
