import { styleText } from 'node:util';
import { printable } from '../client/terminal-text.js';

// Everything a command prints goes through here: colour (only on a TTY, never with NO_COLOR),
// aligned tables (kubectl-style: upper-case headers, no borders, so `grep`/`awk` still work),
// JSON, byte units and durations.

type Stream = NodeJS.WriteStream;
type Style = Parameters<typeof styleText>[0];

/** https://no-color.org: any non-empty NO_COLOR disables colour; FORCE_COLOR=1..3 forces it. */
export function colourEnabled(stream: Stream): boolean {
  const env = process.env;
  if (env.NO_COLOR) return false;
  if (env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '') return env.FORCE_COLOR !== '0' && env.FORCE_COLOR !== 'false';
  return Boolean(stream.isTTY) && env.TERM !== 'dumb';
}

export interface Painter {
  (style: Style, text: string): string;
  enabled: boolean;
}

/** A colouring function bound to one stream's capability (stdout and stderr may differ). */
export function painter(stream: Stream): Painter {
  const enabled = colourEnabled(stream);
  // validateStream: false because the decision is made here, per stream (Node's own check looks
  // at process.stdout only, which is wrong for stderr output).
  const paint = ((style: Style, text: string) => (enabled ? styleText(style, text, { validateStream: false }) : text)) as Painter;
  paint.enabled = enabled;
  return paint;
}

export const out = {
  stream: process.stdout,
  paint: painter(process.stdout),
  line(text = ''): void {
    process.stdout.write(text + '\n');
  },
};

export const err = {
  stream: process.stderr,
  paint: painter(process.stderr),
  line(text = ''): void {
    process.stderr.write(text + '\n');
  },
};

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

// eslint-disable-next-line no-control-regex
const ANSI_RE = /\x1b\[[0-9;?]*[A-Za-z]/g;

export function visibleLength(s: string): number {
  return [...s.replace(ANSI_RE, '')].length;
}

export interface Column<T> {
  header: string;
  value: (row: T) => string;
  /** Colour for a cell, from its row (e.g. status). */
  style?: (row: T) => Style | undefined;
  align?: 'left' | 'right';
}

/** Rows as aligned columns; the last column is not padded so lines carry no trailing blanks. */
export function table<T>(rows: readonly T[], columns: Column<T>[], paint: Painter = out.paint): string {
  // Cells are the server's data (names, emails, ids): nothing in them may act on the terminal.
  const cells = rows.map((r) => columns.map((c) => printable(c.value(r))));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((row) => visibleLength(row[i]!))));
  const pad = (s: string, i: number, last: boolean) => {
    const gap = ' '.repeat(widths[i]! - visibleLength(s));
    if (columns[i]!.align === 'right') return gap + s;
    return last ? s : s + gap;
  };
  const lines = [columns.map((c, i) => pad(paint('bold', c.header), i, i === columns.length - 1)).join('   ')];
  rows.forEach((row, r) => {
    lines.push(
      columns
        .map((c, i) => {
          const text = cells[r]![i]!;
          const style = c.style?.(row);
          return pad(style ? paint(style, text) : text, i, i === columns.length - 1);
        })
        .join('   ')
        .trimEnd(),
    );
  });
  return lines.join('\n');
}

/** Print a table, or a friendly line when there is nothing to show. */
export function printTable<T>(rows: readonly T[], columns: Column<T>[], empty: string): void {
  if (rows.length === 0) {
    err.line(err.paint('dim', empty));
    return;
  }
  out.line(table(rows, columns));
}

/** Key/value lines with aligned keys, for single resources (`whoami`, `tunnels get`). */
export function details(pairs: [string, string, Style?][], paint: Painter = out.paint): string {
  const w = Math.max(...pairs.map(([k]) => k.length));
  // Values are the server's data, as table cells: made printable, then coloured.
  return pairs.map(([k, v, style]) => `${paint('dim', k.padEnd(w))}   ${style ? paint(style, printable(v)) : printable(v)}`).join('\n');
}

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** 1536 → "1.5 KiB"; bytes stay exact below 1 KiB. */
export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '-';
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < BYTE_UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  if (u === 0) return `${v} B`;
  return `${v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)} ${BYTE_UNITS[u]}`;
}

/** Seconds → "45s", "3m 12s", "2h 5m", "4d 3h": the two largest units. */
export function formatDuration(secs: number | null | undefined): string {
  if (secs === null || secs === undefined || !Number.isFinite(secs)) return '-';
  const s = Math.max(0, Math.floor(secs));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${m % 60}m`;
  const d = Math.floor(h / 24);
  return `${d}d ${h % 24}h`;
}

/** Latency in milliseconds → "12ms", "1.25s". */
export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '-';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  return `${(ms / 1000).toFixed(2)}s`;
}

/** An ISO timestamp as "2026-11-23 09:12 UTC" (absolute: tables get copied into tickets). */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) return '-';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
}

/** An ISO timestamp relative to now: "3m ago", "in 29d". */
export function formatAge(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return iso;
  const secs = (t - now) / 1000;
  const text = formatDuration(Math.abs(secs)).split(' ')[0]!;
  return secs >= 0 ? `in ${text}` : `${text} ago`;
}

/** Show a token only by its non-secret prefix ("bk_AbC123xyz789…"), never the secret part. */
export function tokenPrefix(token: string | null | undefined): string {
  if (!token) return '-';
  const m = /^(bk_[0-9A-Za-z]{12})_/.exec(token);
  if (m) return `${m[1]}…`;
  return `${token.slice(0, Math.min(6, Math.floor(token.length / 3)))}…`;
}

/** First 8 characters of a uuid: enough to tell rows apart; commands accept such prefixes. */
export function shortId(id: string | null | undefined): string {
  return id ? id.slice(0, 8) : '-';
}
