// gRPC on the wire (PROTOCOL-HTTP2 of the gRPC project): a call is an HTTP/2 request whose
// content-type is application/grpc (or application/grpc+proto, …), and each body is a sequence of
// length-prefixed messages: 1 byte compressed flag, 4 bytes big-endian length, the message.
// The inspector reads a captured body with `grpcMessages` when a page or a script asks (never
// per request); the edge and the client classify a request with `isGrpcContentType`.

/** application/grpc, application/grpc+proto, application/grpc;…: not grpc-web (another framing). */
export function isGrpcContentType(value: string | undefined | null): boolean {
  if (!value || value.length < 16) return false;
  if (value.slice(0, 16).toLowerCase() !== 'application/grpc') return false;
  const next = value.charCodeAt(16);
  // End, '+' (a subtype), ';' (parameters) or whitespace before them.
  return Number.isNaN(next) || next === 0x2b || next === 0x3b || next === 0x20 || next === 0x09;
}

/** One length-prefixed message of a captured body. */
export interface GrpcMessage {
  /** Where its 5-byte prefix starts in the body. */
  offset: number;
  /** The compressed flag (1: the message is compressed with the call's grpc-encoding). */
  compressed: boolean;
  /** The length its prefix declares. */
  length: number;
  /** The bytes of it that were captured (fewer than `length` when the capture stopped inside it). */
  data: Uint8Array;
}

export interface GrpcFraming {
  messages: GrpcMessage[];
  /** Messages past `max` that were not listed. */
  more: number;
  /** The capture stopped inside a prefix or a message (the body was longer than the bytes kept). */
  cut: boolean;
  /** Why the bytes are not gRPC framing from some point on (a peer may send anything), or null. */
  error: string | null;
}

/** Messages listed at most (a 64 KiB body holds up to 13,107 empty ones). */
export const MAX_LISTED_MESSAGES = 1000;

/**
 * The messages of a body of which `bytes` were captured; `complete`: nothing was cut off (the
 * body's size is the bytes' length). Never throws and never reads past `bytes`: a prefix or
 * message that runs past the end is the capture's cut when the body was longer, else an error,
 * and a flag other than 0 or 1 ends the listing with an error (what follows is not framing).
 */
export function grpcMessages(bytes: Uint8Array, complete: boolean, max = MAX_LISTED_MESSAGES): GrpcFraming {
  const out: GrpcFraming = { messages: [], more: 0, cut: false, error: null };
  const n = bytes.byteLength;
  let at = 0;
  while (at < n) {
    const flag = bytes[at]!;
    if (flag > 1) {
      out.error = `byte ${at}: a message's compressed flag is 0 or 1, not ${flag}`;
      return out;
    }
    if (at + 5 > n) {
      if (complete) out.error = `byte ${at}: ${n - at} byte${n - at === 1 ? '' : 's'} left, short of a 5-byte message prefix`;
      else out.cut = true;
      return out;
    }
    const length = ((bytes[at + 1]! << 24) >>> 0) + ((bytes[at + 2]! << 16) | (bytes[at + 3]! << 8) | bytes[at + 4]!);
    const start = at + 5;
    const end = Math.min(n, start + length);
    if (out.messages.length < max) out.messages.push({ offset: at, compressed: flag === 1, length, data: bytes.subarray(start, end) });
    else out.more++;
    if (start + length > n) {
      if (complete) out.error = `byte ${at}: a message of ${length} bytes, but ${n - start} follow`;
      else out.cut = true;
      return out;
    }
    at = start + length;
  }
  return out;
}

/** Printable ASCII as itself, every other byte as '.' (the hex dump's right-hand column). */
export function printable(bytes: Uint8Array): string {
  // One latin1 decode and one replace: a 64 KiB body in tens of µs, not a string per byte.
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1').replace(/[^\x20-\x7e]/g, '.');
}
