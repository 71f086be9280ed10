// The command tree and the top-level error handling of `burrow` (main.ts only runs it). Every
// failure becomes one `error:` line + a `hint:` line on stderr and an exit code from errors.ts.
import { Command, CommanderError } from 'commander';
import { act, addGlobalOptions, examples } from './common.js';
import { registerCompletion } from './completion.js';
import { registerContext } from './context.js';
import { CliError, EXIT } from './errors.js';
import { registerExpose } from './expose.js';
import { registerKeys } from './keys.js';
import { registerLogin } from './login.js';
import { err, out, printJson } from './output.js';
import { registerProfile } from './profile.js';
import { registerSessions } from './sessions.js';
import { registerConfig, registerStart } from './start.js';
import { registerStop } from './detach.js';
import { registerTeams } from './teams.js';
import { registerTunnels } from './tunnels.js';
import { registerUsers } from './users.js';
import { registerDomains } from './domains.js';
import { burrowVersion } from '../version.js';

const version = burrowVersion;

function printVersion(json: boolean): void {
  if (json) printJson({ version: version(), node: process.versions.node });
  else out.line(version());
}

/** `burrow version` (the word people type first) next to commander's --version. */
function registerVersion(program: Command): void {
  examples(
    program
      .command('version')
      .description('print the burrow version (--json: {version, node})')
      .action(act((ctx) => printVersion(ctx.json))),
    ['burrow version', 'burrow --version --json'],
  );
}

export function buildProgram(): Command {
  const program = new Command('burrow');
  program
    .description('burrow: expose local services through your burrowd server, and manage keys, teams and tunnels')
    .version(version(), '-V, --version')
    // Set before any subcommand exists: commander copies these settings into each new command.
    .exitOverride()
    .configureHelp({ showGlobalOptions: true, sortSubcommands: false })
    // Under --json, commanderExit prints commander's message as the JSON error instead.
    .configureOutput({ outputError: (text, write) => (jsonErrors ? undefined : write(err.paint('red', text))) });
  addGlobalOptions(program);
  examples(program, [
    'burrow context create local --server http://localhost:8080 --token "$KEY"',
    'burrow http 3000',
    'burrow start                 # the tunnels of ./burrow.yml',
    'burrow keys create ci --scopes tunnels --expires 30d',
    'burrow teams create web && burrow teams add-member web USER_ID',
    'burrow sessions --limit 10',
  ]);
  program.addHelpText('after', '\nExit codes: 0 ok, 1 error, 2 usage, 3 auth (401/403), 4 not found, 5 conflict, 6 server unreachable.');

  registerExpose(program);
  registerStart(program);
  registerConfig(program);
  registerStop(program);
  registerLogin(program);
  registerProfile(program);
  registerKeys(program);
  registerTeams(program);
  registerUsers(program);
  registerTunnels(program);
  registerDomains(program);
  registerSessions(program);
  registerContext(program);
  registerCompletion(program);
  registerVersion(program);
  return program;
}

/** Under --json an error is one JSON object on stderr (stdout stays the command's output alone). */
let jsonErrors = false;

/** The --json error: the line people read, the hint, the exit code, and the API's status (or null). */
function jsonError(error: string, hint: string | null, exitCode: number, status: number | null): string {
  return JSON.stringify({ error, hint, exit_code: exitCode, status });
}

function printError(e: CliError): void {
  if (jsonErrors) {
    err.line(jsonError(`${e.title}: ${e.detail}`, e.hint ?? null, e.exitCode, e.status ?? null));
    return;
  }
  err.line(`${err.paint('red', 'error:')} ${e.title}: ${e.detail}`);
  if (e.hint) err.line(`${err.paint('dim', 'hint:')} ${e.hint}`);
}

/** commander's own errors: it already printed the message; add the hint and pick the code. */
function commanderExit(program: Command, e: CommanderError, args: string[]): number {
  if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version') return EXIT.ok;
  if (e.code === 'commander.help') return EXIT.usage; // a group without its subcommand: help was shown
  // Point at the help of the deepest command the words name (`burrow keys lst` → `burrow keys`).
  const path: string[] = [];
  let cmd = program;
  for (const a of args) {
    const sub = cmd.commands.find((c) => c.name() === a || c.aliases().includes(a));
    if (!sub) continue;
    path.push(sub.name());
    cmd = sub;
  }
  const hint = `see \`burrow ${path.length ? path.join(' ') + ' ' : ''}--help\``;
  if (jsonErrors) err.line(jsonError(e.message.replace(/^error: /, ''), hint, EXIT.usage, null));
  else err.line(`${err.paint('dim', 'hint:')} ${hint}`);
  return EXIT.usage;
}

export async function main(argv = process.argv): Promise<void> {
  // `burrow keys list | head -1` closes the pipe early: that is not an error.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw e;
  });
  // commander's --version prints plain text only; `burrow --version --json` gives the JSON too.
  const words = argv.slice(2).filter((a) => a !== '--json');
  if (words.length === 1 && (words[0] === '--version' || words[0] === '-V')) {
    printVersion(argv.includes('--json'));
    return;
  }
  jsonErrors = argv.slice(2).includes('--json');
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (e) {
    if (e instanceof CliError) {
      printError(e);
      process.exitCode = e.exitCode;
    } else if (e instanceof CommanderError) {
      process.exitCode = commanderExit(program, e, argv.slice(2));
    } else {
      const msg = e instanceof Error ? e.message : String(e);
      printError(new CliError(EXIT.error, 'unexpected failure', msg, 'run again with BURROW_DEBUG=1 for details'));
      if (process.env.BURROW_DEBUG) console.error(e);
      process.exitCode = EXIT.error;
    }
  }
}

