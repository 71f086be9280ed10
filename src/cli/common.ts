import { Command, InvalidArgumentError } from 'commander';
import { ApiClient } from './client.js';
import { resolveTarget, type Target } from './config.js';
import { CliError, EXIT } from './errors.js';

// What every command shares: the global options, the examples block of --help, and the
// wrapper that hands an action its resolved options and an API client.

export interface GlobalOptions {
  server?: string;
  token?: string;
  context?: string;
  ca?: string;
  json?: boolean;
}

export function addGlobalOptions(program: Command): void {
  program
    .option('--server <url>', 'burrowd address (env BURROW_SERVER; default: the current context)')
    .option('--token <key>', 'API key to use (env BURROW_TOKEN; default: the current context)')
    .option('--context <name>', 'use this context instead of the current one')
    .option('--ca <file>', 'PEM certificate of a CA to trust besides the system\'s, for an https:// server (env BURROW_CA; default: the context\'s)')
    .option('--json', 'print the API JSON on stdout, nothing else');
}

/** Adds "Examples:" to a command's --help. */
export function examples(cmd: Command, lines: string[]): Command {
  cmd.addHelpText('after', `\nExamples:\n${lines.map((l) => (l.startsWith('#') ? `  ${l}` : `  $ ${l}`)).join('\n')}`);
  return cmd;
}

export interface ActionContext<O> {
  opts: O & GlobalOptions;
  json: boolean;
  target: () => Target;
  client: () => ApiClient;
}

/**
 * Wrap a command action: commander passes (...args, options, command); the handler gets the
 * positional args and a context with the merged options (globals included).
 */
export function act<O = Record<string, unknown>, A extends unknown[] = string[]>(
  handler: (ctx: ActionContext<O>, ...args: A) => Promise<void> | void,
): (...raw: unknown[]) => Promise<void> {
  return async (...raw: unknown[]) => {
    const cmd = raw[raw.length - 1] as Command;
    const args = raw.slice(0, raw.length - 2) as A;
    const opts = cmd.optsWithGlobals() as O & GlobalOptions;
    let target: Target | null = null;
    const getTarget = () => (target ??= resolveTarget({ server: opts.server, token: opts.token, context: opts.context, ca: opts.ca }));
    let client: ApiClient | null = null;
    const ctx: ActionContext<O> = {
      opts,
      json: Boolean(opts.json),
      target: getTarget,
      client: () => (client ??= new ApiClient(getTarget())),
    };
    await handler(ctx, ...args);
  };
}

/** commander argParser for a positive integer option. */
export function positiveInt(name: string, max = Number.MAX_SAFE_INTEGER) {
  return (v: string): number => {
    // Decimal digits only: Number() would also take "1e3", "0x10" and " 12 ".
    const n = /^\d{1,16}$/.test(v) ? Number(v) : NaN;
    if (!Number.isInteger(n) || n < 1 || n > max) throw new InvalidArgumentError(`${name} must be an integer in 1..${max}, got "${v}"`);
    return n;
  };
}

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Find one item by a reference the user typed: exact id, a unique id prefix, or an exact match
 * of one of `names` (e.g. a team name or an email). Ambiguity and absence are errors with hints.
 */
export function pickOne<T extends { id: string }>(
  items: readonly T[],
  ref: string,
  what: string,
  listCommand: string,
  names: (item: T) => (string | null | undefined)[] = () => [],
  /** Shortest id prefix accepted: destructive commands must not act on a one-character guess. */
  minPrefix = 1,
): T {
  const exact = items.find((i) => i.id === ref);
  if (exact) return exact;
  const byName = items.filter((i) => names(i).some((n) => n !== null && n !== undefined && n === ref));
  if (byName.length === 1) return byName[0]!;
  if (byName.length === 0 && ref.length < minPrefix) {
    throw new CliError(EXIT.usage, `${what} id prefix too short`, `"${ref}" is not a ${what} name, and an id prefix needs at least ${minPrefix} characters`, `\`${listCommand}\` shows the ids`);
  }
  const lower = ref.toLowerCase();
  const byPrefix = items.filter((i) => i.id.toLowerCase().startsWith(lower));
  if (byPrefix.length === 1) return byPrefix[0]!;
  if (byPrefix.length > 1 || byName.length > 1) {
    const ids = (byPrefix.length > 1 ? byPrefix : byName).map((i) => i.id).join(', ');
    throw new CliError(EXIT.usage, `ambiguous ${what}`, `"${ref}" matches ${ids}`, `give more characters of the id; \`${listCommand}\` lists them`);
  }
  throw new CliError(EXIT.notFound, `Not Found`, `no ${what} matches "${ref}"`, `\`${listCommand}\` lists them`);
}

export function parseChoice<T extends string>(name: string, allowed: readonly T[]) {
  return (v: string): T => {
    if (!(allowed as readonly string[]).includes(v)) throw new InvalidArgumentError(`${name} must be one of ${allowed.join(', ')}`);
    return v as T;
  };
}
