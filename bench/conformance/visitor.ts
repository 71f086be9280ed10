// The visitor side of one case: a fresh loopback connection that writes exact bytes (several
// writes, with pauses, optionally a half-close) and records everything read back and whether
// the subject closed the connection; and a lenient parser of what came back, which reports
// what it saw rather than trusting it (leftover bytes that frame no response are kept).
import net from 'node:net';

/** One write: bytes at once, or after a pause; `end` half-closes (FIN) after writing. */
export type Write = string | Buffer | { data?: string | Buffer; delayMs?: number; end?: boolean };

export interface VisitorResult {
  raw: Buffer;
  /** The subject ended (FIN) or reset the connection before the deadline. */
  closed: boolean;
  /** Neither a close nor the expected answers came within the deadline. */
  timedOut: boolean;
}

export interface Response {
  version: string;
  status: number;
  /** Names lower-cased, in arrival order. */
  headers: [string, string][];
  /** The raw head text (start line and fields). */
  headText: string;
  body: Buffer;
  /** Its framing was complete (a close-delimited body is complete once the connection closed). */
  complete: boolean;
  header(name: string): string[];
}

export interface Parsed {
  /** Every response, interim 1xx included, in order. */
  all: Response[];
  /** Final (non-1xx) responses only. */
  finals: Response[];
  /** Bytes after the last response that frame none (garbage, or a truncated response). */
  leftover: Buffer;
}

/**
 * Parses consecutive responses. `headIdx`: indexes of final responses that answer a HEAD (no
 * body). A response without length is read to the end of the connection.
 */
export function parseResponses(buf: Buffer, closed: boolean, headIdx: number[] = []): Parsed {
  const all: Response[] = [];
  const finals: Response[] = [];
  let at = 0;
  for (;;) {
    if (at >= buf.length) break;
    // A line terminator in a head is CRLF here; a bare-LF head from a subject shows as leftover.
    const end = buf.indexOf('\r\n\r\n', at);
    if (end < 0) break;
    const headText = buf.subarray(at, end).toString('latin1');
    const lines = headText.split('\r\n');
    const m = /^(HTTP\/\d\.\d) (\d{3})(?: .*)?$/.exec(lines[0]!);
    if (!m) break;
    const status = Number(m[2]);
    const headers = lines.slice(1).map((l): [string, string] => {
      const c = l.indexOf(':');
      return c < 0 ? [l.toLowerCase(), ''] : [l.slice(0, c).toLowerCase(), l.slice(c + 1).trim()];
    });
    const header = (n: string): string[] => headers.filter(([k]) => k === n).map(([, v]) => v);
    let p = end + 4;
    let body: Buffer = Buffer.alloc(0);
    let complete = true;
    const interim = status >= 100 && status < 200;
    const bodyless = interim || status === 204 || status === 304 || (!interim && headIdx.includes(finals.length));
    if (!bodyless) {
      const te = header('transfer-encoding').join(',').toLowerCase();
      const cl = header('content-length');
      if (/chunked\s*$/.test(te)) {
        const parts: Buffer[] = [];
        complete = false;
        for (;;) {
          const le = buf.indexOf('\r\n', p);
          if (le < 0) break;
          const size = parseInt(buf.subarray(p, le).toString('latin1'), 16);
          if (!Number.isFinite(size)) break;
          if (size === 0) {
            const tend = buf.indexOf('\r\n\r\n', le);
            const direct = buf[le + 2] === 13 && buf[le + 3] === 10;
            if (direct) p = le + 4;
            else if (tend >= 0) p = tend + 4;
            else break;
            complete = true;
            break;
          }
          if (buf.length < le + 2 + size + 2) {
            parts.push(buf.subarray(le + 2, Math.min(buf.length, le + 2 + size)));
            p = buf.length;
            break;
          }
          parts.push(buf.subarray(le + 2, le + 2 + size));
          p = le + 2 + size + 2;
        }
        body = Buffer.concat(parts);
      } else if (cl.length > 0 && /^\d+$/.test(cl[0]!)) {
        const n = Number(cl[0]);
        complete = buf.length >= p + n;
        body = buf.subarray(p, Math.min(buf.length, p + n));
        p = Math.min(buf.length, p + n);
      } else {
        body = buf.subarray(p);
        p = buf.length;
        complete = closed;
      }
    }
    const r: Response = { version: m[1]!, status, headers, headText, body: Buffer.from(body), complete, header };
    all.push(r);
    if (!interim) finals.push(r);
    at = p;
    if (!complete) break;
  }
  return { all, finals, leftover: Buffer.from(buf.subarray(at)) };
}

/**
 * Runs the writes on a fresh connection; resolves when the subject closes, or when `expect`
 * final responses are complete and no close followed within `graceMs`, or at the deadline.
 */
export function visit(port: number, writes: Write[], opts: { deadlineMs: number; expect: number; headIdx: number[]; graceMs?: number }): Promise<VisitorResult> {
  const grace = opts.graceMs ?? 300;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let done = false;
    let graceTimer: NodeJS.Timeout | null = null;
    const s = net.connect(port, '127.0.0.1');
    s.setNoDelay(true);
    const finish = (closed: boolean, timedOut: boolean): void => {
      if (done) return;
      done = true;
      clearTimeout(deadline);
      if (graceTimer) clearTimeout(graceTimer);
      s.destroy();
      resolve({ raw: Buffer.concat(chunks), closed, timedOut });
    };
    const deadline = setTimeout(() => finish(false, true), opts.deadlineMs);
    s.on('data', (d: Buffer) => {
      chunks.push(d);
      if (graceTimer || opts.expect <= 0) return;
      const got = parseResponses(Buffer.concat(chunks), false, opts.headIdx);
      if (got.finals.filter((r) => r.complete).length >= opts.expect) graceTimer = setTimeout(() => finish(false, false), grace);
    });
    s.on('error', () => finish(true, false));
    s.on('close', () => finish(true, false));
    s.on('connect', async () => {
      for (const w of writes) {
        if (done) return;
        if (typeof w === 'string' || Buffer.isBuffer(w)) {
          s.write(w);
          continue;
        }
        if (w.delayMs) await new Promise((r) => setTimeout(r, w.delayMs));
        if (done) return;
        if (w.data !== undefined) s.write(w.data);
        if (w.end) s.end();
      }
    });
  });
}
