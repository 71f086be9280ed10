import { Command } from 'commander';
import { examples } from './common.js';
import { CliError, EXIT } from './errors.js';

// burrow completion bash|zsh|fish: scripts generated from the command tree itself, so a new
// command or option completes without anyone editing this file.

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
  const subs = cmd.commands.filter((c) => c.name() !== 'help');
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
  local cur path="" w i
  cur="\${COMP_WORDS[COMP_CWORD]}"
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
  COMPREPLY=($(compgen -W "$(_burrow_words "$path")" -- "$cur"))
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
  for (const o of new Set(nodes.flatMap((n) => n.options))) lines.push(`complete -c burrow -l ${o.replace(/^--/, '')}`);
  return lines.join('\n') + '\n';
}

export function registerCompletion(program: Command): void {
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
