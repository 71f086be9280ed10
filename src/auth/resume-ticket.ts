import { createHmac, timingSafeEqual } from 'node:crypto';
import { MAX_RESUME_TICKET_CHARS } from '../protocol/frames.js';

// Resumption tickets for the control connection: what lets a restarted server take back
// thousands of clients within a second. After a restart no key is cached, and each distinct
// key would cost an argon2id verification (about 50 a second on two cores): 1,000 clients of
// 1,000 keys took 20-40 s to come back. So, like a TLS session ticket, the server hands each
// client it authenticated a ticket in Welcome, and a client that reconnects with its key and
// its ticket skips the verification:
//
//   ticket = "v1." + expiry (epoch s) + "." + base64url(HMAC-SHA256(server secret,
//            "burrow-resume-v1" ‖ key prefix ‖ expiry ‖ SHA-256(key)))
//
// It binds the key itself (its digest), so a ticket without its key is worth nothing, and a key
// presented with another key's ticket is verified the usual way. The server stores nothing per
// key: the only hash of a key it keeps is still the argon2id one. The key's row is read on every
// resumption, so a revoked or expired key, or a deactivated user, is refused as before. The
// secret lives in the database (server_secrets), so it survives restarts; whoever reads it could
// mint tickets for keys they hold or guess, and guessing a 256-bit key is no easier with it.

/** A ticket lives a day at most (and never past its key's expiry). */
export const TICKET_TTL_MS = 24 * 60 * 60 * 1000;
const TICKET_RE = /^v1\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/;

export class TicketBox {
  constructor(private readonly secret: Buffer) {}

  /** A ticket for the key with this prefix and digest (keyDigest), valid until `untilMs`. */
  issue(prefix: string, digest: string, untilMs: number): string {
    const expiry = Math.floor(untilMs / 1000);
    return `v1.${expiry}.${this.mac(prefix, digest, expiry).toString('base64url')}`;
  }

  /** Whether `ticket` was issued by this secret for this key and has not expired. */
  check(ticket: string, prefix: string, digest: string, nowMs = Date.now()): boolean {
    if (ticket.length > MAX_RESUME_TICKET_CHARS) return false;
    const m = TICKET_RE.exec(ticket);
    if (!m) return false;
    const expiry = Number(m[1]);
    if (expiry * 1000 <= nowMs) return false;
    // Compared as text: 43 base64url characters carry 2 spare bits, so decoding first would
    // accept four spellings of one MAC.
    const given = Buffer.from(m[2]!, 'latin1');
    const want = Buffer.from(this.mac(prefix, digest, expiry).toString('base64url'), 'latin1');
    return given.length === want.length && timingSafeEqual(given, want);
  }

  private mac(prefix: string, digest: string, expiry: number): Buffer {
    return createHmac('sha256', this.secret).update(`burrow-resume-v1\n${prefix}\n${expiry}\n${digest}`).digest();
  }
}
