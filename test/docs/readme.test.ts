// The README's shell blocks, run as a newcomer would paste them: every ```sh block is marked
// `runnable` or `manual: <why>`; the runnable ones run verbatim, in order, in one bash, in a
// directory that looks like a checkout (package.json, dist and node_modules linked in), with
// 8080 and 3000 swapped for free ports so that the suite can run anywhere, and the database
// given through DATABASE_URL.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { withDeadline } from '../helpers/deadline.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
// A fresh embedded database, argon2 and several processes on a busy 2-core machine.
const SCRIPT_TIMEOUT_MS = 90_000;
const STOP_TIMEOUT_MS = 15_000;

interface Block {
  info: string;
  body: string;
  line: number;
}

function shBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  const re = /^```sh([^\n]*)\n([\s\S]*?)^```$/gm;
  for (let m = re.exec(markdown); m; m = re.exec(markdown)) {
    blocks.push({ info: m[1]!.trim(), body: m[2]!, line: markdown.slice(0, m.index).split('\n').length });
  }
  return blocks;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const blocks = shBlocks(readme);
let work = '';
let db: TestDatabase | null = null;

test.after(async () => {
  if (work) rmSync(work, { recursive: true, force: true });
  await db?.stop();
});

test('every sh block of the README says whether the suite runs it', () => {
  assert.ok(blocks.length >= 4, `found ${blocks.length} sh blocks`);
  for (const b of blocks) {
    assert.ok(b.info === 'runnable' || /^manual: \S/.test(b.info), `README.md:${b.line}: mark the block "sh runnable" or "sh manual: <why>", not "sh ${b.info}"`);
  }
});

test('the runnable blocks run verbatim and do what their comments say', async () => {
  const runnable = blocks.filter((b) => b.info === 'runnable');
  assert.ok(runnable.length >= 3);
  work = mkdtempSync(join(tmpdir(), 'burrow-readme-'));
  for (const name of ['package.json', 'bin', 'dist', 'node_modules']) symlinkSync(join(ROOT, name), join(work, name));
  // The blocks `cd "$(mktemp -d)"`: their files land under the test's directory, removed with it.
  mkdirSync(join(work, 'tmp'));
  const [apiPort, servicePort] = [await freePort(), await freePort()];
  const script = [
    'shopt -s expand_aliases', // as in the interactive shell the blocks are pasted into
    'set -e',
    ...runnable.map((b) => `# README.md:${b.line}\n${b.body.replace(/\b8080\b/g, String(apiPort)).replace(/\b3000\b/g, String(servicePort))}`),
    // Not in the README: give the last block's tcp client time to print its address.
    'for i in $(seq 30); do grep -qs tcp:// db.url && break; sleep 1; done',
  ].join('\n');
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: work, XDG_CONFIG_HOME: join(work, '.config'), TMPDIR: join(work, 'tmp'), NO_COLOR: '1' };
  for (const k of Object.keys(env)) if (k.startsWith('BURROW_') || k === 'DATABASE_URL' || k === 'BASE_URL') delete env[k];
  // burrowd's database comes through DATABASE_URL (the environment, not the text): the test's
  // database (a PGlite made from a template, or a PostgreSQL schema). A PGlite created from
  // scratch in ./burrow-data takes 20-40 s on a busy 2-core machine, too close to the runner's
  // per-file limit; lifecycle.test.ts covers that path. The seed key is kept in ./burrow-data.
  db = await startDatabase();
  env.DATABASE_URL = db.url;
  // A process group of its own: the blocks leave burrowd, a tunnel client and a service running.
  const bash = spawn('bash', ['-c', script], { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  let err = '';
  bash.stdout.on('data', (d) => (out += d));
  bash.stderr.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((r) => bash.once('exit', (c) => r(c)));
  const killGroup = (sig: NodeJS.Signals) => {
    try {
      process.kill(-bash.pid!, sig);
    } catch {
      // the group is gone already
    }
  };
  try {
    const code = await withDeadline(exited, SCRIPT_TIMEOUT_MS, `README blocks; stdout so far:\n${out}`).catch((e: Error) => {
      throw new Error(`${e.message}\nstdout:\n${out}\nstderr:\n${err.slice(-3000)}`);
    });
    const context = `stdout:\n${out}\nstderr:\n${err.slice(-3000)}`;
    if (process.env.README_TEST_VERBOSE) console.log(context);
    // Nothing was written into the checkout-like directory; the blocks' files are in their scratch directory.
    assert.equal(readdirSync(work).filter((n) => n !== '.config').sort(), ['bin', 'dist', 'node_modules', 'package.json', 'tmp'], context);
    const scratch = readdirSync(join(work, 'tmp')).map((n) => join(work, 'tmp', n)).find((d) => existsSync(join(d, 'burrowd.out')));
    assert.ok(scratch, `the blocks' scratch directory\n${context}`);
    assert.is(code, 0, context);
    assert.not.match(out, /"status":\s*40[13]/, `no call was refused\n${context}`);
    // The walk-through: the ci key is created and shown, listed, then revoked ({}).
    assert.match(out, /"name":"ci".*"key":"bk_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}"/, context);
    assert.match(out, /\{\}/, context);
    // The CLI: a key alone on a line, and whoami names the seed admin.
    assert.match(out, /^bk_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}$/m, context);
    assert.match(out, /seed@burrow\.local/, context);
    // The metrics block: the live tunnels it names (its byte count depends on a 250 ms report).
    assert.match(out, /^burrow_tunnels\{type="http"\} 2$/m, context);
    assert.match(out, /^burrow_tunnels\{type="tcp"\} 1$/m, context);
    // The tunnel reached the local service.
    assert.match(out, /hello from :\d+/, context);
    assert.is(readFileSync(join(scratch!, 'myapp.url'), 'utf8').split('\n')[0], `http://myapp.localhost:${apiPort}`);
    // A loopback burrowd (as `npm start` runs it) says how to listen publicly.
    assert.match(readFileSync(join(scratch!, 'burrowd.out'), 'utf8'), new RegExp(`^burrowd listening on http://127\\.0\\.0\\.1:${apiPort} \\(this machine only; --host 0\\.0\\.0\\.0 listens on every interface;`, 'm'));
    assert.match(readFileSync(join(scratch!, 'db.url'), 'utf8'), /^tcp:\/\/localhost:\d+\n/);
  } finally {
    killGroup('SIGTERM');
    // burrowd drains on SIGTERM: give the group a while, then SIGKILL what is left.
    for (let waited = 0; waited < STOP_TIMEOUT_MS && groupAlive(bash.pid!); waited += 200) await new Promise((r) => setTimeout(r, 200));
    if (groupAlive(bash.pid!)) killGroup('SIGKILL');
  }
});

