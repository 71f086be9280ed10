// A second `burrow http --id X` of the same user takes the live tunnel over: both sides say so.
// The older client exits 5 and names the key that took over when it is another key of the user.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, exitOf, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let webPort: number;
let alice: CliEnv;
let bob: CliEnv;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, admin: alice } = suite);
  webPort = await suite.http();
  ({ cli: bob } = await suite.member({ email: 'bob@example.test' }, ['tunnels']));
});

test.after(async () => {
  await suite?.stop();
});

const start = (c: CliEnv, args: string[]) => suite.burrows.start(c, args);
const firstLine = (child: ReturnType<typeof start>) => suite.burrows.firstLine(child);

test('the same id started again with the same key takes over: the older client exits 5, the newer serves', async () => {
  const older = start(bob, ['http', String(webPort), '--id', 'twice']);
  await firstLine(older);
  const newer = start(bob, ['http', String(webPort), '--id', 'twice']);
  assert.is(await firstLine(newer), `http://twice.localhost:${srv.port}`);
  assert.is(await exitOf(older, 10_000, 'older exit'), 5);
  assert.match(older.output.stderr, /^error: tunnel closed: taken over by another connection using this same key\nhint: another connection now serves this id/m);
  assert.match(newer.output.stderr, /took over the live tunnel "twice"/);
  newer.kill('SIGINT');
  assert.is(await exitOf(newer, 10_000, 'newer exit'), 0);
});

test('taken over by another key of the same user: the older client names that key, never "your key"', async () => {
  const created = await burrow(alice, ['keys', 'create', 'ci-runner', '--scopes', 'tunnels', '--json']);
  assert.is(created.code, 0, created.stderr);
  const { key, info } = JSON.parse(created.stdout) as { key: string; info: { key_prefix: string } };
  const older = start(alice, ['http', String(webPort), '--id', 'handover']);
  await firstLine(older);
  const newer = start({ ...alice, env: { ...alice.env, BURROW_TOKEN: key } }, ['http', String(webPort), '--id', 'handover']);
  assert.is(await firstLine(newer), `http://handover.localhost:${srv.port}`);
  assert.is(await exitOf(older, 10_000, 'older exit'), 5);
  const said = older.output.stderr;
  assert.ok(said.includes(`error: tunnel closed: taken over by another connection of the same user, with the key "ci-runner" (${info.key_prefix})`), said);
  assert.not.match(said, /your key/i);
  assert.match(newer.output.stderr, /took over the live tunnel "handover"/);
  newer.kill('SIGINT');
  assert.is(await exitOf(newer, 10_000, 'newer exit'), 0);
});

test.run();
