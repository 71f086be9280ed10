import { Command } from 'commander';
import { act, examples } from './common.js';
import { loadConfig } from './config.js';
import { CliError, EXIT } from './errors.js';
import type { Team, Tunnel } from './types.js';

// burrow completion bash|zsh|fish: scripts generated from the command tree itself, so a new
// command or option completes without anyone editing this file. Values that live in the config
// or on the server (context names, tunnel ids, team names) come from the hidden
// `burrow __complete contexts|tunnels|teams`, which the scripts call at TAB time.

/** Where the scripts ask for values, and which kind: "context use <TAB>" → contexts. */
const DYNAMIC: Record<string, 'contexts' | 'tunnels'> = {
  'context use': 'contexts',
  'context delete': 'contexts',
  'tunnels get': 'tunnels',
  'tunnels delete': 'tunnels',
};
/** Options whose value is completed: `--team <TAB>`, `--context <TAB>`. */
const DYNAMIC_OPTIONS: Record<string, 'contexts' | 'teams'> = { '--team': 'teams', '--context': 'contexts' };
/** A TAB must not hang on a slow or dead server: past this, no candidates. */
const COMPLETE_TIMEOUT_MS = 2_000;

interface Node {
  path: string[]; // e.g. ['teams', 'add-member']
  subcommands: string[];
  options: string[];
}

/** Options that take a value (`--server <url>`): their next word is not a command name. */
function valueOptions(cmd: Command, acc = new Set<string>()): Set<string> {
  for (const o of cmd.options) if (o.long && (o.required || o.optional)) acc.add(o.long);
  for (const s of cmd.commands) valueOptions(s, acc);
  return acc;
}

function walk(cmd: Command, path: string[], globals: string[], acc: Node[]): Node[] {
  const opts = [...globals, ...cmd.options.map((o) => o.long).filter((l): l is string => Boolean(l)), '--help'];
  const subs = cmd.commands.filter((c) => c.name() !== 'help' && !c.name().startsWith('__'));
  acc.push({ path, subcommands: subs.map((c) => c.name()), options: [...new Set(opts)] });
  for (const s of subs) walk(s, [...path, s.name()], globals, acc);
  return acc;
}

function tree(program: Command): Node[] {
  // --version is a root-only flag in practice; the others apply to every command.
  const globals = program.options.map((o) => o.long).filter((l): l is string => Boolean(l) && l !== '--version');
  return walk(program, [], globals, []);
}

export function bashScript(program: Command): string {
  const nodes = tree(program);
  const cases = nodes
    .map((n) => `    "${n.path.join(' ')}") words="${[...n.subcommands, ...n.options].join(' ')}" ;;`)
    .join('\n');
  return `# bash completion for burrow; install: burrow completion bash > /etc/bash_completion.d/burrow
#   or: echo 'source <(burrow completion bash)' >> ~/.bashrc
_burrow() {
  local cur prev path="" w i
  cur="\${COMP_WORDS[COMP_CWORD]}"
  prev="\${COMP_WORDS[COMP_CWORD-1]}"
  case "$prev" in
${Object.entries(DYNAMIC_OPTIONS).map(([o, kind]) => `    ${o}) COMPREPLY=($(compgen -W "$(_burrow_values ${kind})" -- "$cur")); return ;;`).join('\n')}
  esac
  # The command path is the leading words that are not options or option values.
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    case "$w" in
      ${[...valueOptions(program)].join('|')}) ((i++)); continue ;;
      -*) continue ;;
    esac
    case " $(_burrow_words "$path") " in
      *" $w "*) path="\${path:+$path }$w" ;;
    esac
  done
  case "$cur" in
    -*) ;;
    *)
      case "$path" in
${Object.entries(DYNAMIC).map(([path, kind]) => `        "${path}") COMPREPLY=($(compgen -W "$(_burrow_values ${kind})" -- "$cur")); return ;;`).join('\n')}
      esac ;;
  esac
  COMPREPLY=($(compgen -W "$(_burrow_words "$path")" -- "$cur"))
}
# Values from the config or the server; silent (no candidates) when they cannot be had.
_burrow_values() {
  "\${COMP_WORDS[0]}" __complete "$1" 2>/dev/null
}
_burrow_words() {
  local words=""
  case "$1" in
${cases}
  esac
  echo "$words"
}
complete -F _burrow burrow
`;
}

