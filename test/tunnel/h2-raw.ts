import net from 'node:net';

// A raw HTTP/2 peer for the attack tests: frames written by hand (RFC 9113 §4.1) and HPACK
// only from the static table and plain literals (RFC 7541), so a test can send what no
// well-behaved client library would. The frames the server sends are read back as a list.

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
export const T = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 } as const;
export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;
export const ERR = { NO_ERROR: 0, PROTOCOL_ERROR: 1, CANCEL: 8, ENHANCE_YOUR_CALM: 11 } as const;

export interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

export function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** A string literal without Huffman coding (lengths < 127 only, or longer with the 7-bit prefix integer). */
function literal(s: string | Buffer): Buffer {
  const bytes = typeof s === 'string' ? Buffer.from(s, 'latin1') : s;
  return Buffer.concat([integer(bytes.length, 7, 0), bytes]);
}

/** RFC 7541 §5.1 integer with an N-bit prefix and the first byte's high bits. */
export function integer(n: number, prefix: number, high: number): Buffer {
  const max = (1 << prefix) - 1;
  if (n < max) return Buffer.from([high | n]);
  const out = [high | max];
  n -= max;
  while (n >= 128) {
    out.push((n % 128) + 128);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}

/** GET / for `authority`: :method GET, :scheme http, :path / from the static table; :authority literal. */
export function getBlock(authority: string, path = '/'): Buffer {
  const p = path === '/' ? Buffer.from([0x84]) : Buffer.concat([Buffer.from([0x04]), literal(path)]);
  return Buffer.concat([Buffer.from([0x82, 0x86]), p, Buffer.from([0x01]), literal(authority)]);
}

/** A header field as a literal without indexing (new name). */
export function field(name: string, value: string | Buffer): Buffer {
  return Buffer.concat([Buffer.from([0x00]), literal(name), literal(value)]);
}

/** A header field as a literal with incremental indexing (new name): it enters the dynamic table. */
export function indexedField(name: string, value: string | Buffer): Buffer {
  return Buffer.concat([Buffer.from([0x40]), literal(name), literal(value)]);
}

export class RawH2 {
  readonly frames: Frame[] = [];
  closed = false;
  private buf = Buffer.alloc(0);
  private readonly waiters: (() => void)[] = [];

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      while (this.buf.length >= 9) {
        const len = this.buf.readUIntBE(0, 3);
        if (this.buf.length < 9 + len) break;
        this.frames.push({ type: this.buf[3]!, flags: this.buf[4]!, stream: this.buf.readUInt32BE(5) & 0x7fffffff, payload: this.buf.subarray(9, 9 + len) });
        this.buf = this.buf.subarray(9 + len);
      }
      this.wake();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
  }

  static connect(port: number, settings: Buffer = Buffer.alloc(0)): Promise<RawH2> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.write(Buffer.concat([PREFACE, frame(T.SETTINGS, 0, 0, settings)]));
        resolve(new RawH2(s));
      });
      s.once('error', reject);
    });
  }

  write(...frames: Buffer[]): boolean {
    if (this.socket.destroyed) return false;
    return this.socket.write(Buffer.concat(frames));
  }

  /** The GOAWAY's error code, when one came. */
  get goaway(): number | null {
    const g = this.frames.find((f) => f.type === T.GOAWAY);
    return g ? g.payload.readUInt32BE(4) : null;
  }

  /** Waits until `check` holds (or the deadline passes: false). */
  async until(check: () => boolean, ms: number): Promise<boolean> {
    const end = Date.now() + ms;
    while (!check()) {
      const left = end - Date.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 200));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return true;
  }

  close(): void {
    this.socket.destroy();
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }
}

/** SETTINGS payload entries (id, value). */
export function settings(entries: [number, number][]): Buffer {
  const b = Buffer.alloc(entries.length * 6);
  entries.forEach(([id, v], i) => {
    b.writeUInt16BE(id, i * 6);
    b.writeUInt32BE(v, i * 6 + 2);
  });
  return b;
}

export function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}
