import argon2 from 'argon2';

// piscina task (runs on the pool's threads, see jobs.ts): argon2id hash or verify.
// OWASP's argon2id baseline: 19 MiB memory, 2 iterations, 1 lane.
const OPTIONS = { type: argon2.argon2id, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

export type Argon2Task = { op: 'hash'; secret: string } | { op: 'verify'; hash: string; secret: string };

export default async function run(task: Argon2Task): Promise<string | boolean> {
  if (task.op === 'hash') return argon2.hash(task.secret, OPTIONS);
  try {
    return await argon2.verify(task.hash, task.secret);
  } catch {
    return false; // malformed hash in the row: treat as a failed verification
  }
}
