import { randomBytes } from 'node:crypto';
import { Piscina } from 'piscina';
import { ApiError } from '../errors.js';
import type { Logger } from '../log.js';
import type { Argon2Task } from './argon2-job.js';
import { FairQueue } from './fair-queue.js';
import { MAX_QUEUED_JOBS } from '../protocol/job-limits.js';

// Stateless CPU jobs (argon2id) on a piscina pool owned by the main thread. Shards ask
// main for them, so the machine runs one pool, not one per shard. Jobs wait in a bounded
// fair queue with one lane per client IP and go to the pool only as threads free up, so one
// client's burst cannot stand in front of everyone else's key (piscina's own queue is FIFO).
// When the queue is full the caller gets 503 instead of waiting behind an unbounded backlog.
/** Lane of key creation (issueKey): not a client's guess, but it shares the pool fairly. */
export const ISSUE_LANE = '\0issue';
/**
 * A job that waited this long is answered 503 instead of run: shards stop waiting for the
 * answer at 15 s (VERIFY_TIMEOUT_MS), and a verification nobody awaits only delays the rest.
 */
const MAX_QUEUE_WAIT_MS = 10_000;

interface Job {
  task: Argon2Task;
  queuedAtMs: number;
  resolve(v: string | boolean): void;
  reject(err: unknown): void;
}

function overloaded(): ApiError {
  return new ApiError('unavailable', 'key verification is overloaded; retry shortly', undefined, { 'retry-after': '1' });
}

export class Jobs {
  private readonly pool: Piscina;
  /**
   * Verifications of keys whose prefix exists (and key creation) are served before guesses at
   * unknown prefixes, from a queue of their own: random keys from many addresses, which fill
   * `queue`, neither delay nor push out a real key. Attempts on one real prefix are bounded by
   * the failure limiter's per-prefix limit, so this queue cannot be flooded the same way.
   */
  private readonly priority = new FairQueue<Job>(MAX_QUEUED_JOBS);
  private readonly queue = new FairQueue<Job>(MAX_QUEUED_JOBS);
  private running = 0;
  private verifications = 0;
  /**
   * Hash of a random secret with the real keys' parameters: a key whose prefix is unknown
   * (or revoked, expired, deactivated) is verified against it, so every uncached key costs
   * one verification and the time taken does not tell which prefixes exist.
   */
  private readonly dummyHash: Promise<string>;

  constructor(
    private readonly threads: number,
    private readonly log: Logger,
  ) {
    this.pool = new Piscina({
      filename: new URL('./argon2-job.js', import.meta.url).href,
      // No thread kept idle: each is an isolate of ~12 MiB, and keys are verified once then cached;
      // the first verification after 30 s of calm pays a thread start (tens of ms).
      minThreads: 0,
      maxThreads: threads,
      idleTimeout: 30_000,
    });
    this.dummyHash = this.pool.run({ op: 'hash', secret: randomBytes(32).toString('base64url') } satisfies Argon2Task) as Promise<string>;
    this.dummyHash.catch(() => undefined); // a failure surfaces at the first verify that needs it
  }

  hash(secret: string): Promise<string> {
    return this.enqueue(ISSUE_LANE, { op: 'hash', secret }, true) as Promise<string>;
  }

  /**
   * argon2id verify of `secret` against `hash`, or against the dummy hash when `hash` is null.
   * A real hash (a prefix that exists) or `trusted` (an address with a good history) goes first.
   */
  async verify(hash: string | null, secret: string, lane: string, trusted = false): Promise<boolean> {
    const task: Argon2Task = { op: 'verify', hash: hash ?? (await this.dummyHash), secret };
    const valid = (await this.enqueue(lane, task, hash !== null || trusted)) === true;
    this.log.debug({ verifications: ++this.verifications }, 'argon2 verification');
    return valid;
  }

  close(): Promise<void> {
    return this.pool.destroy();
  }

  private enqueue(lane: string, task: Argon2Task, first: boolean): Promise<string | boolean> {
    return new Promise((resolve, reject) => {
      const dropped = (first ? this.priority : this.queue).push(lane, { task, queuedAtMs: Date.now(), resolve, reject });
      dropped?.reject(overloaded());
      this.pump();
    });
  }

  /** Keeps every pool thread busy and no more: the waiting happens in the fair queue. */
  private pump(): void {
    while (this.running < this.threads) {
      const job = this.priority.shift() ?? this.queue.shift();
      if (!job) return;
      if (Date.now() - job.queuedAtMs > MAX_QUEUE_WAIT_MS) {
        job.reject(overloaded());
        continue;
      }
      this.running++;
      (this.pool.run(job.task) as Promise<string | boolean>)
        .then(job.resolve, job.reject)
        .finally(() => {
          this.running--;
          this.pump();
        });
    }
  }
}
