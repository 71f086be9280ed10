import { writeSync } from 'node:fs';

// `--log-format pretty`: burrowd's log lines as a person reads them on a terminal, written by
// us (no pino-pretty dependency, no transport thread). pino still builds each JSON line; this
// destination turns it into
//   05:31:02.118 INFO  burrowd ready  port=8080 workers=2 database="embedded (./burrow-data)"
// written synchronously to stderr, so a line is whole even when a thread dies right after.

const LEVELS: Record<number, [string, string]> = {
  10: ['TRACE', '\x1b[90m'],
  20: ['DEBUG', '\x1b[36m'],
  30: ['INFO ', '\x1b[32m'],
  40: ['WARN ', '\x1b[33m'],
  50: ['ERROR', '\x1b[31m'],
  60: ['FATAL', '\x1b[41;97m'],
};
const RESET = '\x1b[0m';
const DIM = '\x1b[2m';
/** Fields every line carries or the layout already shows. */
const OMITTED = new Set(['level', 'time', 'msg', 'pid', 'hostname']);
/** A stack beyond this many characters is cut: a log line is not a core dump. */
const MAX_STACK = 4000;

function clock(ms: unknown): string {
  const d = typeof ms === 'number' ? new Date(ms) : new Date();
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

/** key=value: bare when the value is a plain word or number, JSON (quoted, escaped) otherwise. */
function field(key: string, value: unknown): string {
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return `${key}=${String(value)}`;
  if (typeof value === 'string' && /^[\w.:/@+-]+$/.test(value)) return `${key}=${value}`;
  return `${key}=${JSON.stringify(value)}`;
}

/** One pino JSON line → one readable line (plus an error's stack, indented). Not JSON: as is. */
export function prettyLine(json: string, colour: boolean): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.endsWith('\n') ? json : `${json}\n`;
  }
  const [name, paint] = LEVELS[entry.level as number] ?? [String(entry.level).toUpperCase().padEnd(5), ''];
  const paintIf = (code: string, s: string) => (colour && code ? `${code}${s}${RESET}` : s);
  const fields: string[] = [];
  let stack = '';
  for (const [key, value] of Object.entries(entry)) {
    if (OMITTED.has(key) || value === undefined) continue;
    const err = value as { message?: unknown; stack?: unknown; type?: unknown } | null;
    if ((key === 'err' || key === 'error') && err && typeof err === 'object' && typeof err.message === 'string') {
      fields.push(field(key, err.message));
      if (typeof err.stack === 'string') stack = err.stack.slice(0, MAX_STACK).split('\n').slice(1).map((l) => `    ${l.trim()}`).join('\n');
      continue;
    }
    fields.push(field(key, value));
  }
  const message = typeof entry.msg === 'string' ? entry.msg : '';
  const rest = fields.length ? `  ${paintIf(DIM, fields.join(' '))}` : '';
  return `${paintIf(DIM, clock(entry.time))} ${paintIf(paint, name)} ${message}${rest}\n${stack ? `${paintIf(DIM, stack)}\n` : ''}`;
}

/** A pino destination writing pretty lines to fd 2 (colour when stderr is a terminal and NO_COLOR is unset). */
export function prettyDestination(): { write(line: string): void } {
  const colour = process.stderr.isTTY === true && !process.env.NO_COLOR;
  return {
    write(line: string): void {
      const text = prettyLine(line, colour);
      try {
        writeSync(2, text);
      } catch {
        // stderr gone (EPIPE, EAGAIN on a full pipe): a log line is not worth the process.
      }
    },
  };
}
