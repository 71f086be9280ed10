// The release an operator installs: `npm pack` in a copy of the checkout (its prepack builds
// dist/src), then `npm install -g ./burrow-<version>.tgz --omit=dev` into a temporary prefix,
// then burrowd and burrow run from that prefix's bin/ with no TypeScript anywhere: a key from
// --seed-api-key on the embedded database, an API call, and a visitor's request through a
// tunnel opened by the installed `burrow`.
//
// The copy keeps the suite's own dist/ untouched while other files run from it (prepack empties
// dist/src first, so a release never ships a stale file). Runs once, on the embedded pass: the
// package is the same on the PostgreSQL pass.
import { spawn, spawnSync, type ChildProcess, type SpawnSyncReturns } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { withDeadline } from '../helpers/deadline.js';
import { LISTENING_RE } from '../helpers/server.js';
import { visit, waitFor } from '../cli/harness.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { name: string; version: string };
// What `npm pack` needs from a checkout: the sources it compiles and the files it ships.
const CHECKOUT_FILES = ['package.json', 'package-lock.json', 'tsconfig.json', 'LICENSE', 'README.md', 'src', 'docs', 'contrib'];
const NPM_TIMEOUT_MS = 90_000;
const START_TIMEOUT_MS = 60_000;

const skip = process.env.TEST_DATABASE_URL ? 'the packed release is tested on the embedded pass (it does not depend on the database)' : null;
const work = skip ? '' : mkdtempSync(join(tmpdir(), 'burrow-pack-'));
const prefix = join(work, 'prefix');
const bin = (name: string) => join(prefix, 'bin', name);
const installed = join(prefix, 'lib', 'node_modules', PKG.name);

/** This node first on PATH (npm and the bins' `#!/usr/bin/env node` use it), no npm_* of an outer `npm test`. */
const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('npm_') && !k.startsWith('BURROW_') && k !== 'DATABASE_URL'));
env.PATH = `${dirname(process.execPath)}:${process.env.PATH ?? ''}`;
env.NO_COLOR = '1';

function run(cmd: string, args: string[], cwd: string): SpawnSyncReturns<string> {
  const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', timeout: NPM_TIMEOUT_MS });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status ?? r.signal}\n${r.stdout}\n${r.stderr.slice(-3000)}`);
  return r;
}

const children: ChildProcess[] = [];
let service: Server | null = null;

test.after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  service?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

let packedFiles: string[] = [];

