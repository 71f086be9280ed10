import { ExposeStats, type ConnectionEvent, type RequestEvent } from './expose-stats.js';
import { formatBytes, formatDuration, formatMs, painter, type Painter } from './output.js';
import type { AccessRules } from '../protocol/access.js';

// What `burrow http|tcp` shows while it runs.
//
//   stdout  the public URL (first line, always), then one line per request / TCP connection
//   stderr  TTY: a status block kept at the bottom of the terminal and redrawn in place;
//           not a TTY: plain lines for state changes (reconnecting, reconnected, closed)
//
// On a TTY both streams usually reach the same terminal, so before a request line is written
// the block is erased and afterwards drawn again: the lines scroll above it, as with ngrok.

export type TunnelState = 'connecting' | 'online' | 'reconnecting' | 'closed';

export interface ScreenInfo {
  type: 'http' | 'tcp';
  url: string | null;
  local: string;
  account: string | null;
  state: TunnelState;
  stateDetail: string | null;
  /** the tunnel's access rules in one line (accessSummary), or null */
  access?: string | null;
}

/** Access rules in one line for people: who may log in (user names, never passwords), address lists, expiry. */
export function accessSummary(rules: AccessRules | undefined): string | null {
  if (!rules) return null;
  const parts: string[] = [];
  if (rules.basicAuth?.length) parts.push(`basic auth (${rules.basicAuth.map((c) => c.slice(0, c.indexOf(':'))).join(', ')})`);
  if (rules.allowIp?.length) parts.push(`allow ${rules.allowIp.join(' ')}`);
  if (rules.denyIp?.length) parts.push(`deny ${rules.denyIp.join(' ')}`);
  if (rules.expiresAt != null) parts.push(`expires ${new Date(rules.expiresAt).toISOString().replace(/\.\d{3}Z$/, 'Z')}`);
  return parts.length ? parts.join(' · ') : null;
}

const REDRAW_INTERVAL_MS = 250;

/** The status block's lines (no trailing newline, no terminal control codes except colour). */
export function renderBlock(info: ScreenInfo, stats: ExposeStats, paint: Painter, now = Date.now()): string[] {
  const stateStyle = info.state === 'online' ? 'green' : info.state === 'closed' ? 'red' : 'yellow';
  const row = (k: string, v: string) => `${paint('dim', k.padEnd(18))}${v}`;
  const p50 = formatMs(stats.percentile(50));
  const p90 = formatMs(stats.percentile(90));
  const lines = [
    `${paint('bold', 'burrow')}${' '.repeat(40)}${paint('dim', '(Ctrl+C to quit)')}`,
    '',
    row('Session Status', paint(stateStyle, info.state) + (info.stateDetail ? paint('dim', ` ${info.stateDetail}`) : '')),
  ];
  if (info.account) lines.push(row('Account', info.account));
  lines.push(row('Forwarding', info.url ? `${paint('bold', info.url)} → ${info.local}` : paint('dim', `(waiting) → ${info.local}`)));
  if (info.access) lines.push(row('Access', info.access));
  if (info.type === 'http') {
    lines.push(row('Connections', `open ${stats.openStreams}`));
    lines.push(row('Requests', `total ${stats.requests}   p50 ${p50}   p90 ${p90}`));
  } else {
    lines.push(row('Connections', `total ${stats.connections}   open ${stats.openStreams}   p50 ${p50}   p90 ${p90}`));
  }
  lines.push(row('Traffic', `in ${formatBytes(stats.bytesIn)}   out ${formatBytes(stats.bytesOut)}`));
  lines.push(row('Uptime', formatDuration((now - stats.startedAtMs) / 1000)));
  lines.push('');
  return lines;
}

export function statusStyle(status: number): 'green' | 'cyan' | 'yellow' | 'red' {
  return status >= 500 ? 'red' : status >= 400 ? 'yellow' : status >= 300 ? 'cyan' : 'green';
}

export function requestLine(e: RequestEvent, paint: Painter): string {
  // Paths pad to a column so statuses line up for the usual short paths; long ones just push on.
  return `${paint('bold', e.method.padEnd(7))}${e.path.padEnd(24)}  ${paint(statusStyle(e.status), String(e.status))}  ${paint('dim', formatMs(e.durationMs))}`;
}

export function connectionLine(e: ConnectionEvent, paint: Painter): string {
  return `${paint('bold', 'TCP'.padEnd(7))}${e.remote}  ${paint('dim', formatMs(e.durationMs))}  in ${formatBytes(e.bytesIn)}  out ${formatBytes(e.bytesOut)}`;
}

export function summaryLine(info: ScreenInfo, stats: ExposeStats, now = Date.now()): string {
  const n = info.type === 'http' ? stats.requests : stats.connections;
  const what = `${n} ${info.type === 'http' ? 'request' : 'connection'}${n === 1 ? '' : 's'}`;
  const lat = stats.percentile(50) === null ? '' : ` (p50 ${formatMs(stats.percentile(50))}, p90 ${formatMs(stats.percentile(90))})`;
  return `burrow: ${info.url ?? 'tunnel'} closed after ${formatDuration((now - stats.startedAtMs) / 1000)} · ${what}${lat} · in ${formatBytes(stats.bytesIn)} · out ${formatBytes(stats.bytesOut)}`;
}