export function zshScript(program: Command): string {
  // zsh runs bash completion functions through bashcompinit: one generator, two shells.
  return `#compdef burrow
# zsh completion for burrow; install: burrow completion zsh > "\${fpath[1]}/_burrow"
#   or: echo 'source <(burrow completion zsh)' >> ~/.zshrc
autoload -U +X bashcompinit && bashcompinit
${bashScript(program).replace(/^#.*\n/gm, '')}`;
}

export function fishScript(program: Command): string {
  const nodes = tree(program);
  const lines: string[] = [
    '# fish completion for burrow; install: burrow completion fish > ~/.config/fish/completions/burrow.fish',
    'complete -c burrow -f',
  ];
  const desc = new Map<string, string>();
  const collect = (cmd: Command, path: string[]) => {
    for (const c of cmd.commands) {
      desc.set([...path, c.name()].join(' '), c.description());
      collect(c, [...path, c.name()]);
    }
  };
  collect(program, []);
  for (const n of nodes) {
    const cond =
      n.path.length === 0
        ? '__fish_use_subcommand'
        : `__fish_seen_subcommand_from ${n.path[n.path.length - 1]}${n.subcommands.length ? `; and not __fish_seen_subcommand_from ${n.subcommands.join(' ')}` : ''}`;
    for (const s of n.subcommands) {
      const d = (desc.get([...n.path, s].join(' ')) ?? '').replace(/'/g, "\\'");
      lines.push(`complete -c burrow -n '${cond}' -a ${s} -d '${d}'`);
    }
  }
  for (const [path, kind] of Object.entries(DYNAMIC)) {
    const [group, sub] = path.split(' ');
    lines.push(`complete -c burrow -n '__fish_seen_subcommand_from ${group}; and __fish_seen_subcommand_from ${sub}' -a '(burrow __complete ${kind} 2>/dev/null)'`);
  }
  for (const o of new Set(nodes.flatMap((n) => n.options))) {
    const kind = DYNAMIC_OPTIONS[o];
    lines.push(`complete -c burrow -l ${o.replace(/^--/, '')}${kind ? ` -x -a '(burrow __complete ${kind} 2>/dev/null)'` : ''}`);
  }
  return lines.join('\n') + '\n';
}

/** The candidates of one kind, one a line. Anything that fails gives none: it runs under a TAB. */
async function candidates(kind: string, client: () => import('./client.js').ApiClient): Promise<string[]> {
  switch (kind) {
    case 'contexts':
      return Object.keys(loadConfig().contexts).sort();
    case 'tunnels':
      return (await client().get<Tunnel[]>('/tunnels')).map((t) => t.id);
    case 'teams':
      // A tunnels-only key cannot list teams: the names on its visible tunnels are what it knows.
      return client()
        .get<Team[]>('/teams')
        .then(
          (teams) => teams.map((t) => t.name),
          async () => [...new Set((await client().get<Tunnel[]>('/tunnels')).flatMap((t) => (t.team_name ? [t.team_name] : [])))],
        );
    default:
      return [];
  }
}

function registerCompleteValues(program: Command): void {
  const cmd = program
    .command('__complete', { hidden: true })
    .description('(for the completion scripts) print the values of one kind: contexts, tunnels, teams')
    .argument('<kind>')
    .action(
      act(async (ctx, kind) => {
        const timeout = new Promise<string[]>((resolve) => setTimeout(() => resolve([]), COMPLETE_TIMEOUT_MS).unref());
        const values = await Promise.race([candidates(kind, ctx.client).catch(() => []), timeout]);
        // Names with whitespace would split into several words in the shells' word lists.
        for (const v of values) if (!/\s/.test(v)) process.stdout.write(`${v}\n`);
        process.exit(0);
      }),
    );
  examples(cmd, ['burrow __complete contexts', 'burrow __complete tunnels', 'burrow __complete teams']);
}

export function registerCompletion(program: Command): void {
  registerCompleteValues(program);
  examples(
    program
      .command('completion')
      .description('print a shell completion script')
      .argument('<shell>', 'bash, zsh or fish')
      .action((shell: string) => {
        const scripts: Record<string, (p: Command) => string> = { bash: bashScript, zsh: zshScript, fish: fishScript };
        const make = scripts[shell];
        if (!make) throw new CliError(EXIT.usage, 'unknown shell', `"${shell}" (supported: bash, zsh, fish)`, 'e.g. `burrow completion bash`');
        process.stdout.write(make(program));
      }),
    ['source <(burrow completion bash)', 'burrow completion zsh > "${fpath[1]}/_burrow"', 'burrow completion fish > ~/.config/fish/completions/burrow.fish'],
  );
}
