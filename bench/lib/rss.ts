// Resident memory of a set of processes, from /proc (kB granularity). burrowd is one process
// (its shards are threads), sshd is a listener plus per-connection children: summing the
// pids a target names covers both shapes.
import { readFileSync } from 'node:fs';
import { sleep } from './procs.js';

/** VmRSS summed: for client processes, none of which is another's child. */
export function rssKiB(pids: number[]): number {
  let total = 0;
  for (const pid of pids) {
    try {
      const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) total += Number(m[1]);
    } catch {
      /* exited */
    }
  }
  return total;
}

/**
 * A server's memory: its own process (pids[0]) by VmRSS, its children (burrowd's embedded
 * PostgreSQL, sshd's sessions) by PSS. Their VmRSS summed counts PostgreSQL's shared buffers
 * once per backend, and grows as each backend touches more of them: with it, a churn run read
 * 248 → 328 MiB (+32 %) for a database that only warmed its buffers.
 */
export function serverKiB(pids: number[]): number {
  if (pids.length === 0) return 0;
  let total = rssKiB([pids[0]!]);
  for (const pid of pids.slice(1)) total += memoryOf(pid)?.pssKiB ?? 0;
  return total;
}

/**
 * Waits until serverKiB(`pids()`) stops moving (two samples SETTLE_STEP_MS apart within
 * SETTLED_KIB), at most maxMs, and returns the last sample: a figure taken mid-allocation
 * would be noise. Absolute, not relative: burrowd with its embedded database sits near 1 GB,
 * where 1% would be 10 KB per tunnel at 1k tunnels — the size of the figure itself.
 */
export async function settledServerKiB(pids: () => number[], maxMs = 15_000): Promise<number> {
  const SETTLE_STEP_MS = 1_000;
  const SETTLED_KIB = 256;
  const deadline = Date.now() + maxMs;
  let last = serverKiB(pids());
  for (;;) {
    await sleep(SETTLE_STEP_MS);
    const now = serverKiB(pids());
    if (Math.abs(now - last) <= SETTLED_KIB || Date.now() > deadline) return now;
    last = now;
  }
}

/** One process's resident memory by kind, KiB (weight). */
export interface Memory {
  /** VmRSS: every resident page the process maps, shared or not. */
  rssKiB: number;
  /** RssAnon: private allocations (heaps, stacks, V8): what the process itself costs. */
  anonKiB: number;
  /** RssFile: the binary and libraries mapped from disk, shared with every process mapping them. */
  fileKiB: number;
  /** RssShmem: shared memory (PostgreSQL's shared buffers). */
  shmemKiB: number;
  /** PSS: each page divided by the number of processes mapping it; sums without double counting. */
  pssKiB: number;
  threads: number;
}

/** /proc/<pid>/status and smaps_rollup of one process, or null once it has exited. */
export function memoryOf(pid: number): Memory | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const field = (text: string, name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
    return {
      rssKiB: field(status, 'VmRSS'),
      anonKiB: field(status, 'RssAnon'),
      fileKiB: field(status, 'RssFile'),
      shmemKiB: field(status, 'RssShmem'),
      pssKiB: field(rollup, 'Pss'),
      threads: field(status, 'Threads'),
    };
  } catch {
    return null;
  }
}