export interface ScreenOptions {
  quiet: boolean;
  json: boolean;
}

/** Drives stdout/stderr for one run; `tty` decides between the live block and plain lines. */
export class ExposeScreen {
  readonly stats = new ExposeStats();
  readonly tty = Boolean(process.stderr.isTTY) && process.env.TERM !== 'dumb';
  private readonly outPaint = painter(process.stdout);
  private readonly errPaint = painter(process.stderr);
  private blockLines = 0;
  private drawn = '';
  private timer: NodeJS.Timeout | null = null;

  constructor(
    readonly info: ScreenInfo,
    private readonly opts: ScreenOptions,
  ) {}

  start(): void {
    if (!this.tty || this.opts.json) return;
    process.stderr.write('\x1b[?25l'); // hide the cursor while redrawing; shown again in stop()
    process.once('exit', () => process.stderr.write('\x1b[?25h')); // and on any way out
    this.draw();
    // Checked on a timer rather than per event (a burst of requests costs one redraw), and
    // redrawn only when a line changed: an idle tunnel repaints once a second, for the uptime.
    this.timer = setInterval(() => {
      const lines = this.lines();
      if (lines.join('\n') === this.drawn) return;
      this.clear();
      this.draw(lines);
    }, REDRAW_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.tty && !this.opts.json) {
      this.clear();
      this.draw(); // leave the final state on screen above the summary
      process.stderr.write('\x1b[?25h');
      this.blockLines = 0;
    }
  }

  /** The first stdout line: the public URL (JSON mode: an object with it). */
  registered(id: string, url: string, first: boolean): void {
    const previous = this.info.url;
    this.info.url = url;
    this.setState('online', null);
    if (first) this.stdout(this.opts.json ? JSON.stringify({ event: 'registered', id, url }) : url);
    // Without the live block (which has an Access row), the rules go to stderr once.
    if (first && this.info.access && (!this.tty || this.opts.json)) this.note(`access: ${this.info.access}`);
    else if (url !== previous) this.note(`now at ${url}`);
  }

  request(e: RequestEvent): void {
    this.stats.addRequest(e);
    if (this.opts.json) return this.stdout(JSON.stringify({ event: 'request', ...e }));
    if (!this.opts.quiet) this.stdout(requestLine(e, this.outPaint));
  }

  connection(e: ConnectionEvent): void {
    this.stats.addConnection(e);
    if (this.opts.json) return this.stdout(JSON.stringify({ event: 'connection', ...e }));
    if (!this.opts.quiet) this.stdout(connectionLine(e, this.outPaint));
  }

  openStreams(n: number): void {
    this.stats.openStreams = n;
  }

  setState(state: TunnelState, detail: string | null): void {
    this.info.state = state;
    this.info.stateDetail = detail;
  }

  reconnecting(attempt: number, delayMs: number, reason: string): void {
    this.setState('reconnecting', `(attempt ${attempt}, in ${formatMs(delayMs)}: ${reason})`);
    // Not a TTY: a line per attempt instead of a spinner, so logs show what happened when.
    if (!this.tty || this.opts.json) this.note(`reconnecting in ${formatMs(delayMs)} (attempt ${attempt}): ${reason}`);
  }

  /** A state change line on stderr (above the block on a TTY). */
  note(text: string): void {
    this.above(() => process.stderr.write(`${this.errPaint('dim', text)}\n`));
  }

  summary(): void {
    process.stderr.write(summaryLine(this.info, this.stats) + '\n');
  }

  private stdout(line: string): void {
    this.above(() => process.stdout.write(line + '\n'));
  }

  private above(write: () => void): void {
    const live = this.timer !== null;
    if (live) this.clear();
    write();
    if (live) this.draw();
  }

  private clear(): void {
    if (this.blockLines === 0) return;
    // CSI n F: up n lines to column 1; CSI J: erase to the end of the screen.
    process.stderr.write(`\x1b[${this.blockLines}F\x1b[J`);
    this.blockLines = 0;
  }

  private lines(): string[] {
    const width = Math.max(20, (process.stderr.columns || 80) - 1);
    return renderBlock(this.info, this.stats, this.errPaint).map((l) => truncate(l, width));
  }

  private draw(lines = this.lines()): void {
    process.stderr.write(lines.join('\n') + '\n');
    this.blockLines = lines.length;
    this.drawn = lines.join('\n');
  }
}

/** Cut a line to `width` visible characters so the block never wraps (wrapping breaks redraws). */
function truncate(line: string, width: number): string {
  let visible = 0;
  let outStr = '';
  for (let i = 0; i < line.length; ) {
    const m = /^\x1b\[[0-9;?]*[A-Za-z]/.exec(line.slice(i));
    if (m) {
      outStr += m[0];
      i += m[0].length;
      continue;
    }
    if (visible < width) outStr += line[i];
    visible++;
    i++;
  }
  return outStr + (visible > width ? '\x1b[0m' : '');
}
