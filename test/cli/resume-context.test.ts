// burrow keeps its resumption ticket in the context file (mode 0600): stopped and started again
// after burrowd restarted, it is taken back without an argon2 verification of its key, as a
// client that stayed up is. A key given by BURROW_TOKEN has no context, and nothing is written.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, type Server } from 'node:http';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';
import { burrow, exitOf, spawnBurrow, tempDir, waitFor } from './harness.js';

const METRICS = ['--metrics-addr', '127.0.0.1:0'];
let first: TestServer;
let second: TestServer | null = null;
let web: Server;
const home = tempDir();
const other = tempDir();

test.before(async () => {
  first = await startServer({ args: METRICS });
  web = createServer((req, res) => res.end(`ok ${req.url}`));
  await new Promise<void>((r) => web.listen(0, '127.0.0.1', r));
});

test.after(async () => {
  web?.close();
  await second?.stop();
  await first?.stop().catch(() => null);
  home.remove();
  other.remove();
});

async function verifications(s: TestServer): Promise<number> {
  const port = Number(/metrics on http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(s.stdout())![1]);
  const text = await withDeadline(fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text()), 10_000, 'metrics');
  return Number(/^burrow_key_verifications_total (\d+)$/m.exec(text)![1]);
}

const configFile = (dir: string): string => join(dir, 'burrow', 'config.json');

/** `burrow http` until its URL is printed, then Ctrl-C. */
async function runOnce(env: { configDir: string; env?: Record<string, string> }): Promise<void> {
  const webPort = (web.address() as { port: number }).port;
  const child = spawnBurrow(env, ['http', String(webPort)]);
  await waitFor(() => (child.output.stdout.includes('\n') ? true : undefined), 15_000, `URL (${child.output.stderr})`);
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'exit'), 0);
}

test('a restarted burrow resumes with the ticket its context kept (0600): no verification after a burrowd restart', async () => {
  const key = await createKeyFor(first, (await createUser(first)).id, { scopes: ['tunnels'] });
  const made = await burrow({ configDir: home.dir }, ['context', 'create', 'here', '--server', first.url, '--token', key]);
  assert.is(made.code, 0, made.stderr);
  await runOnce({ configDir: home.dir });
  const saved = JSON.parse(readFileSync(configFile(home.dir), 'utf8')) as { contexts: Record<string, { resume?: string }> };
  assert.match(saved.contexts.here!.resume ?? '', /^v1\.\d+\.[A-Za-z0-9_-]{43}$/, 'the ticket is in the context');
  assert.is(statSync(configFile(home.dir)).mode & 0o777, 0o600);

  await first.stop({ keepDatabase: true });
  second = await startServer({ db: first.db, args: ['--port', String(first.port), ...METRICS] });
  await runOnce({ configDir: home.dir });
  assert.is(await verifications(second), 0, 'the key was not verified again');
});

test('a key from BURROW_TOKEN keeps no ticket: no config file is written', async () => {
  const s = second ?? first;
  const key = await createKeyFor(s, (await createUser(s)).id, { scopes: ['tunnels'] });
  await runOnce({ configDir: other.dir, env: { BURROW_SERVER: s.url, BURROW_TOKEN: key } });
  assert.throws(() => statSync(configFile(other.dir)), /ENOENT/);
});

test.run();
