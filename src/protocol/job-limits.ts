// Bounds of main's argon2 job queue (jobs.ts), in a file of their own: the shards size their
// handshake gate (edge/handshake-gate.ts) from them without loading the pool's code.

/** Jobs waiting for a pool thread, per queue; more are answered 503 (`key verification is overloaded`). */
export const MAX_QUEUED_JOBS = 256;
