import net from 'node:net';
import { withDeadline } from '../helpers/deadline.js';

// Raw HTTP/1.1 on loopback for the edge tests: visitors that write exact bytes, a parser for
// what comes back, and an origin that records every byte a tunnel client delivers.

export interface RawResponse {
  status: number;
  /** Names lower-cased, in order, repeats kept. */
  headers: [string, string][];
  body: Buffer;
  header(name: string): string[];
}

export interface Exchange {
  /** Everything received, as latin1 text. */
  text: string;
  responses: RawResponse[];
  /** The server ended or reset the connection. */
  closed: boolean;
}

/**
 * Parses consecutive responses from `buf`. `noBody[i]`: the i-th answers a HEAD. Returns the
 * complete ones; an incomplete tail is left out.
 */
export function parseResponses(buf: Buffer, noBody: boolean[] = []): RawResponse[] {
  const out: RawResponse[] = [];
  let at = 0;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n', at);
    if (end < 0) return out;
    const lines = buf.subarray(at, end).toString('latin1').split('\r\n');
    const status = Number(lines[0]!.split(' ')[1]);
    const headers = lines.slice(1).map((l): [string, string] => {
      const c = l.indexOf(':');
      return [l.slice(0, c).toLowerCase(), l.slice(c + 1).trim()];
    });
    const header = (n: string): string[] => headers.filter(([k]) => k === n).map(([, v]) => v);
    let p = end + 4;
    let body: Buffer = Buffer.alloc(0);
    const bodyless = noBody[out.length] === true || status === 204 || status === 304 || (status >= 100 && status < 200);
    if (!bodyless && header('transfer-encoding').some((v) => /chunked/i.test(v))) {
      const parts: Buffer[] = [];
      for (;;) {
        const le = buf.indexOf('\r\n', p);
        if (le < 0) return out;
        const size = parseInt(buf.subarray(p, le).toString('latin1'), 16);
        if (!Number.isFinite(size)) throw new Error(`bad chunk size in response: ${buf.subarray(p, le).toString('latin1')}`);
        if (size === 0) {
          if (buf.length < le + 4) return out;
          p = le + 4;
          break;
        }
        if (buf.length < le + 2 + size + 2) return out;
        parts.push(buf.subarray(le + 2, le + 2 + size));
        p = le + 2 + size + 2;
      }
      body = Buffer.concat(parts);
    } else if (!bodyless && header('content-length').length > 0) {
      const n = Number(header('content-length')[0]);
      if (buf.length < p + n) return out;
      body = buf.subarray(p, p + n);
      p += n;
    }
    out.push({ status, headers, body, header });
    at = p;
  }
}

/**
 * Writes `bytes` to a fresh connection and waits until `expect` responses are complete (and,
 * with `untilClose`, the server closed), or the connection closes, or `ms` pass.
 */
export function exchange(port: number, bytes: string | Buffer, opts: { expect?: number; noBody?: boolean[]; untilClose?: boolean; until?: (text: string) => boolean; ms?: number } = {}): Promise<Exchange> {
  const expect = opts.expect ?? 1;
  const ms = opts.ms ?? 10_000;
  return withDeadline(
    new Promise<Exchange>((resolve) => {
      const chunks: Buffer[] = [];
      let done = false;
      const s = net.connect(port, '127.0.0.1', () => s.write(bytes));
      const finish = (closed: boolean): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        const buf = Buffer.concat(chunks);
        s.destroy();
        resolve({ text: buf.toString('latin1'), responses: parseResponses(buf, opts.noBody), closed });
      };
      const timer = setTimeout(() => finish(false), ms - 500);
      s.on('data', (d: Buffer) => {
        chunks.push(d);
        const all = Buffer.concat(chunks);
        if (opts.until ? opts.until(all.toString('latin1')) : !opts.untilClose && parseResponses(all, opts.noBody).length >= expect) finish(false);
      });
      s.on('error', () => finish(true));
      s.on('close', () => finish(true));
    }),
    ms,
    `raw exchange ${String(bytes).slice(0, 40)}`,
  );
}

/**
 * Requests one after another on one connection, each written once the previous answer is
 * complete (a client that does not pipeline).
 */
export function sequence(port: number, steps: { bytes: string | Buffer; head?: boolean }[], ms = 10_000): Promise<{ responses: RawResponse[]; text: string }> {
  return withDeadline(
    new Promise((resolve, reject) => {
      const noBody = steps.map((s) => s.head === true);
      let buf = Buffer.alloc(0);
      let sent = 0;
      const s = net.connect(port, '127.0.0.1', () => s.write(steps[sent++]!.bytes));
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        const got = parseResponses(buf, noBody);
        if (got.length < sent) return;
        if (sent < steps.length) return void s.write(steps[sent++]!.bytes);
        s.destroy();
        resolve({ responses: got, text: buf.toString('latin1') });
      });
      s.on('error', reject);
      s.on('close', () => reject(new Error(`closed after ${sent} of ${steps.length} requests: ${buf.toString('latin1').slice(0, 300)}`)));
    }),
    ms,
    'request sequence',
  );
}

/** One request the origin received: its bytes exactly as they arrived (head and body). */
export interface OriginRequest {
  head: string;
  body: Buffer;
  /** The request line's target. */
  target: string;
}

export interface RawOrigin {
  port: number;
  /** Every request received, in order, over all connections. */
  seen: OriginRequest[];
  close(): Promise<void>;
}

/**
 * A `net` origin that frames requests itself (Content-Length or chunked) and answers each with
 * `answer(target)`: raw response bytes, written as given.
 */
export function rawOrigin(answer: (req: OriginRequest) => string | Buffer): Promise<RawOrigin> {
  const seen: OriginRequest[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    const continued = new Set<string>();
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end + 4).toString('latin1');
        const lower = head.toLowerCase();
        // As real origins do: the go-ahead for a client waiting on Expect, once per request.
        if (/\r\nexpect:\s*100-continue/.test(lower) && !continued.has(head)) {
          continued.add(head);
          s.write('HTTP/1.1 100 Continue\r\n\r\n');
        }
        let p = end + 4;
        let body = Buffer.alloc(0);
        const cl = /\r\ncontent-length:\s*(\d+)/.exec(lower);
        if (/\r\ntransfer-encoding:[^\r]*chunked/.test(lower)) {
          const start = p;
          for (;;) {
            const le = buf.indexOf('\r\n', p);
            if (le < 0) return;
            const size = parseInt(buf.subarray(p, le).toString('latin1'), 16);
            if (size === 0) {
              if (buf.length < le + 4) return;
              p = le + 4;
              break;
            }
            if (buf.length < le + 2 + size + 2) return;
            p = le + 2 + size + 2;
          }
          body = buf.subarray(start, p);
        } else if (cl) {
          const n = Number(cl[1]);
          if (buf.length < p + n) return;
          body = buf.subarray(p, p + n);
          p += n;
        }
        const req = { head, body: Buffer.from(body), target: head.split(' ')[1] ?? '' };
        seen.push(req);
        buf = buf.subarray(p);
        s.write(answer(req));
      }
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({
        port: (server.address() as net.AddressInfo).port,
        seen,
        close: () =>
          new Promise<void>((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}
