// burrow start across a server restart: the one connection comes back and re-opens EVERY
// tunnel of the file (same URLs), and both carry traffic again.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { RestartScene } from './restart-scene.js';
import { exitOf, spawnBurrow, visit, waitFor } from './harness.js';

const scene = new RestartScene();

test.before(() => scene.setUp());
test.after(() => scene.tearDown());

test('a restart of burrowd: both tunnels of the file come back on the new connection', async () => {
  // Not the seed key: a restart with --seed-api-key revokes the previous seed key.
  const key = await createKeyFor(scene.first, (await createUser(scene.first)).id, { scopes: ['tunnels'] });
  const port = scene.first.port;
  const webPort = scene.webPort;
  const file = join(scene.home.dir, 'burrow.yml');
  writeFileSync(file, `version: 1\ntunnels:\n  one: { proto: http, addr: ${webPort}, id: back-one }\n  two: { proto: http, addr: ${webPort}, id: back-two }\n`);
  scene.child = spawnBurrow({ configDir: scene.home.dir, env: { BURROW_SERVER: scene.first.url, BURROW_TOKEN: key } }, ['start', '--config', file]);
  const c = scene.child;
  await waitFor(() => (c.output.stdout.split('\n').length >= 3 ? true : undefined), 20_000, 'two URL lines');
  assert.is(c.output.stdout, `one http://back-one.localhost:${port}\ntwo http://back-two.localhost:${port}\n`);

  await scene.first.stop({ keepDatabase: true });
  await waitFor(() => (/^reconnecting in \d+(ms|\.\d+s) \(attempt 1\): /m.test(c.output.stderr) ? true : undefined), 15_000, 'reconnect line');
  await scene.startSecond();
  await waitFor(() => (/^reconnected$/m.test(c.output.stderr) ? true : undefined), 40_000, 'reconnected line');
  for (const id of ['back-one', 'back-two']) {
    // The two Opens are answered one after the other: poll briefly for the scene.second.
    let got = await visit(port, `${id}.localhost:${port}`, `/${id}`);
    for (const end = Date.now() + 10_000; got.status === 404 && Date.now() < end; ) {
      await new Promise((r) => setTimeout(r, 100));
      got = await visit(port, `${id}.localhost:${port}`, `/${id}`);
    }
    assert.is(got.status, 200, `${id}: ${got.body}`);
    assert.is(got.body, `ok /${id}`);
  }
  assert.is(c.output.stdout.split('\n').filter((l) => /^(one|two) http/.test(l)).length, 2); // URLs printed once
  c.kill('SIGINT');
  assert.is(await exitOf(c, 10_000, 'exit'), 0);
});

test.run();
