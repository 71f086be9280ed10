import type { HttpHead } from './frames.js';
import { isName } from './http-headers.js';

// A visitor request's head as bytes, the way the local service gets it. The edge builds it once
// from the head it already filtered (requestHeaders: X-Forwarded-*, no hop-by-hop fields), and a
// client that said so in Hello (rawHeads) writes it to the local service as it is: no header
// strings decoded from msgpack and joined again per request. Older clients get the head's fields.

const CR = 13;
const LF = 10;

function hasContentLength(headers: readonly string[]): boolean {
  for (let i = 0; i < headers.length; i += 2) if (isName(headers[i]!, 'content-length')) return true;
  return false;
}

/** A body of unknown length goes chunked toward the local service (the edge decodes the visitor's framing). */
export function sendsChunked(head: HttpHead): boolean {
  return head.raw !== undefined ? head.chunked === true : !head.end && !head.upgrade && !hasContentLength(head.headers);
}

/**
 * The head toward the local service, from its fields, as bytes (latin1): request line, fields,
 * Transfer-Encoding when `chunked`, the blank line. The one serializer of a request head; the
 * edge's raw StreamOpen writes the same bytes in place (writeRequestHead).
 */
export function requestHeadBytes(head: HttpHead, chunked: boolean): Buffer {
  const b = Buffer.allocUnsafe(requestHeadLength(head, chunked));
  writeRequestHead(head, chunked, b, 0);
  return b;
}

/** The length of the head's bytes (latin1: a character a byte). */
export function requestHeadLength(head: HttpHead, chunked: boolean): number {
  let n = head.method.length + head.target.length + 12; // ' ' and ' HTTP/1.1\r\n'
  const h = head.headers;
  for (let i = 0; i < h.length; i += 2) n += h[i]!.length + h[i + 1]!.length + 4;
  return n + (chunked ? CHUNKED_LINE.length : 0) + 2;
}

/** Writes the head's bytes at `o` in `buf` (which has room), piece by piece; returns the end. */
export function writeRequestHead(head: HttpHead, chunked: boolean, buf: Buffer, o: number): number {
  o += buf.write(head.method, o, 'latin1');
  buf[o++] = 0x20;
  o += buf.write(head.target, o, 'latin1');
  o += buf.write(' HTTP/1.1\r\n', o, 'latin1');
  const h = head.headers;
  for (let i = 0; i < h.length; i += 2) {
    o += buf.write(h[i]!, o, 'latin1');
    buf[o++] = 0x3a; // ':'
    buf[o++] = 0x20;
    o += buf.write(h[i + 1]!, o, 'latin1');
    buf[o++] = CR;
    buf[o++] = LF;
  }
  if (chunked) o += buf.write(CHUNKED_LINE, o, 'latin1');
  buf[o++] = CR;
  buf[o++] = LF;
  return o;
}
const CHUNKED_LINE = 'Transfer-Encoding: chunked\r\n';

/** The head with its fields as bytes (HttpHead.raw), for a client that takes them. */
export function withRawHead(head: HttpHead): HttpHead {
  const chunked = sendsChunked(head);
  const raw = requestHeadBytes(head, chunked);
  return { kind: 'http', method: head.method, target: head.target, headers: [], upgrade: head.upgrade, ...(head.end ? { end: true } : {}), raw, chunked, ...(head.protocol ? { protocol: head.protocol } : {}) };
}

/**
 * Why `raw` is not a head this client may write for a request of `method` and `target`, or
 * null: it starts with their request line, every line ends in CRLF (no bare CR or LF, no NUL),
 * and the blank line that ends it is its last. A server cannot smuggle a second request in.
 */
export function rawHeadProblem(raw: Uint8Array, method: string, target: string): string | null {
  const line = `${method} ${target} HTTP/1.1\r\n`;
  const n = raw.byteLength;
  if (n < line.length + 2) return 'shorter than its request line';
  for (let i = 0; i < line.length; i++) if (raw[i] !== line.charCodeAt(i)) return 'its request line is not the head\'s method and target';
  let lineStart = line.length;
  for (let i = lineStart; i < n; i++) {
    const c = raw[i]!;
    if (c === LF) {
      if (raw[i - 1] !== CR) return 'a bare LF';
      // An empty line ends the head: only as its last bytes.
      if (i - 1 === lineStart && i !== n - 1) return 'bytes after the blank line that ends it';
      lineStart = i + 1;
    } else if (c === CR) {
      if (raw[i + 1] !== LF) return 'a bare CR';
    } else if (c === 0) return 'a NUL byte';
  }
  if (lineStart !== n || raw[n - 3] !== LF) return 'no blank line at its end';
  return null;
}

/**
 * The header fields of a raw head, flat [name, value, …] (for what needs them: the inspector, a
 * Host rewrite), as the head's `headers` were: without the Transfer-Encoding the edge added for
 * a chunked body (a visitor's own is hop-by-hop, never passed on).
 */
export function headersOfRaw(raw: Uint8Array): string[] {
  const text = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('latin1');
  const out: string[] = [];
  let at = text.indexOf('\r\n') + 2;
  for (;;) {
    const end = text.indexOf('\r\n', at);
    if (end <= at) break;
    const colon = text.indexOf(':', at);
    if (colon < 0 || colon > end) break;
    const name = text.slice(at, colon);
    if (!(name.length === 17 && name.toLowerCase() === 'transfer-encoding')) out.push(name, text.slice(colon + 1, end).trim());
    at = end + 2;
  }
  return out;
}

/** The head with fields instead of bytes (a client that rewrites Host works on fields). */
export function withFields(head: HttpHead): HttpHead {
  if (head.raw === undefined) return head;
  const { raw, chunked: _chunked, ...rest } = head;
  return { ...rest, headers: headersOfRaw(raw) };
}
