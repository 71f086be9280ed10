import type { Capture } from './store.js';

// The list's filter (the page's filter bar, and `GET /api/requests?method=…&status=…&path=…&text=…`
// for scripts). Every part is optional; a capture is shown when it matches all the parts given.
// Text is searched in header names and values and in the kept part of both bodies, so it runs
// here, next to the bodies, rather than in the page, which holds only the list's summaries.

export interface CaptureFilter {
  /** "GET": exact, any case. */
  method?: string;
  /** 2…5 for 2xx…5xx; "failed": no response (the local service was down, too slow, …). */
  status?: 2 | 3 | 4 | 5 | 'failed';
  /** A substring of the path and query, any case. */
  path?: string;
  /** A substring of a header name or value or of a body, any case. */
  text?: string;
}

export class FilterError extends Error {}

/** Reads the filter from a query string; a malformed part is a FilterError naming it. */
export function parseFilter(q: URLSearchParams): CaptureFilter {
  const f: CaptureFilter = {};
  const method = q.get('method')?.trim();
  if (method) f.method = method.toUpperCase();
  const status = q.get('status')?.trim().toLowerCase();
  if (status) {
    const m = /^([2-5])xx$/.exec(status);
    if (m) f.status = Number(m[1]) as 2 | 3 | 4 | 5;
    else if (status === 'failed') f.status = 'failed';
    else throw new FilterError(`status must be 2xx, 3xx, 4xx, 5xx or failed, got ${JSON.stringify(status.slice(0, 20))}`);
  }
  const path = q.get('path');
  if (path) f.path = path.toLowerCase();
  const text = q.get('text');
  if (text) f.text = text.toLowerCase();
  return f;
}

export function isEmptyFilter(f: CaptureFilter): boolean {
  return f.method === undefined && f.status === undefined && f.path === undefined && f.text === undefined;
}

function statusMatches(c: Capture, want: NonNullable<CaptureFilter['status']>): boolean {
  if (want === 'failed') return c.status === null && c.state === 'failed';
  // A failed request counts under the status the visitor got (the list shows 502 Bad Gateway).
  const shown = c.status ?? c.visitorStatus;
  return shown !== null && Math.floor(shown / 100) === want;
}

/** `needle` is lower case already. */
function textMatches(c: Capture, needle: string): boolean {
  for (const side of [c.request, c.response]) {
    for (const [name, value] of side.headers) if (name.toLowerCase().includes(needle) || value.toLowerCase().includes(needle)) return true;
    // Invalid UTF-8 decodes to U+FFFD, so a binary body matches only its textual runs.
    if (side.kept > 0 && side.body().toString('utf8').toLowerCase().includes(needle)) return true;
  }
  return false;
}

export function captureMatches(c: Capture, f: CaptureFilter): boolean {
  if (f.method !== undefined && c.method.toUpperCase() !== f.method) return false;
  if (f.status !== undefined && !statusMatches(c, f.status)) return false;
  if (f.path !== undefined && !c.path.toLowerCase().includes(f.path)) return false;
  // Last: the only part that reads the bodies.
  return f.text === undefined || textMatches(c, f.text);
}
