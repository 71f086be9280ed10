import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { Command } from 'commander';
import { act, examples } from './common.js';
import { CliError, EXIT } from './errors.js';
import { err, out, printJson } from './output.js';

// `burrow http|tcp|start --detach`: for scripts, which need the URL and then their prompt back.
//
//   parent ──spawn (own session, stdout+stderr → LOG, IPC channel)──▶ child: the same command
//   child: tunnels up → writes the pid file → sends {ready: lines, notes} → parent prints the URL
//          lines on stdout, the notes (where the inspector listens) on stderr, and exits 0
//   child fails first → parent prints what it logged and exits with its code
//   `burrow stop` (or kill $(cat PIDFILE)) ends it; the child removes its pid file on the way out.
//
// (`URL=$(burrow http 3000 | head -1)` cannot work: head exits after one line, but the shell
// waits for the pipe's writer, which runs until the tunnel ends.)

/** Set in the child's environment: the pid file it writes once its tunnels are up. */
const CHILD_ENV = 'BURROW_DETACHED_PID_FILE';
/** The parent gives up on a child that has not brought its tunnels up by then. */
const READY_TIMEOUT_MS = 60_000;

export interface DetachFlags {
  detach?: boolean;
  pidFile?: string;
}

export function defaultPidFile(): string {
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'burrow', 'burrow.pid');
}

export function detachOptions(cmd: Command): Command {
  return cmd
    .option('--detach', 'run in the background: print the URL once the tunnel is up and return (stop with `burrow stop`)')
    .option('--pid-file <file>', `with --detach: where the background process writes its pid (default ${defaultPidFile().replace(homedir(), '~')}; its log: the same name with .log)`);
}

function logFileOf(pidFile: string): string {
  return pidFile.replace(/\.pid$/, '') + '.log';
}

/** The pid a pid file names, when that process still runs. */
function livePid(pidFile: string): number | null {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, 'utf8').trim());
  } catch {
    return null;
  }
  if (!Number.isInteger(pid) || pid <= 1 || !stillRuns(pid)) return null;
  // A pid is reused once its process is gone: on Linux, make sure it is still a burrow.
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    if (!/burrow|cli\/main\.js/.test(cmdline)) return null;
  } catch {
    /* no /proc: trust the file */
  }
  return pid;
}

/** `pid` has not exited yet (a zombie waiting for its parent counts as exited). */
function stillRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return !existsSync('/proc/self'); // no /proc: kill(0) is all there is
  }
}

/**
 * With --detach in the parent: start the background child, wait for its URLs, print them and
 * return true (the command is done). Otherwise (no --detach, or this is the child) false.
 */
