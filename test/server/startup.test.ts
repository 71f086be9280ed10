// What burrowd says and refuses at start-up: a main port already bound by anything (another
// burrowd, any program) stops the start; the start-up line names the real bind address; on a
// terminal stderr explains the seed key while stdout keeps the key alone.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createServer, type Server } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Agent, request } from 'undici';
import { withDeadline } from '../helpers/fixtures.js';
import { LISTENING_RE, MAIN, startServer, type TestServer } from '../helpers/server.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';

// Generous: a start on a loaded 2-core machine has taken over 30 s.
const EXIT_TIMEOUT_MS = 60_000;
const START_TIMEOUT_MS = 60_000;
let t: TestServer | null = null;
let blocker: Server | null = null;
// For the burrowd processes spawned here: a database made from a template starts in a
// fraction of a memory:// one's time.
let db: TestDatabase;

test.before(async () => {
  db = await startDatabase();
});

test.after(async () => {
  blocker?.close();
  await t?.stop();
  await db?.stop();
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs burrowd to its exit (SIGKILL after the deadline, so a start that wrongly succeeds fails the test). */
async function runToExit(args: string[]): Promise<Run> {
  const p = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  p.stdout.on('data', (d) => (stdout += d));
  p.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((r) => p.once('exit', (c) => r(c)));
  try {
    return { code: await withDeadline(exited, EXIT_TIMEOUT_MS, 'burrowd exit on a taken port'), stdout, stderr };
  } catch (err) {
    p.kill('SIGKILL');
    throw new Error(`${(err as Error).message}; stdout: ${stdout}`);
  }
}

/** GET /me on a connection of its own, so the kernel may hand it to any listener of the port. */
async function meOnFreshConnection(srv: TestServer): Promise<number> {
  const agent = new Agent({ pipelining: 0 });
  try {
    const res = await withDeadline(
      request(`${srv.url}/api/v1/me`, { dispatcher: agent, headers: { authorization: `Bearer ${srv.adminKey}`, connection: 'close' } }),
      10_000,
      'GET /me',
    );
    await res.body.dump();
    return res.statusCode;
  } finally {
    await agent.close();
  }
}

function assertRefused(r: Run, port: number): void {
  assert.is(r.code, 1, r.stderr.slice(-1000));
  assert.not.match(r.stdout, /listening/);
  const lines = r.stderr.split('\n').filter(Boolean);
  const plain = lines.filter((l) => !l.startsWith('{'));
  assert.equal(plain, [`burrowd: port ${port} on 127.0.0.1 is already in use (another burrowd or another program): stop it or choose another --port`]);
  assert.ok(lines.some((l) => l.startsWith('{') && JSON.parse(l).level === 50 && JSON.parse(l).code === 'EADDRINUSE'), 'a pino error line');
}

test('a port another program listens on stops the start: exit 1 and one line on stderr', async () => {
  blocker = createServer();
  await new Promise<void>((r) => blocker!.listen(0, '127.0.0.1', r));
  const port = (blocker.address() as { port: number }).port;
  const r = await runToExit(['--port', String(port), '--host', '127.0.0.1', '--workers', '1', '--data-dir', 'memory://']);
  assertRefused(r, port);
  blocker.close();
  blocker = null;
});

test('a second burrowd on the port of a running one stops; the first keeps every request', async () => {
  t = await startServer({ workers: 1 });
  const r = await runToExit(['--port', String(t.port), '--host', '127.0.0.1', '--workers', '1', '--seed-api-key', '--data-dir', 'memory://']);
  assertRefused(r, t.port);
  // Before, the two shared the port through SO_REUSEPORT and some requests met the other's database.
  for (let i = 0; i < 12; i++) assert.is(await meOnFreshConnection(t), 200, `request ${i}`);
});

test('the start-up line names the bind address and the base URL; a loopback one says how to listen publicly', async () => {
  assert.ok(t, 'needs the server of the previous test');
  assert.ok(t!.stdout().includes(`burrowd listening on http://127.0.0.1:${t!.port} (this machine only; --host 0.0.0.0 listens on every interface; base URL http://localhost:${t!.port})\n`), t!.stdout());
  const wild = spawn(process.execPath, [MAIN, '--port', '0', '--host', '0.0.0.0', '--workers', '1', '--database-url', db.url], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  wild.stdout.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => wild.once('exit', (c) => r(c)));
  try {
    await withDeadline(new Promise<void>((resolve) => wild.stdout.on('data', () => LISTENING_RE.test(out) && resolve())), START_TIMEOUT_MS, 'burrowd on 0.0.0.0 start');
    const port = LISTENING_RE.exec(out)![1];
    assert.is(out, `burrowd listening on http://0.0.0.0:${port} (all IPv4 interfaces; base URL http://localhost:${port})\n`);
  } finally {
    wild.kill('SIGTERM');
    await withDeadline(exited, 20_000, 'burrowd stop').catch(() => wild.kill('SIGKILL'));
  }
});

test('the process is named burrowd: `pgrep -x burrowd` and the renewal hook\'s `pkill -x burrowd` find it', async () => {
  assert.ok(t, 'needs the server of the previous test');
  assert.is(readFileSync(`/proc/${t!.proc.pid}/comm`, 'utf8'), 'burrowd\n');
  // Other burrowd processes may run on this machine (other test files): ours must be among them.
  const pgrep = spawnSync('pgrep', ['-x', 'burrowd'], { encoding: 'utf8' });
  assert.is(pgrep.status, 0, pgrep.stderr);
  assert.ok(pgrep.stdout.split('\n').includes(String(t!.proc.pid)), `pgrep -x burrowd: ${pgrep.stdout}`);
  // The README's hook line, with signal 0 (a real HUP would reach every burrowd of the machine).
  assert.is(spawnSync('sh', ['-c', 'pkill -0 -x burrowd']).status, 0);
  // The hook's signal itself, to ours only: burrowd keeps serving (no TLS: nothing to reload).
  process.kill(t!.proc.pid!, 'SIGHUP');
  assert.is(await meOnFreshConnection(t!), 200);
});

// util-linux `script` gives burrowd a pseudo-terminal (Node has none built in). Logs are kept to
// errors: stdout and stderr share the terminal, and a start-up warning would come before the key.
const hasScript = spawnSync('script', ['--version'], { stdio: 'ignore' }).status === 0;

test('on a terminal, stderr says what the key is and how to use it; stdout stays the key alone', async () => {
  if (!hasScript) {
    console.log('skipped: util-linux script(1) is not installed');
    return;
  }
  // script(1) runs the command in a session of its own (the terminal's): killing script's group
  // leaves burrowd behind, and the terminal's hangup is SIGHUP, which burrowd takes as "reload
  // the certificates". So the shell writes its pid and becomes burrowd (exec): the test stops it.
  const pidFile = join(mkdtempSync(join(tmpdir(), 'burrow-tty-')), 'pid');
  const cmd = `echo $$ > '${pidFile}'; exec ` + [process.execPath, MAIN, '--port', '0', '--host', '127.0.0.1', '--workers', '1', '--seed-api-key', '--data-dir', 'memory://', '--database-url', db.url, '--log-level', 'error']
    .map((a) => `'${a}'`)
    .join(' ');
  const p = spawn('script', ['-qefc', cmd, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let tty = '';
  p.stdout.on('data', (d) => (tty += d));
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  try {
    await withDeadline(new Promise<void>((resolve) => p.stdout.on('data', () => tty.includes('BURROW_TOKEN') && resolve())), START_TIMEOUT_MS, `hint on the terminal: ${tty}`);
    const lines = tty.replace(/\r/g, '').split('\n');
    assert.match(lines[0]!, /^bk_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}$/, 'the key alone comes first');
    assert.match(lines[1]!, /^burrowd listening on http:\/\/127\.0\.0\.1:\d+ /);
    assert.match(tty, /admin API key \(user seed@burrow\.local/);
    assert.match(tty, /burrow context create local --server http:\/\/localhost:\d+ --token /);
    assert.not.ok(lines.slice(1).some((l) => l.includes(lines[0]!)), 'the plaintext is not repeated on stderr');
  } finally {
    const pid = Number(readFileSync(pidFile, 'utf8').trim());
    const alive = (): boolean => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    if (pid > 0 && alive()) process.kill(pid, 'SIGTERM');
    for (let waited = 0; pid > 0 && alive() && waited < 20_000; waited += 100) await new Promise((r) => setTimeout(r, 100));
    if (pid > 0 && alive()) process.kill(pid, 'SIGKILL');
    // script ends with its command; if not, its group goes too.
    const killScript = (sig: NodeJS.Signals): void => {
      try {
        process.kill(-p.pid!, sig);
      } catch {
        // gone already
      }
    };
    killScript('SIGTERM');
    await withDeadline(exited, 20_000, 'script exit').catch(() => killScript('SIGKILL'));
    rmSync(dirname(pidFile), { recursive: true, force: true });
  }
});

test.run();
