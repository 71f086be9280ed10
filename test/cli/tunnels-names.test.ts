// Tunnels as people read them: `tunnels list|get` show the public URL, the local target and the
// owner's and team's names; a tunnels-only key binds a tunnel to a team by name (burrowd looks it
// up among the user's own teams). Completion is in completion.test.ts (its many CLI runs take
// most of a file's time limit on a loaded machine).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, exitOf, RunningBurrows, teamWith, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let webPort: number;
let alice: CliEnv;
let bob: CliEnv;
let bobId: string;
let burrows: RunningBurrows;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, admin: alice, burrows } = suite);
  webPort = await suite.http();
  ({ id: bobId, cli: bob } = await suite.member({ email: 'bob@example.test', name: 'Bob Ross' }, ['tunnels']));
  await teamWith(alice, 'web', bobId);
});

test.after(async () => {
  await suite?.stop();
});

test('a tunnels-only key binds a tunnel to a team by name; listings show URL, local target, owner and team names', async () => {
  const child = burrows.start(bob, ['http', String(webPort), '--team', 'web', '--id', 'named']);
  assert.is(await burrows.firstLine(child), `http://named.localhost:${srv.port}`);
  const l = await burrow(bob, ['tunnels', 'list']);
  assert.is(l.code, 0, l.stderr);
  assert.match(l.stdout, new RegExp(`^named\\s+http://named\\.localhost:${srv.port}\\s+http://localhost:${webPort}\\s+Bob Ross <bob@example\\.test>\\s+web\\s`, 'm'));
  const g = await burrow(bob, ['tunnels', 'get', 'named']);
  assert.is(g.code, 0, g.stderr);
  assert.match(g.stdout, new RegExp(`^owner\\s+Bob Ross <bob@example\\.test> \\(${bobId}\\)$`, 'm'));
  assert.match(g.stdout, /^team\s+web \([0-9a-f-]{36}\)$/m);
  const j = JSON.parse((await burrow(alice, ['tunnels', 'get', 'named', '--json'])).stdout);
  assert.is(j.url, `http://named.localhost:${srv.port}`);
  assert.is(j.local_target, `http://localhost:${webPort}`);
  assert.is(j.owner_name, 'Bob Ross');
  assert.is(j.owner_email, 'bob@example.test');
  assert.is(j.team_name, 'web');
  assert.match(j.team_id, /^[0-9a-f-]{36}$/);

  // A team the user is not in is not found (and says nothing about whether it exists).
  const { cli: carol } = await suite.member({ email: 'carol@example.test' }, ['tunnels']);
  const other = await burrow(carol, ['http', String(webPort), '--team', 'web']);
  assert.is(other.code, 4);
  assert.match(other.stderr, /^error: tunnel refused: you are in no team named "web"/m);
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'named exit'), 0);
});

test.run();
