import type { Socket } from 'node:net';
import type { ApiError, ProblemCode } from '../errors.js';
import { renderProblem, statusLine } from '../http/problem.js';
import { NameSet } from '../protocol/http-headers.js';

// One response on a visitor's connection: the only writer of HTTP framing toward the public
// side. Whoever produces the response (a tunnel's client, the API behind the front, a refusal
// of the front's own) hands it a status, headers and body bytes; this decides the framing from
// the request (method, HTTP version, keep-alive) and the response (status, Content-Length):
//
//   bodiless (HEAD, 1xx, 204, 304)  head only; HEAD and 304 keep the origin's Content-Length
//   Content-Length n                 exactly n body bytes (more: cut, and the connection closes)
//   none, HTTP/1.1 visitor           Transfer-Encoding: chunked (the origin's framing is not kept)
//   none, HTTP/1.0 visitor           close-delimited: the connection ends with the body
//
// Headers come filtered of hop-by-hop fields by the producer; framing fields are dropped here
// again whatever it sent, so no producer can give the visitor a second framing.

const CRLF = '\r\n';
const LAST_CHUNK = Buffer.from('0\r\n\r\n');

/** Fields this writer owns: the producer's values never reach the visitor. */
const FRAMING = new NameSet(['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'proxy-connection', 'trailer', 'upgrade']);

/** What the connection does once a response is written (FrontConnection implements it). */
/** `HTTP/1.1 <status> <reason>\r\n` by status (at most 900 of them: llhttp reads three digits). */
const statusLines = new Map<number, string>();

/**
 * The head as one buffer: status line, the producer's headers minus framing fields, then the
 * framing and connection lines this writer chose. Written piece by piece into a buffer of the
 * exact size rather than built as a string: a head is every answer's largest garbage otherwise.
 * Header strings are latin1 (llhttp's, or ours), one byte a character, as `write` sends strings.
 */
function headBytes(status: number, headers: readonly string[], framing: string, connection: string): Buffer {
  let line = statusLines.get(status);
  if (line === undefined) statusLines.set(status, (line = `HTTP/1.1 ${statusLine(status)}${CRLF}`));
  let size = line.length + framing.length + connection.length + 2;
  for (let i = 0; i < headers.length; i += 2) if (!FRAMING.has(headers[i]!)) size += headers[i]!.length + headers[i + 1]!.length + 4;
  const buf = Buffer.allocUnsafe(size);
  let o = buf.write(line, 0, 'latin1');
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!;
    if (FRAMING.has(name)) continue;
    o += buf.write(name, o, 'latin1');
    buf[o++] = 0x3a; // ':'
    buf[o++] = 0x20;
    o += buf.write(headers[i + 1]!, o, 'latin1');
    buf[o++] = 0x0d;
    buf[o++] = 0x0a;
  }
  if (framing) o += buf.write(framing, o, 'latin1');
  if (connection) o += buf.write(connection, o, 'latin1');
  buf[o++] = 0x0d;
  buf[o] = 0x0a;
  return buf;
}

export interface ResponseSink {
  readonly socket: Socket;
  /** Writes toward the visitor (a string is latin1); small writes of one read leave as one send. Returns socket.write's answer. */
  write(chunk: string | Uint8Array): boolean;
  /** The response is complete on the wire: keep the connection for the next request, or close it. */
  responded(keepAlive: boolean): void;
}

export class VisitorResponse {
  /** The status line was written (no other response may start). */
  started = false;
  finished = false;
  /** The connection closes after this response (the request asked, or the framing needs it). */
  private keepAlive: boolean;
  private mode: 'none' | 'length' | 'chunked' | 'close' = 'none';
  private remaining = 0;
  status = 0;

  constructor(
    private readonly sink: ResponseSink,
    readonly method: string,
    readonly versionMinor: 0 | 1,
    requestKeepAlive: boolean,
  ) {
    this.keepAlive = requestKeepAlive;
  }

  /** Closes the connection after this response whatever the request asked (an upgrade declined, an error). */
  closeAfter(): void {
    this.keepAlive = false;
  }

  /**
   * Writes the status line and headers. `headers` flat [name, value, ...], already checked to
   * be tokens and values without CR/LF/NUL. `contentLength`: the body's declared length, or null.
   */
  head(status: number, headers: readonly string[], contentLength: number | null): void {
    if (this.started) return;
    this.started = true;
    this.status = status;
    const bodiless = this.method === 'HEAD' || status === 204 || status === 304 || status < 200;
    let framing = '';
    if (bodiless) {
      this.mode = 'none';
      if (contentLength !== null && status !== 204 && status >= 200) framing = `Content-Length: ${contentLength}${CRLF}`;
    } else if (contentLength !== null) {
      this.mode = 'length';
      this.remaining = contentLength;
      framing = `Content-Length: ${contentLength}${CRLF}`;
    } else if (this.versionMinor === 1) {
      this.mode = 'chunked';
      framing = `Transfer-Encoding: chunked${CRLF}`;
    } else {
      this.mode = 'close';
      this.keepAlive = false;
    }
    const connection = !this.keepAlive ? `Connection: close${CRLF}` : this.versionMinor === 0 ? `Connection: keep-alive${CRLF}` : '';
    this.sink.write(headBytes(status, headers, framing, connection));
    if (this.mode === 'none' || (this.mode === 'length' && this.remaining === 0)) this.complete();
  }

  /** An interim answer (100 Continue, 103 Early Hints) before the final one. */
  interim(status: number, headers: readonly string[]): void {
    if (this.started || this.versionMinor === 0) return;
    this.sink.write(headBytes(status, headers, '', ''));
  }

  /**
   * Body bytes (kept by reference: callers hand buffers nobody reuses). Returns what
   * socket.write returned (false: wait for 'drain' before counting them consumed); bytes a
   * bodiless response cannot carry are dropped and count as taken.
   */
  body(bytes: Uint8Array): boolean {
    if (this.finished || bytes.byteLength === 0) return true;
    const sink = this.sink;
    switch (this.mode) {
      case 'none':
        return true;
      case 'length': {
        // More than declared would be read as the next response: cut, and close after.
        const n = Math.min(bytes.byteLength, this.remaining);
        if (n < bytes.byteLength) this.keepAlive = false;
        this.remaining -= n;
        const ok = sink.write(n === bytes.byteLength ? bytes : bytes.subarray(0, n));
        if (this.remaining === 0) this.complete();
        return ok;
      }
      case 'chunked':
        sink.write(`${bytes.byteLength.toString(16)}${CRLF}`);
        sink.write(bytes);
        return sink.write(CRLF);
      case 'close':
        return sink.write(bytes);
    }
  }

  /** The producer has no more body. `trailers` (chunked only) as flat pairs, already checked. */
  end(trailers: readonly string[] = []): void {
    if (this.finished || !this.started) return;
    switch (this.mode) {
      case 'length':
        // Fewer bytes than declared: the visitor can only learn it from the connection closing.
        this.sink.socket.destroy();
        this.finished = true;
        return;
      case 'chunked': {
        if (trailers.length === 0) this.sink.write(LAST_CHUNK);
        else {
          let text = `0${CRLF}`;
          for (let i = 0; i < trailers.length; i += 2) if (!FRAMING.has(trailers[i]!)) text += `${trailers[i]}: ${trailers[i + 1]}${CRLF}`;
          this.sink.write(text + CRLF);
        }
        break;
      }
      case 'none':
      case 'close':
        break;
    }
    this.complete();
  }

  /** A whole short answer of the front's own (a refusal, a problem). */
  reply(status: number, headers: Record<string, string>, body: string | Buffer): void {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    const flat: string[] = [];
    for (const [k, v] of Object.entries(headers)) flat.push(k, v);
    this.head(status, flat, bytes.byteLength);
    if (!this.finished) this.body(bytes);
  }

  /** A problem+json answer (or its HTML page for a browser), rendered by the one renderer. */
  problem(code: ProblemCode, detail: string, opts: { extra?: Pick<ApiError, 'errors' | 'headers'>; html?: boolean; status?: number } = {}): void {
    const r = renderProblem(code, detail, opts);
    this.reply(r.status, r.headers ?? {}, r.body ?? '');
  }

  /** The response cannot be finished (its producer failed after the head): the connection ends. */
  abort(): void {
    if (this.finished) return;
    this.finished = true;
    this.sink.socket.destroy();
  }

  private complete(): void {
    if (this.finished) return;
    this.finished = true;
    this.sink.responded(this.keepAlive);
  }
}
