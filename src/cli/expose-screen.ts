import { ExposeStats, type ConnectionEvent, type RequestEvent } from './expose-stats.js';
import { STATUS_CODES } from 'node:http';
import { formatBytes, formatDuration, formatMs, painter, type Painter } from './output.js';
import type { AccessRules } from '../protocol/access.js';

// What `burrow http|tcp` and `burrow start` show while they run.
//
//   stdout  the public URL (first line, always; `burrow start`: "NAME URL", a line per tunnel),
//           then one line per request / TCP connection (prefixed with the tunnel's name for start)
//   stderr  TTY: a status block kept at the bottom of the terminal and redrawn in place;
//           not a TTY: plain lines for state changes (reconnecting, reconnected, closed)
//
// On a TTY both streams usually reach the same terminal, so before a request line is written
// the block is erased and afterwards drawn again: the lines scroll above it, as with ngrok.

export type TunnelState = 'connecting' | 'online' | 'reconnecting' | 'closed';

/** One tunnel of the run: `burrow http|tcp` has one, `burrow start` one per entry of the file. */
export interface TunnelRow {
  name: string;
  type: 'http' | 'tcp';
  url: string | null;
  local: string;
  /** why the server refused or closed this tunnel for good (the others keep running) */
  failed: string | null;
  /** the tunnel's access rules in one line (accessSummary), or null */
  access?: string | null;
  /** this tunnel's own figures (`burrow start` shows a row each); ExposeScreen keeps them */
  stats?: ExposeStats;
}

/** The server as the block shows it; version and latency are read at each redraw. */
export interface ServerInfo {
  url: string;
  /** burrowd's version from its Welcome; null before it or from an older server */
  readonly version: string | null;
  /** the last heartbeat round trip; null while disconnected */
  readonly latencyMs: number | null;
}

