// The bare relay's wire (relay-edge.ts ⇄ relay-client.ts over one TCP connection): a 9-byte
// head — type u8, stream id u32, payload length u32 — then the payload, untouched.
//
//   Open  edge → client: a request begins on this stream (OPEN_HEAD: a HEAD request, no body back)
//   Data  either way: bytes of the request or of the answer, as they arrived
//   End   edge → client: the request is whole; client → edge: the answer is whole
//   Reset either way: the other side's socket is gone; drop the stream
//
// A stream id is the visitor connection's slot (low 16 bits) and a per-request generation
// (high 16 bits): lookups are array reads, and a late frame for a finished request misses.
import type { Socket } from 'node:net';

export const OPEN = 1;
export const DATA = 2;
export const END = 3;
export const RESET = 4;
export const OPEN_HEAD = 5;
export const HEAD_BYTES = 9;
export const SLOT_MASK = 0xffff;

/** Payloads smaller than this are copied beside their head into the turn's one buffer. */
const JOIN_BELOW_BYTES = 1024;
const JOIN_BUFFER_BYTES = 16 * 1024;

/**
 * Writes frames to the control socket, corked until the end of this turn of the event loop:
 * heads and small payloads are joined into one buffer, larger payloads written as they are, and
 * every frame of a turn leaves in one writev.
 */
export function frameWriter(sock: Socket): (type: number, id: number, payload?: Buffer) => void {
  let buf: Buffer | null = null;
  let used = 0;
  let scheduled = false;
  const flush = (): void => {
    if (buf && used > 0) sock.write(used === buf.length ? buf : buf.subarray(0, used));
    buf = null;
    used = 0;
  };
  const endOfTurn = (): void => {
    scheduled = false;
    flush();
    sock.uncork();
  };
  return (type, id, payload) => {
    if (!scheduled) {
      scheduled = true;
      sock.cork();
      setImmediate(endOfTurn);
    }
    const len = payload ? payload.length : 0;
    const inline = len < JOIN_BELOW_BYTES;
    const need = HEAD_BYTES + (inline ? len : 0);
    if (!buf || used + need > buf.length) {
      flush();
      buf = Buffer.allocUnsafe(Math.max(JOIN_BUFFER_BYTES, need));
    }
    buf[used] = type;
    buf.writeUInt32BE(id >>> 0, used + 1);
    buf.writeUInt32BE(len, used + 5);
    used += HEAD_BYTES;
    if (len === 0) return;
    if (inline) {
      payload!.copy(buf, used);
      used += len;
    } else {
      flush();
      sock.write(payload!);
    }
  };
}

const EMPTY = Buffer.alloc(0);

/**
 * Cuts the control connection's bytes into frames. A Data payload is handed on in the pieces it
 * arrived in (views of the socket's chunks, no copy): onFrame may see one Data frame several times.
 */
export function frameReader(onFrame: (type: number, id: number, payload: Buffer) => void): (chunk: Buffer) => void {
  const head = Buffer.allocUnsafe(HEAD_BYTES);
  let headFill = 0;
  let id = 0;
  let remaining = 0;
  return (chunk) => {
    const len = chunk.length;
    let pos = 0;
    while (pos < len) {
      if (remaining > 0) {
        const n = Math.min(remaining, len - pos);
        remaining -= n;
        onFrame(DATA, id, n === len ? chunk : chunk.subarray(pos, pos + n));
        pos += n;
        continue;
      }
      let h = chunk;
      let at = pos;
      if (headFill > 0 || len - pos < HEAD_BYTES) {
        const n = Math.min(HEAD_BYTES - headFill, len - pos);
        chunk.copy(head, headFill, pos, pos + n);
        headFill += n;
        pos += n;
        if (headFill < HEAD_BYTES) return;
        headFill = 0;
        h = head;
        at = 0;
      } else {
        pos += HEAD_BYTES;
      }
      const type = h[at]!;
      id = h.readUInt32BE(at + 1);
      remaining = h.readUInt32BE(at + 5);
      // only Data carries a payload
      if (remaining === 0 || type !== DATA) {
        remaining = 0;
        onFrame(type, id, EMPTY);
      }
    }
  };
}