export async function detachIfAsked(opts: DetachFlags): Promise<boolean> {
  if (!opts.detach && opts.pidFile !== undefined) {
    throw new CliError(EXIT.usage, 'invalid --pid-file', '--pid-file only applies with --detach', 'add --detach');
  }
  if (!opts.detach || process.env[CHILD_ENV]) return false;
  const pidFile = resolve(opts.pidFile ?? defaultPidFile());
  const running = livePid(pidFile);
  if (running !== null) {
    throw new CliError(EXIT.conflict, 'already running', `a burrow started with --detach runs as pid ${running} (${pidFile})`, 'stop it with `burrow stop`, or give this one another --pid-file');
  }
  mkdirSync(dirname(pidFile), { recursive: true, mode: 0o700 });
  const logFile = logFileOf(pidFile);
  const logStart = existsSync(logFile) ? statSync(logFile).size : 0;
  const log = openSync(logFile, 'a', 0o600);
  const child = spawn(process.execPath, [...process.execArgv, process.argv[1]!, ...process.argv.slice(2)], {
    detached: true,
    stdio: ['ignore', log, log, 'ipc'],
    env: { ...process.env, [CHILD_ENV]: pidFile },
  });
  closeSync(log);

  const outcome = await new Promise<{ lines: string[]; notes: string[] } | { code: number | null } | 'timeout'>((settle) => {
    const timer = setTimeout(() => settle('timeout'), READY_TIMEOUT_MS);
    child.once('message', (m: { ready?: unknown; notes?: unknown }) => {
      clearTimeout(timer);
      settle({ lines: Array.isArray(m.ready) ? m.ready.map(String) : [], notes: Array.isArray(m.notes) ? m.notes.map(String) : [] });
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      settle({ code });
    });
  });

  if (outcome === 'timeout') {
    child.kill('SIGTERM');
    throw new CliError(EXIT.unreachable, 'not up in time', `the background burrow had no tunnel up within ${READY_TIMEOUT_MS / 1000} s; stopped it`, `see ${logFile}`);
  }
  if ('code' in outcome) {
    // It failed before its tunnels were up: show what it said, as if it had run here.
    const logged = readFileSync(logFile).subarray(logStart).toString('utf8');
    process.stderr.write(logged);
    process.exitCode = outcome.code ?? EXIT.error;
    return true;
  }
  child.disconnect();
  child.unref();
  for (const l of outcome.lines) out.line(l);
  // stderr: `URL=$(burrow http 3000 --detach)` must capture the URL alone.
  for (const n of outcome.notes) err.line(n);
  err.line(err.paint('dim', `burrow: running in the background as pid ${child.pid} (pid file ${pidFile}, log ${logFile}); stop it with \`burrow stop\``));
  return true;
}

/**
 * In the background child, once its tunnels are up: pid file, then the URLs (`lines`, for stdout)
 * and `notes` (for stderr: the inspector's address) to the parent.
 */
export function tellParent(lines: string[], notes: string[] = []): void {
  const pidFile = process.env[CHILD_ENV];
  if (!pidFile || !process.send) return;
  writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o600 });
  process.once('exit', () => {
    try {
      if (readFileSync(pidFile, 'utf8').trim() === String(process.pid)) unlinkSync(pidFile);
    } catch {
      /* already gone */
    }
  });
  // The parent disconnects as soon as it has the message; either side may close the channel first.
  process.send({ ready: lines, notes }, () => {
    if (process.connected) process.disconnect();
  });
}

const STOP_WAIT_MS = 10_000;

export function registerStop(program: Command): void {
  examples(
    program
      .command('stop')
      .description('stop the burrow started in the background with --detach')
      .option('--pid-file <file>', `the pid file --detach wrote (default ${defaultPidFile().replace(homedir(), '~')})`)
      .action(
        act<{ pidFile?: string }>(async (ctx) => {
          const pidFile = resolve(ctx.opts.pidFile ?? defaultPidFile());
          const pid = livePid(pidFile);
          if (pid === null) {
            if (existsSync(pidFile)) unlinkSync(pidFile); // stale: its process is gone
            throw new CliError(EXIT.notFound, 'nothing to stop', `no background burrow runs for ${pidFile}`, 'was it started with --detach (and this --pid-file)?');
          }
          process.kill(pid, 'SIGTERM');
          const end = Date.now() + STOP_WAIT_MS;
          // Wait for the process, not its pid file: it removes the file early in its shutdown.
          while (stillRuns(pid) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
          if (stillRuns(pid)) throw new CliError(EXIT.error, 'still running', `pid ${pid} did not stop within ${STOP_WAIT_MS / 1000} s`, `kill -9 ${pid}`);
          // The child removes its pid file on the way out; if it is gone and the file is still its, do it here.
          try {
            if (readFileSync(pidFile, 'utf8').trim() === String(pid)) unlinkSync(pidFile);
          } catch {
            /* already removed */
          }
          if (ctx.json) printJson({ stopped: pid });
          else err.line(`stopped burrow (pid ${pid})`);
        }),
      ),
    ['burrow http 3000 --detach', 'burrow stop', 'burrow start --detach --pid-file /tmp/dev.pid && burrow stop --pid-file /tmp/dev.pid'],
  );
}
