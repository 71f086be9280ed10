// A strict reader of the Prometheus text format (0.0.4), for the metrics tests: it throws on
// anything a Prometheus server would reject or misread, so a scrape that parses here is valid.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  help: string | null;
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

/** Prometheus reads values with Go's ParseFloat: NaN and Inf in any case (prom-client writes "Nan"). */
function parseValue(v: string, line: string): number {
  if (/^\+?inf$/i.test(v)) return Infinity;
  if (/^-inf$/i.test(v)) return -Infinity;
  if (/^nan$/i.test(v)) return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(v)) throw new Error(`bad sample value "${v}" in: ${line}`);
  return Number(v);
}

/** `{a="x",b="y\"z"}` starting at text[0] === '{'; returns the labels and the rest of the line. */
function parseLabels(text: string, line: string): { labels: Record<string, string>; rest: string } {
  const labels: Record<string, string> = {};
  let i = 1;
  for (;;) {
    if (text[i] === '}') return { labels, rest: text.slice(i + 1) };
    const eq = text.indexOf('=', i);
    if (eq < 0) throw new Error(`unterminated labels in: ${line}`);
    const name = text.slice(i, eq);
    if (!LABEL_NAME.test(name)) throw new Error(`bad label name "${name}" in: ${line}`);
    if (name in labels) throw new Error(`label "${name}" twice in: ${line}`);
    if (text[eq + 1] !== '"') throw new Error(`label value not quoted in: ${line}`);
    let value = '';
    let j = eq + 2;
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] === '\n') throw new Error(`raw newline in a label value: ${line}`);
      if (text[j] !== '\\') {
        value += text[j];
        continue;
      }
      const e = text[++j];
      if (e === 'n') value += '\n';
      else if (e === '\\' || e === '"') value += e;
      else throw new Error(`bad escape \\${e} in: ${line}`);
    }
    if (j >= text.length) throw new Error(`unterminated label value in: ${line}`);
    labels[name] = value;
    i = j + 1;
    if (text[i] === ',') i++;
    else if (text[i] !== '}') throw new Error(`expected , or } after a label in: ${line}`);
  }
}

/** Which family a sample name belongs to (histogram and summary series carry suffixes). */
function familyOf(name: string, families: Map<string, Family>): Family | undefined {
  const exact = families.get(name);
  if (exact) return exact;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const f = families.get(name.slice(0, -suffix.length));
    if (f && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return f;
  }
  return undefined;
}

export function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith('\n')) throw new Error('the exposition must end with a newline');
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  for (const line of text.slice(0, -1).split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) continue; // a plain comment
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      if (!NAME.test(name)) throw new Error(`bad metric name in: ${line}`);
      const f = families.get(name) ?? { name, help: null, type: 'untyped' as const, samples: [] };
      if (f.samples.length > 0) throw new Error(`${kind} after samples of ${name}`);
      if (kind === 'HELP') {
        if (f.help !== null) throw new Error(`HELP twice for ${name}`);
        f.help = rest;
      } else {
        if (!TYPES.has(rest)) throw new Error(`bad TYPE "${rest}" for ${name}`);
        if (families.has(name) && families.get(name)!.type !== 'untyped') throw new Error(`TYPE twice for ${name}`);
        f.type = rest as Family['type'];
      }
      families.set(name, f);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(.*)$/.exec(line);
    if (!m) throw new Error(`bad sample line: ${line}`);
    const name = m[1]!;
    let rest = m[2]!;
    let labels: Record<string, string> = {};
    if (rest.startsWith('{')) ({ labels, rest } = parseLabels(rest, line));
    const parts = rest.trim().split(/\s+/);
    if (!rest.startsWith(' ') || parts.length < 1 || parts.length > 2) throw new Error(`bad sample line: ${line}`);
    const value = parseValue(parts[0]!, line);
    const f = familyOf(name, families);
    if (!f) throw new Error(`sample of ${name} without a TYPE line`);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(key)) throw new Error(`series twice: ${line}`);
    seen.add(key);
    if (f.type === 'counter' && !(value >= 0)) throw new Error(`negative counter: ${line}`);
    f.samples.push({ name, labels, value });
  }
  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

function checkHistogram(f: Family): void {
  const groups = new Map<string, Sample[]>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    groups.set(key, [...(groups.get(key) ?? []), s]);
  }
  for (const samples of groups.values()) {
    const buckets = samples.filter((s) => s.name === `${f.name}_bucket`);
    const count = samples.find((s) => s.name === `${f.name}_count`);
    if (!samples.some((s) => s.name === `${f.name}_sum`) || !count) throw new Error(`${f.name}: _sum or _count missing`);
    let prev = -Infinity;
    let last = 0;
    for (const b of buckets) {
      const le = b.labels.le === '+Inf' ? Infinity : Number(b.labels.le);
      if (!(le > prev)) throw new Error(`${f.name}: buckets not in increasing le order`);
      if (b.value < last) throw new Error(`${f.name}: buckets not cumulative`);
      prev = le;
      last = b.value;
    }
    if (prev !== Infinity) throw new Error(`${f.name}: no +Inf bucket`);
    if (last !== count.value) throw new Error(`${f.name}: +Inf bucket ${last} ≠ _count ${count.value}`);
  }
}

/** Sum of the samples named `name` whose labels include `labels`. */
export function valueOf(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  const f = familyOf(name, families);
  if (!f) throw new Error(`no metric ${name}`);
  return f.samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((n, s) => n + s.value, 0);
}

/** Every sample name the exposition holds (families' names plus _bucket/_sum/_count). */
export function sampleNames(families: Map<string, Family>): Set<string> {
  const names = new Set<string>();
  for (const f of families.values()) {
    names.add(f.name);
    for (const s of f.samples) names.add(s.name);
  }
  return names;
}
