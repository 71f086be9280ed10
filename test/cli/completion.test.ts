// Dynamic completion: context names, tunnel ids and team names through the hidden
// `burrow __complete` (also for a tunnels-only key), silent when the server is down; the bash
// script completes them at TAB time.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TestServer } from '../helpers/server.js';
import { burrow, CLI, cliEnv, CliSuite, closedPort, exitOf, RunningBurrows, teamWith, tempDir, type CliEnv } from './harness.js';

let suite: CliSuite;
let srv: TestServer;
let home: { dir: string; remove: () => void };
let webPort: number;
let alice: CliEnv;
let bob: CliEnv;
let burrows: RunningBurrows;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, home, admin: alice, burrows } = suite);
  webPort = await suite.http();
  const m = await suite.member({ email: 'bob@example.test', name: 'Bob Ross' }, ['tunnels']);
  bob = m.cli;
  await teamWith(alice, 'web', m.id);
});

test.after(async () => {
  await suite?.stop();
});

test('completion: context names, tunnel ids and team names (also for a tunnels-only key); silent when the server is down', async () => {
  const cfg: CliEnv = { configDir: tempDir().dir, env: { BURROW_TOKEN: srv.adminKey } };
  for (const name of ['prod', 'staging']) {
    const r = await burrow(cfg, ['context', 'create', name, '--server', srv.url, '--token', srv.adminKey]);
    assert.is(r.code, 0, r.stderr);
  }
  assert.equal((await burrow(cfg, ['__complete', 'contexts'])).stdout.split('\n').filter(Boolean), ['prod', 'staging']);
  const child = burrows.start(bob, ['http', String(webPort), '--team', 'web', '--id', 'completed']);
  await burrows.firstLine(child);
  assert.ok((await burrow(alice, ['__complete', 'tunnels'])).stdout.split('\n').includes('completed'));
  assert.ok((await burrow(alice, ['__complete', 'teams'])).stdout.split('\n').includes('web'));
  // bob's key cannot list teams: the names of the tunnels he sees.
  assert.equal((await burrow(bob, ['__complete', 'teams'])).stdout.split('\n').filter(Boolean), ['web']);
  const down = await burrow({ ...alice, env: { ...alice.env, BURROW_SERVER: `http://127.0.0.1:${await closedPort()}` } }, ['__complete', 'tunnels']);
  assert.is(down.code, 0);
  assert.is(down.stdout, '');
  assert.is(down.stderr, '');
  // Hidden: not in help, not offered as a command.
  assert.not.match((await burrow(alice, ['--help'])).stdout, /__complete/);

  // Through the bash script, with `burrow` a function running this CLI as alice.
  const script = (await burrow(alice, ['completion', 'bash'])).stdout;
  assert.not.match(script, /"__complete"\) words=|words=".*__complete/);
  const file = join(home.dir, 'burrow-dyn.bash');
  writeFileSync(file, script);
  const complete = (c: CliEnv, words: string[]) =>
    execFileSync(
      'bash',
      ['--norc', '-c', `burrow() { '${process.execPath}' '${CLI}' "$@"; }; source '${file}'; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _burrow; echo "\${COMPREPLY[@]}"`],
      { stdio: ['ignore', 'pipe', 'pipe'], env: cliEnv(c) },
    )
      .toString()
      .trim()
      .split(/\s+/)
      .filter(Boolean);
  assert.equal(complete(cfg, ['burrow', 'context', 'use', '']), ['prod', 'staging']);
  assert.equal(complete(cfg, ['burrow', 'context', 'use', 'st']), ['staging']);
  assert.equal(complete(alice, ['burrow', 'tunnels', 'get', 'compl']), ['completed']);
  assert.equal(complete(alice, ['burrow', 'http', '3000', '--team', 'w']), ['web']);
  // Options still complete after those commands.
  assert.ok(complete(alice, ['burrow', 'tunnels', 'get', '--js']).includes('--json'));
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'completed exit'), 0);
});

test.run();
