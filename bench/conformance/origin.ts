// The origin behind every subject of the conformance probe: a `node:net` server that records
// every byte it receives (that is what the judges read: what an intermediary let through) and
// answers each request it can frame by a small per-case script.
//
//   subject ──bytes──▶ origin: raw log (every chunk, in arrival order) + requests framed strictly
//                              (TE chunked, else one Content-Length, else none) ─▶ script(req)
//
// Cases run one at a time; reset() between cases starts a fresh record. A connection whose
// bytes it cannot frame is marked as garbage, answered 400 and closed, as a strict server would.
import net from 'node:net';

export interface OriginRequest {
  /** The head exactly as received, up to and including the blank line. */
  head: string;
  /** The request line's target. */
  target: string;
  /** The body as framed on the wire (chunk sizes and trailers included for chunked). */
  rawBody: Buffer;
  /** The body's payload (chunk framing removed). */
  body: Buffer;
  /** Which origin connection it came on (1, 2, ...). */
  conn: number;
}

/** What the origin sends back for one request; `close` ends the connection after it. */
export interface OriginAnswer {
  bytes: string | Buffer;
  close?: boolean;
}

export type OriginScript = (req: OriginRequest) => OriginAnswer | null;

export interface OriginRecord {
  /** Every byte received during the case, all connections, in arrival order. */
  raw: Buffer;
  requests: OriginRequest[];
  /** Why a connection's bytes could not be framed (each such connection was closed). */
  garbage: string[];
}

export interface RawOrigin {
  port: number;
  reset(): void;
  snapshot(): OriginRecord;
  close(): Promise<void>;
}

/** The default answer: 200 with the target as the body, so order and routing can be checked. */
export function defaultAnswer(req: OriginRequest): OriginAnswer {
  const body = `ok:${req.target}`;
  const head = `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body, 'latin1')}\r\n\r\n`;
  return { bytes: req.head.startsWith('HEAD ') ? head : head + body };
}

type Frame = { kind: 'more' } | { kind: 'bad'; why: string } | { kind: 'request'; req: Omit<OriginRequest, 'conn'>; used: number };

/** Frames one request at the start of `buf` (strict CRLF; chunked wins over Content-Length). */
function frame(buf: Buffer): Frame {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return buf.length > 256 * 1024 ? { kind: 'bad', why: 'no end of head in 256 KiB' } : { kind: 'more' };
  const head = buf.subarray(0, end + 4).toString('latin1');
  const lower = head.toLowerCase();
  const target = head.slice(0, head.indexOf('\r\n')).split(' ')[1] ?? '';
  let p = end + 4;
  const te = [...lower.matchAll(/\r\ntransfer-encoding:([^\r]*)/g)].map((m) => m[1]!.trim()).join(', ');
  const cls = [...lower.matchAll(/\r\ncontent-length:([^\r]*)/g)].map((m) => m[1]!.trim());
  if (te !== '') {
    if (!/(^|,)[ \t]*chunked$/.test(te)) return { kind: 'bad', why: `Transfer-Encoding "${te}" does not end in chunked` };
    const parts: Buffer[] = [];
    for (;;) {
      const le = buf.indexOf('\r\n', p);
      if (le < 0) return { kind: 'more' };
      const line = buf.subarray(p, le).toString('latin1');
      const m = /^([0-9a-fA-F]{1,15})(?:[ \t]*;.*)?$/.exec(line);
      if (!m) return { kind: 'bad', why: `bad chunk-size line ${JSON.stringify(line.slice(0, 40))}` };
      const size = parseInt(m[1]!, 16);
      if (size === 0) {
        // trailer section: lines until an empty one
        let q = le + 2;
        for (;;) {
          const tl = buf.indexOf('\r\n', q);
          if (tl < 0) return { kind: 'more' };
          if (tl === q) {
            q += 2;
            break;
          }
          q = tl + 2;
        }
        return { kind: 'request', req: { head, target, rawBody: Buffer.from(buf.subarray(end + 4, q)), body: Buffer.concat(parts) }, used: q };
      }
      if (buf.length < le + 2 + size + 2) return { kind: 'more' };
      if (buf[le + 2 + size] !== 13 || buf[le + 3 + size] !== 10) return { kind: 'bad', why: 'chunk data not followed by CRLF' };
      parts.push(buf.subarray(le + 2, le + 2 + size));
      p = le + 2 + size + 2;
    }
  }
  if (cls.length > 1 && new Set(cls).size > 1) return { kind: 'bad', why: `Content-Length values ${cls.join(' / ')}` };
  let n = 0;
  if (cls.length > 0) {
    if (!/^\d{1,15}$/.test(cls[0]!)) return { kind: 'bad', why: `Content-Length "${cls[0]}"` };
    n = Number(cls[0]);
  }
  if (buf.length < p + n) return { kind: 'more' };
  const body = Buffer.from(buf.subarray(p, p + n));
  return { kind: 'request', req: { head, target, rawBody: body, body }, used: p + n };
}

export function startOrigin(script: OriginScript): Promise<RawOrigin> {
  let chunks: Buffer[] = [];
  let requests: OriginRequest[] = [];
  let garbage: string[] = [];
  let connNo = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    const conn = ++connNo;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
    let buf: Buffer = Buffer.alloc(0);
    let continued = false;
    let dead = false;
    s.on('data', (d: Buffer) => {
      chunks.push(Buffer.from(d));
      if (dead) return;
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const f = frame(buf);
        if (f.kind === 'more') {
          // As real origins do: the go-ahead for a client waiting on Expect, once per request.
          const headEnd = buf.indexOf('\r\n\r\n');
          if (!continued && headEnd >= 0 && /\r\nexpect:[ \t]*100-continue/i.test(buf.subarray(0, headEnd).toString('latin1'))) {
            continued = true;
            s.write('HTTP/1.1 100 Continue\r\n\r\n');
          }
          return;
        }
        if (f.kind === 'bad') {
          garbage.push(`conn ${conn}: ${f.why}`);
          dead = true;
          s.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
          return;
        }
        continued = false;
        const req: OriginRequest = { ...f.req, conn };
        requests.push(req);
        buf = buf.subarray(f.used);
        const answer = script(req) ?? defaultAnswer(req);
        if (answer.close) {
          dead = true;
          s.end(answer.bytes);
          return;
        }
        s.write(answer.bytes);
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      resolve({
        port: (server.address() as net.AddressInfo).port,
        reset() {
          chunks = [];
          requests = [];
          garbage = [];
        },
        snapshot: () => ({ raw: Buffer.concat(chunks), requests: [...requests], garbage: [...garbage] }),
        close: () =>
          new Promise<void>((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}
