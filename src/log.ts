import { pino, type Logger } from 'pino';

// Logs are JSON lines on stderr (fd 2): stdout belongs to what users and scripts read
// (the seed key, the CLI's output). Sync writes keep lines whole when a thread dies.
export function createLogger(level: string, bindings: Record<string, unknown> = {}): Logger {
  return pino({ level, base: { pid: process.pid, ...bindings } }, pino.destination({ fd: 2, sync: true }));
}

export type { Logger };
