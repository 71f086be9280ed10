import { existsSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, relative } from 'node:path';
import { createRequire } from 'node:module';
import type { Document, Node } from 'yaml';
import { CliError, EXIT } from './errors.js';
import { validateTunnel, type TunnelSpec } from './tunnel-spec.js';
import { unknownKeyMessage } from './did-you-mean.js';

// burrow.yml: several tunnels in one file, for `burrow start` and `burrow config check`.
//
//   version: 1
//   server: https://burrow.example.com        # optional: else the current context
//   tunnels:
//     web: { proto: http, addr: 3000, id: myapp }
//     db:  { proto: tcp, addr: "localhost:5432", remote_port: 25432 }
//
// Every problem is reported at once, each with its line and the dotted path of its field
// (`burrow.yml:4: tunnels.web.addr: …`); each entry goes through validateTunnel, the same
// check `burrow http|tcp` runs on its flags.

export interface TunnelFile {
  /** the path as shown to the user */
  path: string;
  server?: string;
  tunnels: TunnelSpec[];
}

export interface FileError {
  line: number | null;
  /** dotted path: tunnels.web.allow_ip[1]; '' for the file as a whole */
  field: string;
  message: string;
}

// yaml loads on the first parse (synchronously, so parsing stays a plain call): every `burrow`
// run imports this file through the command tree, and only start/config read a tunnel file.
const requireYaml = createRequire(import.meta.url);
const loadYaml = (): typeof import('yaml') => requireYaml('yaml') as typeof import('yaml');

const TOP_KEYS = ['version', 'server', 'tunnels'] as const;
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;
/** Far beyond any hand-written file; a bound on what we parse. */
const MAX_FILE_BYTES = 1024 * 1024;

export function formatFileError(path: string, e: FileError): string {
  return `${path}${e.line === null ? '' : `:${e.line}`}: ${e.field ? `${e.field}: ` : ''}${e.message}`;
}

/** The file `burrow start` reads: --config, else ./burrow.yml, else $XDG_CONFIG_HOME/burrow/burrow.yml. */
export function findTunnelFile(explicit: string | undefined): string {
  if (explicit !== undefined) {
    if (!existsSync(explicit)) throw new CliError(EXIT.usage, 'no config file', `${explicit} does not exist`, 'check --config');
    return explicit;
  }
  const inXdg = join(process.env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'burrow', 'burrow.yml');
  for (const p of ['burrow.yml', inXdg]) if (existsSync(p)) return p;
  throw new CliError(
    EXIT.usage,
    'no config file',
    `neither ./burrow.yml nor ${inXdg} exists`,
    'write one (see `burrow start --help` for its shape) or pass --config FILE',
  );
}

/** An invalid file: every error, printed one per line before the usual error line. */
export class TunnelFileError extends CliError {
  constructor(
    readonly path: string,
    readonly errors: FileError[],
  ) {
    super(EXIT.usage, 'invalid config file', `${path}: ${errors.length} error${errors.length === 1 ? '' : 's'}`, 'fix the lines above; `burrow config check` checks the file without starting anything');
  }
  lines(): string[] {
    return this.errors.map((e) => formatFileError(this.path, e));
  }
}

export function readTunnelFile(path: string, now = Date.now()): TunnelFile {
  let text: string;
  try {
    if (statSync(path).size > MAX_FILE_BYTES) throw new Error(`larger than ${MAX_FILE_BYTES} bytes`);
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new CliError(EXIT.usage, 'cannot read config file', `${path}: ${(e as Error).message}`, 'check --config');
  }
  const shown = path.startsWith('/') && !relative(process.cwd(), path).startsWith('..') ? relative(process.cwd(), path) : path;
  const { file, errors } = parseTunnelFile(text, shown, now);
  if (!file) throw new TunnelFileError(shown, errors);
  return file;
}

