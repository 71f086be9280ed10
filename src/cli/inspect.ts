import type { Command } from 'commander';
import type { Inspector } from '../client/inspector/server.js';
import { CliError, EXIT } from './errors.js';
import { err } from './output.js';

// The request inspector's flags, shared by `burrow http` and `burrow start`:
//   (default)      http://127.0.0.1:4040, or the next free port up to 4049; none free: a warning
//   --inspect ADDR exactly there (port, host:port, [v6]:port), or exit 1
//   --no-inspect   no inspector
// The address goes to stderr (stdout is the URL's) and to the status screen.

export function addInspectOptions(cmd: Command): Command {
  return cmd
    .option('--inspect <addr>', 'serve the request inspector here (default 127.0.0.1:4040, or the next free port)')
    .option('--no-inspect', 'no request inspector');
}

export interface StartedInspector {
  /** null with --no-inspect, or when no default port was free. */
  inspector: Inspector | null;
  /**
   * Prints the address (or why there is none) through `print` (a stderr line; on a TTY above the
   * status block). Called once the tunnel is up, so a refused tunnel's stderr is only its error.
   */
  announce(print?: (line: string) => void): void;
}

/**
 * Starts the inspector as the flag says (before the tunnel, so its first request is captured).
 * BURROW_INSPECT_BASE_PORT moves the default base port: the test suites run many
 * `burrow http` at once and must not fight over 4040.
 */
export async function startInspectorFromFlag(flag: string | boolean | undefined): Promise<StartedInspector> {
  if (flag === false) return { inspector: null, announce: () => undefined };
  // Loaded here: management commands never pay for the inspector.
  const { DEFAULT_INSPECT_PORT, InspectorListenError, isLoopbackHost, parseInspectAddress, startInspector } = await import('../client/inspector/server.js');
  const lines = (inspector: Inspector | null, notes: string[]): StartedInspector => ({
    inspector,
    announce: (print = (l: string) => err.line(l)) => notes.forEach((n) => print(n)),
  });
  if (typeof flag === 'string') {
    let address;
    try {
      address = parseInspectAddress(flag);
    } catch (e) {
      throw new CliError(EXIT.usage, 'invalid --inspect', (e as Error).message, 'e.g. `--inspect 4041` or `--inspect 127.0.0.1:4041`');
    }
    let inspector: Inspector;
    try {
      inspector = await startInspector({ address });
    } catch (e) {
      if (e instanceof InspectorListenError) throw new CliError(EXIT.error, 'inspector not started', e.message, 'pick another --inspect address, or --no-inspect');
      throw e;
    }
    const notes = [`burrow: inspector at ${inspector.url}`];
    if (!isLoopbackHost(address.host)) notes.unshift(`burrow: warning: the inspector listens on ${inspector.url}: whoever reaches that address can read and replay the captured requests`);
    return lines(inspector, notes);
  }
  const base = Number(process.env.BURROW_INSPECT_BASE_PORT) || DEFAULT_INSPECT_PORT;
  try {
    const inspector = await startInspector({ basePort: base });
    return lines(inspector, [`burrow: inspector at ${inspector.url}`]);
  } catch (e) {
    if (!(e instanceof InspectorListenError)) throw e;
    return lines(null, [`burrow: warning: no request inspector: ${e.message} (choose one with --inspect ADDR)`]);
  }
}
