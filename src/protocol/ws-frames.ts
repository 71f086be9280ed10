// RFC 6455 framing, the one codec behind both ends of the control WebSocket: the tunnel
// client's (protocol/ws-client.ts) and the edge's (edge/control.ts), both through
// protocol/ws-connection.ts. The decoder takes the expected masking as a parameter: a client
// receives unmasked server frames and sends masked ones, a server the other way round.
//
// Outgoing masked frames use an all-zero masking key: masking exists to stop browsers' scripts
// from poisoning proxy caches; a zero key is valid framing and saves an XOR pass and a copy
// over every payload byte on the hot path.

export const WS_OP = {
  Continuation: 0x0,
  Text: 0x1,
  Binary: 0x2,
  Close: 0x8,
  Ping: 0x9,
  Pong: 0xa,
} as const;

/** Close codes this codec sends when it fails a connection. */
export const WS_CLOSE = {
  Normal: 1000,
  ProtocolError: 1002,
  /** Only ever reported locally: a close frame without a status code. */
  NoStatus: 1005,
  /** Only ever reported locally: the connection dropped without a close frame. */
  Abnormal: 1006,
  InvalidPayload: 1007,
  Policy: 1008,
  TooBig: 1009,
} as const;

/** A control frame's payload limit (RFC 6455 §5.5): it must fit the 7-bit length. */
export const MAX_CONTROL_PAYLOAD_BYTES = 125;
/** A close reason's limit: the control payload minus the 2-byte code. */
export const MAX_CLOSE_REASON_BYTES = MAX_CONTROL_PAYLOAD_BYTES - 2;

/** A peer's framing error; `closeCode` is the status to fail the connection with. */
export class WsFrameError extends Error {
  constructor(
    readonly closeCode: number,
    message: string,
  ) {
    super(message);
  }
}

export interface WsFrame {
  op: number;
  fin: boolean;
  /** Unmasked; may be a view of a chunk given to push() (copy it to keep it past that chunk). */
  payload: Buffer;
  /** With splitPayloads: the rest of the payload, views of the following chunks, in order. */
  more?: Buffer[];
}

function isControl(op: number): boolean {
  return (op & 0x8) !== 0;
}

function isKnownOp(op: number): boolean {
  return op <= WS_OP.Binary || (op >= WS_OP.Close && op <= WS_OP.Pong);
}

/** The frame header alone (for writing a payload without copying it behind the header). */
export function encodeWsHeader(op: number, payloadBytes: number, masked: boolean, fin = true): Buffer {
  const header = Buffer.allocUnsafe(wsHeaderBytes(payloadBytes, masked));
  writeWsHeader(header, 0, op, payloadBytes, masked, fin);
  return header;
}

/** The size of a frame header for `payloadBytes` (2 to 14 bytes). */
export function wsHeaderBytes(payloadBytes: number, masked: boolean): number {
  return 2 + (payloadBytes < 126 ? 0 : payloadBytes < 65536 ? 2 : 8) + (masked ? 4 : 0);
}

/** Writes a frame header at `o` of `b` (which has room); returns the offset after it. */
export function writeWsHeader(b: Buffer, o: number, op: number, payloadBytes: number, masked: boolean, fin = true): number {
  const n = payloadBytes;
  b[o] = (fin ? 0x80 : 0) | op;
  const maskBit = masked ? 0x80 : 0;
  if (n < 126) {
    b[o + 1] = maskBit | n;
    o += 2;
  } else if (n < 65536) {
    b[o + 1] = maskBit | 126;
    b.writeUInt16BE(n, o + 2);
    o += 4;
  } else {
    b[o + 1] = maskBit | 127;
    b.writeUInt32BE(Math.floor(n / 2 ** 32), o + 2);
    b.writeUInt32BE(n >>> 0, o + 6);
    o += 10;
  }
  if (masked) {
    // burrow's clients mask with a zero key (the payload stays as it is; see above).
    b[o] = b[o + 1] = b[o + 2] = b[o + 3] = 0;
    o += 4;
  }
  return o;
}

/** One whole frame (header and payload in one buffer). */
export function encodeWsFrame(op: number, payload: Uint8Array, masked: boolean, fin = true): Buffer {
  const header = encodeWsHeader(op, payload.byteLength, masked, fin);
  const out = Buffer.allocUnsafe(header.length + payload.byteLength);
  header.copy(out, 0);
  out.set(payload, header.length);
  return out;
}

