import { pino, type Logger } from 'pino';
import { prettyDestination } from './log-pretty.js';

// Logs go to stderr (fd 2): stdout belongs to what users and scripts read (the seed key, the
// CLI's output). JSON lines by default (off a terminal: journald, log shippers); `pretty` is
// a readable line per entry (log-pretty.ts), the default on a terminal. Sync writes keep lines
// whole when a thread dies.
export type LogFormat = 'json' | 'pretty';

/** The format when --log-format is not given: pretty on a terminal, JSON anywhere else. */
export function defaultLogFormat(): LogFormat {
  return process.stderr.isTTY === true ? 'pretty' : 'json';
}

export function createLogger(level: string, bindings: Record<string, unknown> = {}, format: LogFormat = 'json'): Logger {
  const destination = format === 'pretty' ? prettyDestination() : pino.destination({ fd: 2, sync: true });
  return pino({ level, base: { pid: process.pid, ...bindings } }, destination);
}

export type { Logger };