export interface ScreenInfo {
  tunnels: TunnelRow[];
  account: string | null;
  state: TunnelState;
  stateDetail: string | null;
  /** the request inspector's address, when one runs (shown as "Web Interface") */
  webInterface?: string | null;
  /** this burrow's version */
  version?: string;
  server?: ServerInfo;
  /** when the current connection registered its first tunnel (Uptime says both spans) */
  connectedAtMs?: number | null;
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
const LABEL_WIDTH = 18;

type Style = Parameters<Painter>[0];
/** A run of text in one style; `null`: unstyled. Rows are laid out from these so that wrapping
 *  happens between words and never splits a colour code. */
type Span = [Style | null, string];

/**
 * Lays out `label  value` within `width` columns: the value wraps at spaces onto lines indented
 * under the first (a word longer than a whole line, such as a long URL, is split rather than
 * cut: every character stays on screen).
 */
export function layoutRow(label: string, spans: Span[], width: number, paint: Painter): string[] {
  const indent = Math.min(LABEL_WIDTH, Math.max(2, Math.floor(width / 3)));
  const room = Math.max(1, width - indent);
  // Words with the spaces before them (runs kept: "in 1 KB   out 2 KB" keeps its gaps).
  const words: { style: Style | null; text: string; space: number }[] = [];
  let space = 0;
  for (const [style, text] of spans) {
    for (const part of text.split(/( +)/)) {
      if (part === '') continue;
      if (part.startsWith(' ')) space += part.length;
      else {
        words.push({ style, text: part, space });
        space = 0;
      }
    }
  }
  // Each line: its indent and content. A word too long for the value column but not for the
  // line (a long URL) gets a line of its own at a small indent, whole, so it can be selected.
  const lines: { indent: number; text: string }[] = [];
  let line = '';
  let used = 0;
  const flush = (): void => {
    lines.push({ indent, text: line });
    line = '';
    used = 0;
  };
  const WIDE_INDENT = 2;
  for (const w of words) {
    let text = w.text;
    if (text.length > room && text.length <= width - WIDE_INDENT) {
      if (used > 0 || lines.length === 0) flush();
      lines.push({ indent: WIDE_INDENT, text: w.style ? paint(w.style, text) : text });
      continue;
    }
    const gap = used > 0 ? w.space : 0;
    if (used > 0 && used + gap + text.length > room) flush();
    else if (gap) {
      line += ' '.repeat(gap);
      used += gap;
    }
    while (text.length > room - used) {
      const head = text.slice(0, room - used);
      line += w.style ? paint(w.style, head) : head;
      text = text.slice(head.length);
      flush();
    }
    line += w.style ? paint(w.style, text) : text;
    used += text.length;
  }
  if (used > 0 || lines.length === 0) flush();
  const shown = label.length < indent ? label.padEnd(indent) : `${label.slice(0, indent - 1)} `;
  return lines.map((l, i) => (i === 0 ? paint('dim', l.text ? shown : shown.trimEnd()) : ' '.repeat(l.indent)) + l.text);
}

const FIGURE_HEADS = ['ttl', 'opn', 'rt1', 'rt5', 'p50', 'p90'];

function figureValues(stats: ExposeStats, type: 'http' | 'tcp', now: number): string[] {
  return [
    String(type === 'http' ? stats.requests : stats.connections),
    String(stats.openStreams),
    stats.rate(60, now).toFixed(2),
    stats.rate(300, now).toFixed(2),
    formatMs(stats.percentile(50)),
    formatMs(stats.percentile(90)),
  ];
}

/**
 * ngrok's connection figures: total, open, arrivals per second over 1 and 5 minutes, p50 and
 * p90 duration; one table row per tunnel when there are several (`ttl` counts an http tunnel's
 * requests and a tcp tunnel's connections).
 */
function figures(rows: { name: string | null; type: 'http' | 'tcp'; stats: ExposeStats }[], width: number, paint: Painter, now: number): string[] {
  const types = new Set(rows.map((r) => r.type));
  const label = types.size > 1 ? 'Requests/Conns' : types.has('http') ? 'Requests' : 'Connections';
  const table = rows.map((r) => ({ name: r.name, values: figureValues(r.stats, r.type, now) }));
  const indent = Math.min(LABEL_WIDTH, Math.max(2, Math.floor(width / 3)));
  const nameCol = Math.max(0, ...rows.map((r) => (r.name === null ? 0 : r.name.length + 2)));
  const col = Math.max(...table.flatMap((r) => r.values.map((v) => v.length + 1)), Math.min(8, Math.floor((width - indent - nameCol) / FIGURE_HEADS.length)));
  const cells = (xs: string[]) => xs.map((x, i) => (i === xs.length - 1 ? x : x.padEnd(col))).join('');
  // Too narrow even for that: each tunnel's figures as words, wrapped.
  if (indent + nameCol + col * FIGURE_HEADS.length > width) {
    return table.flatMap((r, i) => layoutRow(i === 0 ? label : '', [[null, [...(r.name === null ? [] : [r.name]), ...FIGURE_HEADS.map((h, j) => `${h} ${r.values[j]}`)].join('  ')]], width, paint));
  }
  const head = paint('dim', label.padEnd(indent).slice(0, indent)) + paint('dim', ' '.repeat(nameCol) + cells(FIGURE_HEADS));
  return [head, ...table.map((r) => ' '.repeat(indent) + (r.name === null ? '' : r.name.padEnd(nameCol)) + cells(r.values))];
}

/** The status block's lines, each at most `width` columns (no control codes except colour). */
export function renderBlock(info: ScreenInfo, stats: ExposeStats, paint: Painter, now = Date.now(), width = 80): string[] {
  const stateStyle = info.state === 'online' ? 'green' : info.state === 'closed' ? 'red' : 'yellow';
  const row = (k: string, ...spans: Span[]) => layoutRow(k, spans, width, paint);
  const quit = '(Ctrl+C to quit)';
  const lines = [
    width >= 'burrow'.length + quit.length + 2 ? `${paint('bold', 'burrow')}${' '.repeat(width - 'burrow'.length - quit.length)}${paint('dim', quit)}` : paint('bold', 'burrow'),
    '',
    ...row('Session Status', [stateStyle, info.state], ...(info.stateDetail ? [['dim', ` ${info.stateDetail}`] as Span] : [])),
  ];
  if (info.account) lines.push(...row('Account', [null, info.account]));
  if (info.version) lines.push(...row('Version', [null, info.version]));
  if (info.server) {
    const { url, version, latencyMs } = info.server;
    lines.push(...row('Server', [null, url], ...(version ? [['dim', ` (burrowd ${version})`] as Span] : [])));
    lines.push(...row('Latency', [null, latencyMs === null ? '-' : formatMs(latencyMs)]));
  }
  if (info.webInterface) lines.push(...row('Web Interface', [null, info.webInterface]));
  const named = info.tunnels.length > 1;
  const nameWidth = Math.max(...info.tunnels.map((t) => t.name.length));
  const nameSpan = (t: TunnelRow): Span[] => (named ? [[null, `${t.name.padEnd(nameWidth)}  `]] : []);
  for (const [i, t] of info.tunnels.entries()) {
    const target: Span[] = t.failed ? [['red', `failed: ${t.failed}`]] : t.url ? [['bold', t.url], [null, ` → ${t.local}`]] : [['dim', `(waiting) → ${t.local}`]];
    lines.push(...row(i === 0 ? 'Forwarding' : '', ...nameSpan(t), ...target));
  }
  const withAccess = info.tunnels.filter((t) => t.access);
  for (const [i, t] of withAccess.entries()) lines.push(...row(i === 0 ? 'Access' : '', ...nameSpan(t), [null, t.access!]));
  // One tunnel: its figures are the run's; several: a row each, so rates never mix kinds.
  const figureRows = named ? info.tunnels.map((t) => ({ name: t.name, type: t.type, stats: t.stats ?? new ExposeStats(stats.startedAtMs) })) : [{ name: null, type: info.tunnels[0]!.type, stats }];
  lines.push(...figures(figureRows, width, paint, now));
  lines.push(...row('Traffic', [null, `in ${formatBytes(stats.bytesIn)}   out ${formatBytes(stats.bytesOut)}`]));
  // The figures count since this burrow started, across reconnects; the server's listings
  // (`burrow tunnels list`) count the current connection only: both spans, said plainly.
  const connected = info.state === 'online' && info.connectedAtMs != null ? [['dim', `   this connection ${formatDuration((now - info.connectedAtMs) / 1000)}`] as Span] : [];
  lines.push(...row('Uptime', [null, `${formatDuration((now - stats.startedAtMs) / 1000)} since started`], ...connected));
  lines.push('');
  return lines;
}

export function statusStyle(status: number): 'green' | 'cyan' | 'yellow' | 'red' {
  return status >= 500 ? 'red' : status >= 400 ? 'yellow' : status >= 300 ? 'cyan' : 'green';
}

/** When a request or connection arrived, as a line's first column: local time, "15:04:05.123". */
export function clockOf(atMs: number): string {
  const d = new Date(atMs);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

/** "200 OK", "502 Bad Gateway": the status as ngrok prints it. */
export function statusText(status: number): string {
  const text = STATUS_CODES[status];
  return text ? `${status} ${text}` : String(status);
}

/** `now`: when the exchange ended (the line shows when it arrived: now - its duration). */
export function requestLine(e: RequestEvent, paint: Painter, now = Date.now()): string {
  // Paths and statuses pad to columns so the usual short ones line up; long ones just push on.
  const line = `${paint('dim', clockOf(now - e.durationMs))}  ${paint('bold', e.method.padEnd(7))}${e.path.padEnd(24)}  ${paint(statusStyle(e.status), statusText(e.status).padEnd(15))}  ${paint('dim', formatMs(e.durationMs))}`;
  // No answer from the local service: why (the status says what the visitor got).
  return e.error ? `${line}  ${paint('red', e.error)}` : line;
}

export function connectionLine(e: ConnectionEvent, paint: Painter, now = Date.now()): string {
  const head = `${paint('dim', clockOf(now - e.durationMs))}  ${paint('bold', 'TCP'.padEnd(7))}${e.remote}`;
  if (e.error) return `${head}  ${paint('red', `failed: ${e.error}`)}`;
  return `${head}  ${paint('dim', formatMs(e.durationMs))}  in ${formatBytes(e.bytesIn)}  out ${formatBytes(e.bytesOut)}`;
}

export function summaryLine(info: ScreenInfo, stats: ExposeStats, now = Date.now()): string {
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const types = new Set(info.tunnels.map((t) => t.type));
  const counts = [...(types.has('http') ? [plural(stats.requests, 'request')] : []), ...(types.has('tcp') ? [plural(stats.connections, 'connection')] : [])].join(', ');
  const lat = types.size > 1 || stats.percentile(50) === null ? '' : ` (p50 ${formatMs(stats.percentile(50))}, p90 ${formatMs(stats.percentile(90))})`;
  const what = info.tunnels.length === 1 ? (info.tunnels[0]!.url ?? 'tunnel') : plural(info.tunnels.length, 'tunnel');
  return `burrow: ${what} closed after ${formatDuration((now - stats.startedAtMs) / 1000)} · ${counts}${lat} · in ${formatBytes(stats.bytesIn)} · out ${formatBytes(stats.bytesOut)}`;
}

export interface ScreenOptions {
  quiet: boolean;
  json: boolean;
  /** `burrow start`: lines and JSON events name their tunnel */
  named?: boolean;
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
  private readonly openByTunnel = new Map<string, number>();
  private readonly nameWidth: number;

  constructor(
    readonly info: ScreenInfo,
    private readonly opts: ScreenOptions,
  ) {
    this.nameWidth = Math.max(...info.tunnels.map((t) => t.name.length));
    for (const t of info.tunnels) t.stats ??= new ExposeStats(this.stats.startedAtMs);
  }

  private row(name: string): TunnelRow {
    return this.info.tunnels.find((t) => t.name === name) ?? this.info.tunnels[0]!;
  }

  /**
   * JSON events of `burrow start` carry the tunnel's name; `burrow http|tcp` keeps its shape.
   * Field names are snake_case, as in the API's JSON (`duration_ms`, `bytes_in`).
   */
  private event(name: string, event: string, fields: object): string {
    // `tunnel` is said by `name` (when named), never twice.
    const snake = Object.fromEntries(Object.entries(fields).filter(([k]) => k !== 'tunnel').map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]));
    return JSON.stringify(this.opts.named ? { event, tunnel: name, ...snake } : { event, ...snake });
  }

