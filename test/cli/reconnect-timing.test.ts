// The reconnect policy, timed: after an outage longer than an exponential backoff would take to
// pass 1 s, `burrow http` is back within 1 s of the restarted server's ready line, and no wait
// it announces is longer than 1 s (README "Reconnecting"); a GoAway brings it back at once.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';
import { RestartScene } from './restart-scene.js';
import { spawnBurrow, visit, waitFor } from './harness.js';

/**
 * Long enough for the old backoff (250 ms doubling) to pass 1 s a wait: its waits were 189, 268,
 * 709, 1150, 2030 ms, so a 4 s outage shows a wait over 1 s and a return seconds after ready.
 */
const OUTAGE_MS = 4_000;
/** The cap, plus a handshake and a registration on a busy 2-core CI machine. */
const BACK_WITHIN_MS = 1_000 + 500;

const scene = new RestartScene();

test.before(() => scene.setUp());
test.after(() => scene.tearDown());

test(`after a ${OUTAGE_MS / 1000} s outage the client is back within 1 s of the server's ready line`, async () => {
  // Not the seed key: a restart with --seed-api-key revokes the previous seed key.
  const key = await createKeyFor(scene.first, (await createUser(scene.first)).id, { scopes: ['tunnels'] });
  const port = scene.first.port;
  scene.child = spawnBurrow({ configDir: scene.home.dir, env: { BURROW_SERVER: scene.first.url, BURROW_TOKEN: key } }, ['http', String(scene.webPort), '--id', 'quick']);
  const c = scene.child;
  await waitFor(() => (c.output.stdout.includes('\n') ? true : undefined), 15_000, 'URL');

  await scene.first.stop({ keepDatabase: true });
  // The outage itself is the scenario: nothing to await but its length.
  await new Promise((r) => setTimeout(r, OUTAGE_MS));
  const back = withDeadline(
    new Promise<number>((resolve) => c.stderr!.on('data', () => /^reconnected$/m.test(c.output.stderr) && resolve(Date.now()))),
    30_000,
    'reconnected line',
  );
  await scene.startSecond();
  const readyAt = Date.now();
  const backAfterMs = (await back) - readyAt;
  const delays = [...c.output.stderr.matchAll(/^reconnecting in (\d+)ms|^reconnecting in (\d+(?:\.\d+)?)s/gm)].map((m) => (m[1] !== undefined ? Number(m[1]) : Number(m[2]) * 1000));
  assert.ok(delays.length >= 5, `several attempts during the outage, saw ${delays.length}:\n${c.output.stderr}`);
  assert.ok(Math.max(...delays) <= 1_000, `every wait at most 1 s, saw ${delays.join(', ')} ms`);
  assert.ok(backAfterMs <= BACK_WITHIN_MS, `back ${backAfterMs} ms after the ready line (at most ${BACK_WITHIN_MS})`);
  const res = await visit(port, `quick.localhost:${port}`, '/again');
  assert.is(res.status, 200);
  console.log(`  back ${backAfterMs} ms after the ready line; ${delays.length} attempts, longest wait ${Math.max(...delays)} ms`);
});

test('a server that shuts down says GoAway: the client tries again at once, not after a backoff', async () => {
  const c = scene.child!;
  const before = c.output.stderr.length;
  await scene.second!.stop({ keepDatabase: true });
  scene.second = null;
  const line = await waitFor(() => /^reconnecting in .*$/m.exec(c.output.stderr.slice(before))?.[0], 10_000, 'reconnect line');
  assert.match(line, /^reconnecting in 0ms \(attempt 1\): /);
});

test.run();
