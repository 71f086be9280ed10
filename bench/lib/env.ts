// What the figures were measured on, recorded next to them (figures without the machine
// they came from cannot be compared).
import { execFileSync } from 'node:child_process';
import { cpus, totalmem, release, availableParallelism } from 'node:os';
import { toolVersions } from './tools.js';

export interface Environment {
  date: string;
  cores: number;
  cpuModel: string;
  memoryGiB: number;
  kernel: string;
  node: string;
  tools: Record<string, string>;
  burrowCommit: string;
}

function git(args: string[], cwd: string): string {
  try {
    return execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return '';
  }
}

export function burrowCommit(repoRoot: string): string {
  const head = git(['rev-parse', '--short=12', 'HEAD'], repoRoot);
  if (!head) return 'unknown (no commit)';
  // Uncommitted changes to src/ change what was measured; say so.
  const dirty = git(['status', '--porcelain', '--', 'src'], repoRoot) !== '';
  return dirty ? `${head} + uncommitted src/ changes` : head;
}

export function environment(repoRoot: string): Environment {
  return {
    date: new Date().toISOString(),
    cores: availableParallelism(),
    cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    kernel: release(),
    node: process.version,
    tools: toolVersions(),
    burrowCommit: burrowCommit(repoRoot),
  };
}
