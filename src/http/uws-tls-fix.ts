import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

// A one-instruction fix to the uWebSockets.js build burrowd loads on glibc < 2.38, applied to a
// copy at install time (`npm ci` runs it) and loaded in place of the stock binary.
//
// The defect (uSockets, src/crypto/openssl.c, still present upstream): every SSL_write sets the
// loop's shared `ssl_read_input_length` to 0. When one read decrypts to 512 KiB or more, uSockets
// hands the plaintext to uWS in pieces while ciphertext of that read is still unparsed; a write
// in between throws that ciphertext away, and the connection's TLS stream is broken (1006 on both
// ends). Burrow writes nothing from inside a read (src/http/cork.ts), but uWS does: a WebSocket's
// data handler ends with uncork(), which first tries to send the socket's backpressure buffer.
// So a control connection that has backpressure toward the client (large request bodies going
// out) and receives a large read (large response bodies coming in) broke: measured with 16
// downloads and 16 uploads of 1 MiB at once over one tunnel, in the first or second round.
//
// The fix skips that store (a 7-byte NOP over `movl $0, 0x10(%rbp)` in
// us_internal_ssl_socket_write), so a write no longer discards input of the read in progress.
// The store guarded against an SSL_write that reads (a handshake still running) consuming
// another socket's input: uWS writes only to sockets past their handshake, and burrow leaves
// writes to other sockets until the read callbacks are over.

const require = createRequire(import.meta.url);

export interface BinaryFix {
  /** sha256 of the stock binary the fix applies to (the npm tarball's bytes). */
  stockSha256: string;
  /** File offset of the instruction, the bytes expected there, and their replacement. */
  offset: number;
  before: string;
  after: string;
  /** sha256 of the fixed copy: what the loader accepts. */
  fixedSha256: string;
}

/** By binary file name (`uws_<platform>_<arch>_<ABI>.node`) of @trufflesuite/uws-js-unofficial 20.30.0. */
export const TLS_READ_FIXES: Record<string, BinaryFix> = {
  'uws_linux_x64_115.node': {
    stockSha256: 'f158fb441f7e2e37b3ab9a56782fe37f4c0d33b5cd32e96ee5c0120ce7db7ced',
    offset: 0x10d701,
    before: 'c7451000000000', // movl $0x0,0x10(%rbp): loop_ssl_data->ssl_read_input_length = 0
    after: '0f1f8000000000', // nopl 0x0(%rax)
    fixedSha256: '5c9f1586d245ed718852cd251d1b4aa9e86f35ba7987bc0ce0c88db8aae896a2',
  },
};

const PACKAGE = '@trufflesuite/uws-js-unofficial';

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** The fixed bytes, or why `stock` cannot be fixed (another build: never patched blindly). */
export function applyFix(fix: BinaryFix, stock: Uint8Array): Buffer | string {
  if (sha256(stock) !== fix.stockSha256) return 'the binary is not the build the fix was made for';
  const out = Buffer.from(stock);
  const at = out.subarray(fix.offset, fix.offset + fix.before.length / 2);
  if (at.toString('hex') !== fix.before) return 'the instruction is not where the fix expects it';
  Buffer.from(fix.after, 'hex').copy(out, fix.offset);
  if (sha256(out) !== fix.fixedSha256) return 'the fixed copy does not have the expected checksum';
  return out;
}

/** Where the stock binary is, and where its fixed copy goes (beside node_modules' packages). */
export function fixPaths(binary: string): { stock: string; fixed: string } {
  const pkg = dirname(require.resolve(`${PACKAGE}/package.json`));
  return { stock: join(pkg, 'binaries', binary), fixed: join(pkg, '..', '..', '.burrow-uws', binary) };
}

/** The fixed copy's path when it exists and is exactly the fixed build, else null. */
export function verifiedFixedCopy(binary: string): string | null {
  const fix = TLS_READ_FIXES[binary];
  if (!fix) return null;
  try {
    const { fixed } = fixPaths(binary);
    return sha256(readFileSync(fixed)) === fix.fixedSha256 ? fixed : null;
  } catch {
    return null;
  }
}

/** Writes the fixed copy for this machine's binary; says what it did. */
export function writeFixedCopy(binary: string): string {
  const fix = TLS_READ_FIXES[binary];
  if (!fix) return `no TLS read fix is known for ${PACKAGE} ${binary}: the stock binary is used`;
  const { stock, fixed } = fixPaths(binary);
  if (!existsSync(stock)) return `${stock} is missing: nothing to fix`;
  const bytes = applyFix(fix, readFileSync(stock));
  if (typeof bytes === 'string') return `${stock} left as it is: ${bytes}`;
  mkdirSync(dirname(fixed), { recursive: true });
  // Written whole, then renamed: a burrowd starting meanwhile sees the old copy or the new one.
  writeFileSync(`${fixed}.tmp`, bytes, { mode: 0o644 });
  renameSync(`${fixed}.tmp`, fixed);
  return `wrote ${fixed} (uWebSockets.js with the uSockets TLS read fix)`;
}
