// burrow http across a server restart: not a TTY, so it prints a plain line per reconnect attempt
// on stderr (no spinner), keeps the same URL, and serves again once the server is back.
import { connect } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';
import { RestartScene } from './restart-scene.js';
import { exitOf, spawnBurrow, waitFor } from './harness.js';

const scene = new RestartScene();

test.before(() => scene.setUp());
test.after(() => scene.tearDown());

function get(port: number, host: string, path: string): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => s.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`));
      let data = '';
      s.on('data', (d) => (data += d));
      s.on('end', () => resolve(data));
      s.on('error', reject);
    }),
    10_000,
    `GET ${host}${path}`,
  );
}

test('a restart of burrowd: reconnect lines on stderr, same URL, traffic flows again', async () => {
  // Not the seed key: a restart with --seed-api-key revokes the previous seed key.
  const key = await createKeyFor(scene.first, (await createUser(scene.first)).id, { scopes: ['tunnels'] });
  const port = scene.first.port;
  scene.child = spawnBurrow({ configDir: scene.home.dir, env: { BURROW_SERVER: scene.first.url, BURROW_TOKEN: key } }, ['http', String(scene.webPort), '--id', 'survivor']);
  const c = scene.child;
  await waitFor(() => (c.output.stdout.includes('\n') ? true : undefined), 15_000, 'URL');
  assert.is(c.output.stdout, `http://survivor.localhost:${port}\n`);

  await scene.first.stop({ keepDatabase: true });
  await waitFor(() => (/^reconnecting in \d+(ms|\.\d+s) \(attempt 1\): /m.test(c.output.stderr) ? true : undefined), 15_000, 'reconnect line');
  await scene.startSecond();
  await waitFor(() => (/^reconnected$/m.test(c.output.stderr) ? true : undefined), 40_000, 'reconnected line');
  const res = await get(port, `survivor.localhost:${port}`, '/again');
  assert.match(res, /^HTTP\/1\.1 200/);
  assert.match(res, /ok \/again$/);
  await waitFor(() => (/^\d\d:\d\d:\d\d\.\d{3}\s+GET\s+\/again\s+200 OK/m.test(c.output.stdout) ? true : undefined), 10_000, 'request line');
  assert.is(c.output.stdout.split('\n')[0], `http://survivor.localhost:${port}`); // printed once, scene.first
  assert.not.match(c.output.stderr, /\x1b\[/); // no spinner or cursor codes off a TTY
  c.kill('SIGINT');
  assert.is(await exitOf(c, 10_000, 'exit'), 0);
});

test.run();