test('npm pack builds a tarball with the compiled server and client, the license, and no TypeScript sources', () => {
  if (skip) return void console.log(`skipped: ${skip}`);
  const checkout = join(work, 'checkout');
  for (const f of CHECKOUT_FILES) if (existsSync(join(ROOT, f))) cpSync(join(ROOT, f), join(checkout, f), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(checkout, 'node_modules'));
  const r = run('npm', ['pack', '--json', '--pack-destination', work], checkout);
  const [info] = JSON.parse(r.stdout.slice(r.stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
  assert.is(info!.filename, `${PKG.name}-${PKG.version}.tgz`);
  packedFiles = info!.files.map((f) => f.path);
  for (const f of ['LICENSE', 'package.json', 'dist/src/main.js', 'dist/src/cli/main.js', 'dist/src/workers/shard-worker.js', 'src/db/migrations/001_init.sql', 'src/client/inspector/page.html']) {
    assert.ok(packedFiles.includes(f), `the tarball has ${f}`);
  }
  assert.equal(packedFiles.filter((f) => f.endsWith('.ts') || f.startsWith('test/') || f.startsWith('bench/')), [], 'no sources, tests or benchmarks');
  const pkg = JSON.parse(readFileSync(join(checkout, 'package.json'), 'utf8')) as Record<string, unknown>;
  assert.is(pkg.license, 'Apache-2.0');
  assert.is(pkg.private, undefined);
  assert.match(readFileSync(join(checkout, 'LICENSE'), 'utf8'), /Apache License\s+Version 2\.0, January 2004/);
});

test('npm install -g --omit=dev puts burrowd and burrow on PATH, without TypeScript or other dev dependencies', () => {
  if (skip) return void console.log(`skipped: ${skip}`);
  run('npm', ['install', '-g', join(work, `${PKG.name}-${PKG.version}.tgz`), '--prefix', prefix, '--omit=dev', '--no-audit', '--no-fund', '--prefer-offline'], work);
  assert.ok(existsSync(bin('burrowd')) && existsSync(bin('burrow')));
  const deps = readdirSync(join(installed, 'node_modules'));
  for (const dev of ['typescript', 'tsx', 'uvu', 'playwright-core', '@sparticuz', 'oidc-provider', 'autocannon']) assert.not.ok(deps.includes(dev), `${dev} is not installed`);
  for (const name of ['burrowd', 'burrow']) {
    const v = spawnSync(bin(name), ['--version'], { env, encoding: 'utf8', timeout: 20_000 });
    assert.is(v.stdout, `${PKG.version}\n`, `${name} --version: ${v.stderr}`);
  }
  // The unit it prints names this node and the installed main script (the bin's target).
  const unit = spawnSync(bin('burrowd'), ['service', 'print'], { env, encoding: 'utf8', timeout: 20_000 });
  assert.is(unit.status, 0, unit.stderr);
  assert.match(unit.stdout, new RegExp(`^ExecStart=${process.execPath.replace(/[.]/g, '\\.')} ${realpathSync(join(installed, 'dist', 'src', 'main.js')).replace(/[.]/g, '\\.')}$`, 'm'));
});

test('the installed burrowd serves the API and a tunnel opened by the installed burrow', async () => {
  if (skip) return void console.log(`skipped: ${skip}`);
  const dataDir = join(work, 'data');
  const server = spawn(bin('burrowd'), ['--port', '0', '--host', '127.0.0.1', '--seed-api-key', '--data-dir', dataDir, '--workers', '1', '--shutdown-timeout', '2000'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(server);
  let out = '';
  let err = '';
  server.stdout!.on('data', (d) => (out += d));
  server.stderr!.on('data', (d) => (err += d));
  const port = Number(await waitFor(() => LISTENING_RE.exec(out)?.[1], START_TIMEOUT_MS, `installed burrowd start; stderr:\n${err.slice(-2000)}`));
  const key = out.split('\n')[0]!;
  assert.is(readFileSync(`/proc/${server.pid}/comm`, 'utf8'), 'burrowd\n');

  const me = await withDeadline(fetch(`http://127.0.0.1:${port}/api/v1/me`, { headers: { authorization: `Bearer ${key}` } }), 10_000, 'GET /me');
  assert.is(me.status, 200);
  assert.is(((await me.json()) as { email: string }).email, 'seed@burrow.local');

  service = createServer((_req, res) => res.end('hello from the packed release\n'));
  const servicePort = await new Promise<number>((r) => service!.listen(0, '127.0.0.1', () => r((service!.address() as { port: number }).port)));
  const client = spawn(bin('burrow'), ['http', String(servicePort), '--no-inspect'], {
    env: { ...env, BURROW_SERVER: `http://127.0.0.1:${port}`, BURROW_TOKEN: key, XDG_CONFIG_HOME: join(work, 'config') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(client);
  let url = '';
  let clientErr = '';
  client.stdout!.on('data', (d) => (url += d));
  client.stderr!.on('data', (d) => (clientErr += d));
  const first = await waitFor(() => (url.includes('\n') ? url.split('\n')[0] : undefined), 20_000, `tunnel URL; stderr:\n${clientErr}`);
  const m = /^http:\/\/([a-z0-9-]+\.localhost):\d+$/.exec(first);
  assert.ok(m, first);
  const r = await visit(port, m![1]!, '/');
  assert.is(r.status, 200, r.body);
  assert.is(r.body, 'hello from the packed release\n');

  client.kill('SIGTERM');
  server.kill('SIGTERM');
  const code = await withDeadline(new Promise<number | null>((r) => (server.exitCode !== null ? r(server.exitCode) : server.once('exit', (c) => r(c)))), 20_000, 'installed burrowd stop');
  assert.is(code, 0, err.slice(-2000));
});

test.run();