/** The first runnable block up to its KEY= line, then the key it settled on: how the walk-through starts. */
function startLines(port: number): string {
  const first = blocks.find((b) => b.info === 'runnable')!.body;
  const upToKey = first.slice(0, first.indexOf('\n', first.indexOf('KEY=$(')) + 1);
  return `${upToKey.replace(/\b8080\b/g, String(port))}echo "KEY=$KEY"\n`;
}

/** Runs `script` in bash in a checkout-like directory (bin, dist linked in); its output. */
async function runIn(dir: string, script: string): Promise<{ code: number | null; out: string; err: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: dir, NO_COLOR: '1' };
  for (const k of Object.keys(env)) if (k.startsWith('BURROW_') || k === 'DATABASE_URL') delete env[k];
  const bash = spawn('bash', ['-c', script], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  let err = '';
  bash.stdout.on('data', (d) => (out += d));
  bash.stderr.on('data', (d) => (err += d));
  const code = await withDeadline(new Promise<number | null>((r) => bash.once('exit', (c) => r(c))), 60_000, `the start lines: ${out}\n${err}`).finally(() => {
    try {
      process.kill(-bash.pid!, 'SIGKILL');
    } catch {
      // the group is gone already
    }
  });
  return { code, out, err };
}

test("pasted while `npm start` runs on the port: the walk-through uses that server's kept key", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'burrow-readme-start-'));
  const key = 'bk_AAAAAAAAAAAA_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB';
  // Stands in for `npm start`: answers GET /api/v1/me to its key only.
  const running = createHttpServer((req, res) => {
    res.writeHead(req.headers.authorization === `Bearer ${key}` ? 200 : 401, { 'content-type': 'application/json' });
    res.end('{}');
  });
  try {
    for (const name of ['bin', 'dist', 'node_modules']) symlinkSync(join(ROOT, name), join(dir, name));
    mkdirSync(join(dir, 'burrow-data'));
    writeFileSync(join(dir, 'burrow-data', 'seed-api-key'), `${key}\n`);
    await new Promise<void>((r) => running.listen(0, '127.0.0.1', r));
    const r = await runIn(dir, startLines((running.address() as AddressInfo).port));
    assert.is(r.code, 0, r.err);
    assert.match(r.out, new RegExp(`^KEY=${key}$`, 'm'), r.err);
  } finally {
    running.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('pasted while another program holds the port: the wait stops at once with burrowd\'s reason', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'burrow-readme-taken-'));
  const blocker = createServer();
  try {
    for (const name of ['bin', 'dist', 'node_modules']) symlinkSync(join(ROOT, name), join(dir, name));
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as AddressInfo).port;
    const r = await runIn(dir, startLines(port));
    assert.is(r.code, 0, r.err);
    assert.match(r.err, new RegExp(`^burrowd did not start:\nburrowd: port ${port} on 127\\.0\\.0\\.1 is already in use \\(another burrowd or another program\\): stop it or choose another --port$`, 'm'));
  } finally {
    blocker.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

test.run();
