import { Packr } from 'msgpackr';

// The one msgpack codec for everything that crosses a thread or the tunnel wire.
// Plain maps (no record extension) so any msgpack peer can read the frames; Buffers
// and Uint8Arrays travel as bin without copying on decode.
const packr = new Packr({ useRecords: false, moreTypes: false, int64AsType: 'number' });

export function encode(value: unknown): Buffer {
  return packr.pack(value);
}

export function decode<T = unknown>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T;
}

/** Several values packed back to back (one batch of mailbox messages), in order. */
export function decodeEach(bytes: Uint8Array, each: (value: unknown) => void): void {
  packr.unpackMultiple(bytes, (value: unknown) => {
    each(value);
  });
}