export function parseTunnelFile(text: string, path: string, now = Date.now()): { file: TunnelFile | null; errors: FileError[] } {
  const { isMap, isScalar, LineCounter, parseDocument } = loadYaml();
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false, strict: true });
  const errors: FileError[] = [];
  for (const e of [...doc.errors, ...doc.warnings]) {
    errors.push({ line: lineCounter.linePos(e.pos[0]).line, field: '', message: e.message.split('\n')[0]! });
  }
  if (doc.errors.length) return { file: null, errors };

  const lineOf = (node: unknown): number | null => {
    const range = (node as Node | null | undefined)?.range;
    return range ? lineCounter.linePos(range[0]).line : null;
  };
  const at = (node: unknown, field: string, message: string) => errors.push({ line: lineOf(node), field, message });

  const root = doc.contents;
  if (!isMap(root)) {
    at(root, '', 'expected a mapping with version, server and tunnels');
    return { file: null, errors };
  }
  for (const pair of root.items) {
    const k = isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
    if (!(TOP_KEYS as readonly string[]).includes(k)) at(pair.key, k, unknownKeyMessage(k, TOP_KEYS));
  }

  const version: unknown = root.get('version', true);
  if (version === undefined) at(root, 'version', 'required: version: 1');
  else if (!isScalar(version) || version.value !== 1) at(version, 'version', `expected 1, got ${JSON.stringify(toJs(doc, version))}`);

  let server: string | undefined;
  const serverNode: unknown = root.get('server', true);
  if (serverNode !== undefined && !(isScalar(serverNode) && serverNode.value === null)) {
    const v: unknown = isScalar(serverNode) ? serverNode.value : undefined;
    let ok = false;
    if (typeof v === 'string') {
      try {
        ok = ['http:', 'https:'].includes(new URL(v).protocol);
      } catch {
        ok = false;
      }
    }
    if (!ok) at(serverNode, 'server', `expected an http:// or https:// URL, got ${JSON.stringify(toJs(doc, serverNode))}`);
    else server = v as string;
  }

  const tunnels: TunnelSpec[] = [];
  const tunnelsNode: unknown = root.get('tunnels', true);
  if (tunnelsNode === undefined) at(root, 'tunnels', 'required: a mapping of tunnel names to their options');
  else if (!isMap(tunnelsNode) || tunnelsNode.items.length === 0) at(tunnelsNode, 'tunnels', 'expected a mapping of tunnel names to their options, with at least one tunnel');
  else {
    for (const pair of tunnelsNode.items) {
      const name = isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
      const where = `tunnels.${name}`;
      if (!NAME_RE.test(name)) at(pair.key, where, 'a tunnel name is 1-63 characters of letters, digits, - and _');
      const entry = pair.value;
      if (!isMap(entry)) {
        at(entry ?? pair.key, where, 'expected a mapping like { proto: http, addr: 3000 }');
        continue;
      }
      let raw: Record<string, unknown>;
      try {
        raw = toJs(doc, entry) as Record<string, unknown>;
      } catch (e) {
        // The library's bound on alias expansion (a "billion laughs" file) throws here.
        at(entry, where, (e as Error).message);
        continue;
      }
      const { spec, errors: fieldErrors } = validateTunnel(name, raw, now);
      for (const fe of fieldErrors) {
        const valueNode = fe.field ? entry.get(fe.field, true) : undefined;
        const keyNode = entry.items.find((p) => isScalar(p.key) && p.key.value === fe.field)?.key;
        const itemNode = fe.index !== undefined && valueNode && 'items' in (valueNode as object) ? (valueNode as unknown as { items: unknown[] }).items[fe.index] : undefined;
        // Unknown keys point at the key; bad values at the value (or list element); missing ones at the entry.
        const node = fe.message.startsWith('unknown key') ? keyNode : (itemNode ?? valueNode ?? pair.key);
        at(node, `${where}.${fe.field}${fe.index === undefined ? '' : `[${fe.index}]`}`, fe.message);
      }
      if (spec && NAME_RE.test(name)) tunnels.push(spec);
    }
    const ids = new Map<string, string>();
    for (const t of tunnels) {
      if (!t.id) continue;
      const other = ids.get(t.id);
      if (other) at((tunnelsNode.get(t.name, true) as { get?: (k: string, keep: true) => unknown })?.get?.('id', true), `tunnels.${t.name}.id`, `"${t.id}" is also the id of tunnel ${other}`);
      else ids.set(t.id, t.name);
    }
  }
  errors.sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
  if (errors.length) return { file: null, errors };
  return { file: { path, ...(server === undefined ? {} : { server }), tunnels }, errors };
}

/** A node's plain value (aliases resolved within the library's alias limit). */
function toJs(doc: Document, node: unknown): unknown {
  return loadYaml().isNode(node) ? (node as Node).toJS(doc) : node;
}