  private prefix(name: string, line: string): string {
    return this.opts.named ? `${this.outPaint('dim', name.padEnd(this.nameWidth))}  ${line}` : line;
  }

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

  /** The first stdout line: the public URL (JSON mode: an object with it); `burrow start`: "NAME URL". */
  registered(id: string, url: string, first: boolean, name = this.info.tunnels[0]!.name): void {
    const row = this.row(name);
    const previous = row.url;
    row.url = url;
    if (this.info.state !== 'online') this.info.connectedAtMs = Date.now();
    this.setState('online', null);
    const plain = this.opts.named ? `${name} ${url}` : url;
    if (first) this.stdout(this.opts.json ? this.event(name, 'registered', { id, url }) : plain);
    // Without the live block (which has an Access row), the rules go to stderr once.
    if (first && row.access && (!this.tty || this.opts.json)) this.note(this.opts.named ? `${name} access: ${row.access}` : `access: ${row.access}`);
    // A later registration at another URL (a reconnect that lost the id) is news; the first is stdout's.
    else if (!first && url !== previous) this.note(this.opts.named ? `${name} now at ${url}` : `now at ${url}`);
  }

  /** One tunnel refused or closed for good while the others run on. */
  failed(name: string, code: string, reason: string): void {
    this.row(name).failed = reason;
    if (this.opts.json) this.stdout(this.event(name, 'failed', { code, reason }));
    else this.note(`${name}: ${reason}`);
  }

