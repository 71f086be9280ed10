// --help on every command (examples included, walked from the command tree itself so a new
// command cannot skip them) and the shell completion scripts.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { buildProgram } from '../../src/cli/program.js';
import { burrow, tempDir, type CliEnv } from './harness.js';

let home: { dir: string; remove: () => void };
let c: CliEnv;

test.before(() => {
  home = tempDir();
  c = { configDir: home.dir };
});
test.after(() => home?.remove());

function allCommands(cmd: Command, path: string[] = []): { path: string[]; cmd: Command }[] {
  return cmd.commands.flatMap((s) => [{ path: [...path, s.name()], cmd: s }, ...allCommands(s, [...path, s.name()])]);
}

test('every command has a description and an Examples section in its --help', () => {
  const program = buildProgram();
  const cmds = allCommands(program);
  assert.ok(cmds.length >= 35, `only ${cmds.length} commands`);
  for (const { path, cmd } of cmds) {
    assert.ok(cmd.description(), `${path.join(' ')} has no description`);
    let text = '';
    cmd.configureOutput({ writeOut: (s) => (text += s), writeErr: (s) => (text += s) });
    cmd.outputHelp();
    // addHelpText('after') is emitted through the 'afterHelp' event on outputHelp().
    assert.match(text, 'Examples:', `${path.join(' ')} --help has no examples`);
    assert.match(text, /\$ burrow /, `${path.join(' ')} examples do not show a command`);
  }
});

test('every documented command exists', () => {
  const names = new Set(allCommands(buildProgram()).map((x) => x.path.join(' ')));
  for (const want of [
    'http', 'tcp', 'whoami', 'accounts', 'sessions', 'completion',
    'keys create', 'keys list', 'keys revoke',
    'teams list', 'teams create', 'teams delete', 'teams members', 'teams add-member', 'teams remove-member', 'teams set-role',
    'users list', 'users deactivate', 'users reactivate', 'users set-role',
    'tunnels list', 'tunnels get', 'tunnels delete',
    'context create', 'context use', 'context list', 'context current', 'context delete',
  ]) {
    assert.ok(names.has(want), `missing: burrow ${want}`);
  }
});

test('burrow --help (real binary): exit 0, global options, exit code table; --version', async () => {
  const r = await burrow(c, ['--help']);
  assert.is(r.code, 0);
  assert.match(r.stdout, /--server <url>/);
  assert.match(r.stdout, /--json/);
  assert.match(r.stdout, /Exit codes: 0 ok, 1 error, 2 usage, 3 auth \(401\/403\), 4 not found, 5 conflict, 6 server unreachable\./);
  const sub = await burrow(c, ['keys', 'create', '--help']);
  assert.is(sub.code, 0);
  assert.match(sub.stdout, /Global Options:[\s\S]*--token <key>/);
  assert.match(sub.stdout, /\$ burrow keys create ci --scopes tunnels --expires 30d/);
  const v = await burrow(c, ['--version']);
  assert.is(v.code, 0);
  assert.match(v.stdout, /^\d+\.\d+\.\d+\n$/);
});

test('burrow version and --version print the package.json version; --json gives {version, node}', async () => {
  const { version } = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  for (const args of [['version'], ['--version'], ['-V']]) {
    const r = await burrow(c, args);
    assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    assert.is(r.stdout, `${version}\n`);
  }
  for (const args of [['version', '--json'], ['--version', '--json'], ['--json', '--version']]) {
    const r = await burrow(c, args);
    assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    assert.equal(JSON.parse(r.stdout), { version, node: process.versions.node });
  }
});

test('completion bash: valid syntax, and completes subcommands and options', async () => {
  const r = await burrow(c, ['completion', 'bash']);
  assert.is(r.code, 0);
  const file = join(home.dir, 'burrow.bash');
  writeFileSync(file, r.stdout);
  // stdin from /dev/null and --norc: bash reads ~/.bashrc when its stdin is a socket (it takes
  // itself for an sshd session), and a user's rc file may block (a pyenv rehash lock did here).
  const quiet = { stdio: ['ignore', 'pipe', 'pipe'] as ['ignore', 'pipe', 'pipe'] };
  execFileSync('bash', ['--norc', '-n', file], quiet);
  const complete = (words: string[]) =>
    execFileSync('bash', ['--norc', '-c', `source '${file}'; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _burrow; echo "\${COMPREPLY[@]}"`], quiet)
      .toString()
      .trim()
      .split(/\s+/);
  assert.ok(complete(['burrow', 'te']).includes('teams'));
  assert.equal(complete(['burrow', 'teams', 'add']), ['add-member']);
  assert.ok(complete(['burrow', '--server', 'http://x', 'keys', 'create', '--sc']).includes('--scopes'));
});

test('completion zsh and fish print scripts; an unknown shell is a usage error', async () => {
  const z = await burrow(c, ['completion', 'zsh']);
  assert.is(z.code, 0);
  assert.match(z.stdout, /^#compdef burrow\n/);
  assert.match(z.stdout, /bashcompinit/);
  const f = await burrow(c, ['completion', 'fish']);
  assert.is(f.code, 0);
  assert.match(f.stdout, /complete -c burrow -n '__fish_use_subcommand' -a keys -d 'create, list and revoke your API keys'/);
  assert.match(f.stdout, /complete -c burrow -n '__fish_seen_subcommand_from keys; and not __fish_seen_subcommand_from create list revoke' -a create /);
  const bad = await burrow(c, ['completion', 'powershell']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, /^error: unknown shell: "powershell" \(supported: bash, zsh, fish\)/);
});

test.run();
