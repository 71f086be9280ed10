// burrow http / burrow tcp refusals against a real burrowd: exit codes for an id taken by another
// user, a reserved id, a bad key, a key without the tunnels scope, an unreachable server, and the
// client told to stop when its tunnel is deleted through the API. Takeovers: expose-takeover.test.ts.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, closedPort, exitOf, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let webPort: number;
let alice: CliEnv;
let bob: CliEnv;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, admin: alice } = suite);
  webPort = await suite.http((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'text/plain' });
      res.end(`hello ${req.url} ${body}`);
    });
  });
  ({ cli: bob } = await suite.member({ email: 'bob@example.test' }, ['tunnels']));
});

test.after(async () => {
  await suite?.stop();
});

const start = (c: CliEnv, args: string[]) => suite.burrows.start(c, args);
const firstLine = (child: ReturnType<typeof start>) => suite.burrows.firstLine(child);

test('an id live for another user is refused: exit 5 with a hint; reserved id: exit 2', async () => {
  const owner = start(alice, ['http', String(webPort), '--id', 'taken']);
  await firstLine(owner);
  const r = await burrow(bob, ['http', String(webPort), '--id', 'taken']);
  assert.is(r.code, 5);
  assert.is(r.stdout, '');
  assert.match(r.stderr, /^error: tunnel refused: .+\nhint: the id "taken" is taken: pick another --id/);
  const reserved = await burrow(bob, ['http', String(webPort), '--id', 'api']);
  assert.is(reserved.code, 2);
  assert.match(reserved.stderr, /^error: invalid --id: tunnel id "api" is reserved/); // checked before connecting
  owner.kill('SIGINT');
  await exitOf(owner, 10_000, 'owner exit');
});

test('bad key → exit 3; a key without the tunnels scope → exit 3; closed port → exit 6; bad target → exit 2', async () => {
  const bad = await burrow({ ...bob, env: { ...bob.env, BURROW_TOKEN: 'bk_AAAAAAAAAAAA_' + 'A'.repeat(43) } }, ['http', String(webPort)]);
  assert.is(bad.code, 3);
  assert.match(bad.stderr, /^error: tunnel refused: /);
  const { cli: mgmtOnly } = await suite.member({ email: 'mgmt@example.test' }, ['management']);
  const noScope = await burrow(mgmtOnly, ['http', String(webPort)]);
  assert.is(noScope.code, 3);
  assert.match(noScope.stderr, /hint: .*tunnels/);
  const dead = await burrow({ ...bob, env: { ...bob.env, BURROW_SERVER: `http://127.0.0.1:${await closedPort()}` } }, ['http', String(webPort)]);
  assert.is(dead.code, 6);
  assert.match(dead.stderr, /^error: server unreachable: /);
  const target = await burrow(bob, ['http', 'nonsense']);
  assert.is(target.code, 2);
  // A tunnels-only key cannot list teams: the name goes to the server, which looks among the
  // user's own teams (tunnels-names.test.ts has the one that exists).
  const teamName = await burrow(bob, ['http', String(webPort), '--team', 'web']);
  assert.is(teamName.code, 4);
  assert.match(teamName.stderr, /^error: tunnel refused: you are in no team named "web"\nhint: check --team with `burrow teams list`/m);
});

test('deleting the tunnel through the API ends the client with a non-zero exit and says why', async () => {
  const child = start(bob, ['http', String(webPort), '--id', 'doomed']);
  await firstLine(child);
  const del = await burrow(alice, ['tunnels', 'delete', 'doomed']);
  assert.is(del.code, 0, del.stderr);
  assert.match(del.stdout, /closed tunnel doomed/);
  assert.is(await exitOf(child, 10_000, 'deleted tunnel exit'), 1);
  assert.match(child.output.stderr, /^error: tunnel closed: .+\nhint: it was closed on the server/m);
});

test('--json: a tunnel deleted on the server ends the stream with a closed event (code deleted), the error one JSON object', async () => {
  const child = start(bob, ['http', String(webPort), '--id', 'doomed-json', '--json']);
  await firstLine(child);
  assert.is((await burrow(alice, ['tunnels', 'delete', 'doomed-json'])).code, 0);
  assert.is(await exitOf(child, 10_000, 'deleted tunnel exit'), 1);
  const last = JSON.parse(child.output.stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
  assert.is(last.event, 'closed');
  assert.is(last.code, 'deleted');
  assert.is(last.url, `http://doomed-json.localhost:${srv.port}`);
  const errors = child.output.stderr.split('\n').filter((l) => l.startsWith('{'));
  assert.is(errors.length, 1, child.output.stderr);
  const e = JSON.parse(errors[0]!) as Record<string, unknown>;
  assert.match(String(e.error), /^tunnel closed: /);
  assert.is(e.exit_code, 1);
});

test.run();