  request(e: RequestEvent, name = this.info.tunnels[0]!.name): void {
    this.stats.addRequest(e);
    this.row(name).stats!.addRequest(e);
    if (this.opts.json) return this.stdout(this.event(name, 'request', e));
    if (!this.opts.quiet) this.stdout(this.prefix(name, requestLine(e, this.outPaint)));
  }

  connection(e: ConnectionEvent, name = this.info.tunnels[0]!.name): void {
    this.stats.addConnection(e);
    this.row(name).stats!.addConnection(e);
    if (this.opts.json) return this.stdout(this.event(name, 'connection', e));
    if (!this.opts.quiet) this.stdout(this.prefix(name, connectionLine(e, this.outPaint)));
  }

  /** `n` streams open on tunnel `name` (the block shows the sum). */
  openStreams(n: number, name = this.info.tunnels[0]!.name): void {
    this.openByTunnel.set(name, n);
    this.row(name).stats!.openStreams = n;
    let sum = 0;
    for (const v of this.openByTunnel.values()) sum += v;
    this.stats.openStreams = sum;
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

  /**
   * The run ended: under --json a `closed` event per tunnel still running (`code` "stopped" for
   * Ctrl-C / SIGTERM, else the server's reason), with the tunnel's totals since it started.
   * A tunnel that failed earlier had its `failed` event.
   */
  closed(code: string, reason: string): void {
    if (!this.opts.json) return;
    for (const t of this.info.tunnels) {
      if (t.failed !== null) continue;
      const s = t.stats!;
      const counts = t.type === 'http' ? { requests: s.requests } : { connections: s.connections };
      this.stdout(this.event(t.name, 'closed', { code, reason, url: t.url, ...counts, bytesIn: s.bytesIn, bytesOut: s.bytesOut, uptimeS: Math.floor((Date.now() - s.startedAtMs) / 1000) }));
    }
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
    // One column spare: a line that fills the last column makes some terminals wrap, and a
    // wrapped line breaks the redraw (it counts lines).
    const width = Math.max(20, (process.stderr.columns || 80) - 1);
    return renderBlock(this.info, this.stats, this.errPaint, Date.now(), width);
  }

  private draw(lines = this.lines()): void {
    process.stderr.write(lines.join('\n') + '\n');
    this.blockLines = lines.length;
    this.drawn = lines.join('\n');
  }
}
