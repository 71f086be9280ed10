// The first registration of a tunnel is its URL on stdout and nothing more; "now at URL" on
// stderr is for a later registration at another URL (a reconnect that lost the id). Before,
// every `burrow start` printed "web now at <the same URL>" right under "web <URL>".
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ExposeScreen, type ScreenInfo } from '../../src/cli/expose-screen.js';

/** Runs `f` with what the screen writes to stdout and stderr collected (it writes to the process's). */
function written(f: () => void): { stdout: string; stderr: string } {
  const seen = { stdout: '', stderr: '' };
  const out = process.stdout.write;
  const err = process.stderr.write;
  process.stdout.write = ((s: string) => ((seen.stdout += s), true)) as typeof process.stdout.write;
  process.stderr.write = ((s: string) => ((seen.stderr += s), true)) as typeof process.stderr.write;
  try {
    f();
  } finally {
    process.stdout.write = out;
    process.stderr.write = err;
  }
  return seen;
}

const info = (): ScreenInfo => ({
  tunnels: [
    { name: 'web', type: 'http', url: null, local: 'http://localhost:3000', failed: null },
    { name: 'db', type: 'tcp', url: null, local: 'tcp://localhost:5432', failed: null },
  ],
  account: null,
  state: 'connecting',
  stateDetail: null,
});

test('burrow start: "NAME URL" per tunnel on stdout, no "now at" the first time; a new URL later is noted', () => {
  const screen = new ExposeScreen(info(), { quiet: false, json: false, named: true });
  assert.ok(!screen.tty, 'the test needs stderr off a terminal');
  const first = written(() => {
    screen.registered('myapp', 'http://myapp.localhost:8080', true, 'web');
    screen.registered('db1', 'tcp://localhost:23579', true, 'db');
  });
  assert.is(first.stdout, 'web http://myapp.localhost:8080\ndb tcp://localhost:23579\n');
  assert.is(first.stderr, '');
  // A reconnect at the same URL says nothing; at another one it says where.
  const again = written(() => {
    screen.registered('myapp', 'http://myapp.localhost:8080', false, 'web');
    screen.registered('db2', 'tcp://localhost:23580', false, 'db');
  });
  assert.is(again.stdout, '');
  assert.is(again.stderr, 'db now at tcp://localhost:23580\n');
});

test('burrow http: the URL alone on stdout the first time', () => {
  const screen = new ExposeScreen({ ...info(), tunnels: [info().tunnels[0]!] }, { quiet: false, json: false, named: false });
  const first = written(() => screen.registered('myapp', 'http://myapp.localhost:8080', true));
  assert.is(first.stdout, 'http://myapp.localhost:8080\n');
  assert.is(first.stderr, '');
});

test.run();
