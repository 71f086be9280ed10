import { Piscina } from 'piscina';
import { ApiError } from '../errors.js';
import type { Argon2Task } from './argon2-job.js';

// Stateless CPU jobs (argon2id) on a piscina pool owned by the main thread. Shards ask
// main for them, so the machine runs one pool, not one per shard. The queue is bounded:
// when it is full the caller gets 503 instead of waiting behind an unbounded backlog.
export const MAX_QUEUED_JOBS = 256;

export class Jobs {
  private readonly pool: Piscina;

  constructor(threads: number) {
    this.pool = new Piscina({
      filename: new URL('./argon2-job.js', import.meta.url).href,
      minThreads: 1,
      maxThreads: threads,
      maxQueue: MAX_QUEUED_JOBS,
      idleTimeout: 30_000,
    });
  }

  async argon2(task: Argon2Task): Promise<string | boolean> {
    try {
      return (await this.pool.run(task)) as string | boolean;
    } catch (err) {
      if (String((err as Error).message).includes('queue')) {
        throw new ApiError('unavailable', 'key verification is overloaded; retry shortly', undefined, { 'retry-after': '1' });
      }
      throw err;
    }
  }

  close(): Promise<void> {
    return this.pool.destroy();
  }
}