/**
 * Whether `code` may appear in a close frame on the wire: 1000–1003, 1007–1014 (registered),
 * 3000–4999 (libraries, applications). 1004 is reserved, 1005/1006/1015 are local-only, and
 * 1016–2999 are unassigned or reserved for the RFC.
 */
export function isValidCloseCode(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/** A close frame's payload: the code, then the reason cut to 123 bytes on a character boundary. */
export function encodeClosePayload(code: number, reason = ''): Buffer {
  let r = Buffer.from(reason, 'utf8');
  if (r.length > MAX_CLOSE_REASON_BYTES) {
    let end = MAX_CLOSE_REASON_BYTES;
    while (end > 0 && (r[end]! & 0xc0) === 0x80) end--; // don't split a multi-byte character
    r = r.subarray(0, end);
  }
  const p = Buffer.allocUnsafe(2 + r.length);
  p.writeUInt16BE(code, 0);
  r.copy(p, 2);
  return p;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A received close frame's payload; throws WsFrameError on a bad code or a non-UTF-8 reason. */
export function parseClosePayload(payload: Uint8Array): { code: number; reason: string } {
  if (payload.byteLength === 0) return { code: WS_CLOSE.NoStatus, reason: '' };
  if (payload.byteLength === 1) throw new WsFrameError(WS_CLOSE.ProtocolError, 'close frame with a 1-byte payload');
  const code = (payload[0]! << 8) | payload[1]!;
  if (!isValidCloseCode(code)) throw new WsFrameError(WS_CLOSE.ProtocolError, `close frame with invalid code ${code}`);
  let reason: string;
  try {
    reason = utf8.decode(payload.subarray(2));
  } catch {
    throw new WsFrameError(WS_CLOSE.InvalidPayload, 'close reason is not valid UTF-8');
  }
  return { code, reason };
}

export interface WsDecoderOptions {
  /** Largest payload of one frame and of one reassembled message (sum of its fragments). */
  maxPayloadBytes: number;
  /** Whether the peer's frames must be masked: true when we are the server, false when the client. */
  expectMasked: boolean;
  /**
   * A data frame whose payload spans the chunks pushed is returned as views of them (`payload`
   * and `more`) instead of copied into one buffer. For a receiver that takes a message in
   * pieces (the edge's control connection: answer bodies go on as they arrived).
   */
  splitPayloads?: boolean;
}

/** XORs `data` in place with a masking key (big-endian), four bytes a step where it can. */
function unmask(data: Buffer, key: number): Buffer {
  const words = data.length >>> 2;
  for (let i = 0; i < words; i++) data.writeInt32BE(data.readInt32BE(i * 4) ^ key, i * 4);
  for (let i = words * 4; i < data.length; i++) data[i]! ^= (key >>> (24 - 8 * (i & 3))) & 0xff;
  return data;
}

/**
 * Incremental frame decoder: push() chunks as they arrive, then call next() until it returns
 * null (a frame is not whole yet). next() throws WsFrameError on anything the RFC says must
 * fail the connection; after that the decoder is unusable and the caller closes.
 */
const EMPTY = Buffer.alloc(0);

export class WsDecoder {
  private chunks: Buffer[] = [];
  /** Bytes of chunks[0] already consumed: an offset, so a frame's head costs no slice. */
  private pos = 0;
  /** Where peek()'s bytes start in the buffer it returned. */
  private peekAt = 0;
  private buffered = 0;
  /** Whether a fragmented data message is open (a continuation is expected). */
  private inMessage = false;
  private messageBytes = 0;

  constructor(private readonly opts: WsDecoderOptions) {}

  get bufferedBytes(): number {
    return this.buffered;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  next(): WsFrame | null {
    if (this.buffered < 2) return null;
    const h = this.peek(2);
    const b0 = h[this.peekAt]!;
    const b1 = h[this.peekAt + 1]!;
    const fin = (b0 & 0x80) !== 0;
    const op = b0 & 0x0f;
    const masked = (b1 & 0x80) !== 0;
    // Checked on the first two bytes, so a hostile header fails before its length is awaited.
    if (b0 & 0x70) throw new WsFrameError(WS_CLOSE.ProtocolError, 'RSV bits set without a negotiated extension');
    if (!isKnownOp(op)) throw new WsFrameError(WS_CLOSE.ProtocolError, `unknown opcode 0x${op.toString(16)}`);
    if (masked !== this.opts.expectMasked) {
      throw new WsFrameError(WS_CLOSE.ProtocolError, this.opts.expectMasked ? 'unmasked frame from a client' : 'masked frame from a server');
    }
    let len = b1 & 0x7f;
    if (isControl(op)) {
      if (!fin) throw new WsFrameError(WS_CLOSE.ProtocolError, 'fragmented control frame');
      if (len > MAX_CONTROL_PAYLOAD_BYTES) throw new WsFrameError(WS_CLOSE.ProtocolError, `control frame payload over ${MAX_CONTROL_PAYLOAD_BYTES} bytes`);
    } else if (op === WS_OP.Continuation) {
      if (!this.inMessage) throw new WsFrameError(WS_CLOSE.ProtocolError, 'continuation frame outside a fragmented message');
    } else if (this.inMessage) {
      throw new WsFrameError(WS_CLOSE.ProtocolError, 'new data frame inside a fragmented message');
    }
    const lenBytes = len === 126 ? 2 : len === 127 ? 8 : 0;
    const hlen = 2 + lenBytes + (masked ? 4 : 0);
    if (this.buffered < hlen) return null;
    const hh = this.peek(hlen);
    const at = this.peekAt;
    if (lenBytes === 2) len = hh.readUInt16BE(at + 2);
    else if (lenBytes === 8) {
      const hi = hh.readUInt32BE(at + 2);
      if (hi & 0x80000000) throw new WsFrameError(WS_CLOSE.ProtocolError, '64-bit payload length with the high bit set');
      // Exact below 2^53; any length that large is over every limit anyway.
      len = hi * 2 ** 32 + hh.readUInt32BE(at + 6);
    }
    const total = op === WS_OP.Continuation || !isControl(op) ? this.messageBytes + len : len;
    if (total > this.opts.maxPayloadBytes) {
      throw new WsFrameError(WS_CLOSE.TooBig, `message over ${this.opts.maxPayloadBytes} bytes`);
    }
    if (this.buffered < hlen + len) return null;
    const key = masked ? hh.readUInt32BE(at + hlen - 4) : 0;
    this.skip(hlen);
    if (!isControl(op)) {
      this.inMessage = !fin;
      this.messageBytes = fin ? 0 : total;
    }
    // burrow's own clients mask with a zero key (see above): nothing to undo, and no copy.
    if (len > 0 && key === 0 && this.opts.splitPayloads && !isControl(op) && this.chunks[0]!.length - this.pos < len) return this.takePieces(op, fin, len);
    let payload = len > 0 ? this.take(len) : EMPTY;
    if (key !== 0) payload = unmask(Buffer.from(payload), key);
    return { op, fin, payload };
  }

  /** A payload of `n` bytes that spans chunks, as views of them. */
  private takePieces(op: number, fin: boolean, n: number): WsFrame {
    const first = this.chunks[0]!;
    const payload = first.subarray(this.pos);
    this.skip(payload.length);
    n -= payload.length;
    const more: Buffer[] = [];
    while (n > 0) {
      const c = this.chunks[0]!;
      const k = Math.min(c.length - this.pos, n);
      more.push(c.subarray(this.pos, this.pos + k));
      this.skip(k);
      n -= k;
    }
    return { op, fin, payload, more };
  }

  /** Drops `n` buffered bytes (a frame's head, already read through peek). */
  private skip(n: number): void {
    this.buffered -= n;
    while (n > 0) {
      const left = this.chunks[0]!.length - this.pos;
      if (left > n) {
        this.pos += n;
        return;
      }
      n -= left;
      this.chunks.shift();
      this.pos = 0;
    }
  }

  /** Takes `n` bytes off the front (a view, no copy, when one chunk holds them). */
  private take(n: number): Buffer {
    const first = this.chunks[0]!;
    const pos = this.pos;
    if (first.length - pos >= n) {
      this.skip(n);
      return first.subarray(pos, pos + n);
    }
    const out = Buffer.allocUnsafe(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0]!;
      const k = Math.min(c.length - this.pos, n - off);
      c.copy(out, off, this.pos, this.pos + k);
      off += k;
      this.skip(k);
    }
    return out;
  }

  /** At least `n` (≤ 14) bytes from the front, without consuming them: they start at `peekAt`. */
  private peek(n: number): Buffer {
    const first = this.chunks[0]!;
    if (first.length - this.pos >= n) {
      this.peekAt = this.pos;
      return first;
    }
    this.peekAt = 0;
    return Buffer.concat([first.subarray(this.pos), ...this.chunks.slice(1)], Math.min(this.buffered, 14));
  }
}
