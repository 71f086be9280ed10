import { readFileSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';

// `burrowd service print`: contrib/burrowd.service (shipped in the package) with ExecStart naming
// this installation: the node that runs this burrowd and the real path of its main script.
// Not the bin link: its `#!/usr/bin/env node` finds no node under systemd's PATH when node
// came from nvm or a tarball, and npm's global prefix differs between systems (/usr/local,
// /usr, ~/.npm-global), so no fixed path in the file is right everywhere.

const TEMPLATE = new URL('../../contrib/burrowd.service', import.meta.url);
const MAIN = new URL('./main.js', import.meta.url);

/** One ExecStart word: double-quoted (systemd's quoting) when it holds a space, quote or backslash. */
function unitWord(s: string): string {
  return /[\s"'\\]/.test(s) ? `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"` : s;
}

/** The command line that starts this burrowd, as an ExecStart value. */
export function execStartHere(): string {
  return [process.execPath, realpathSync(fileURLToPath(MAIN))].map(unitWord).join(' ');
}

/** The unit `template` with its ExecStart line replaced by `execStart`. */
export function serviceUnit(template: string, execStart: string): string {
  if (!/^ExecStart=.*$/m.test(template)) throw new Error('the unit template has no ExecStart line');
  return template.replace(/^ExecStart=.*$/m, `ExecStart=${execStart.replace(/\$/g, '$$$$')}`);
}

/** `burrowd service …`: returns the exit code. */
export function runServiceCommand(args: string[]): number {
  let code = 0;
  const cmd = new Command('burrowd service')
    .description('systemd integration')
    .exitOverride((err) => {
      throw err;
    })
    .showHelpAfterError('(burrowd service --help lists the commands)');
  cmd
    .command('print')
    .summary('print a systemd unit for this installation on stdout')
    .description(
      'print a systemd unit for this installation on stdout: contrib/burrowd.service with ExecStart naming this node and this burrowd\n' +
        '  burrowd service print | sudo tee /etc/systemd/system/burrowd.service\n' +
        'Print it again after moving node or burrow (another node version, another npm prefix).',
    )
    .allowExcessArguments(false)
    .action(() => {
      process.stdout.write(serviceUnit(readFileSync(TEMPLATE, 'utf8'), execStartHere()));
    });
  try {
    cmd.parse(args, { from: 'user' });
  } catch (err) {
    const exitCode = (err as { exitCode?: number }).exitCode;
    code = exitCode === 0 ? 0 : 2;
  }
  return code;
}
