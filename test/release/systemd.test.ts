// contrib/burrowd.service: `systemd-analyze verify` accepts it without a warning (an unknown key
// or a bad value is only a warning there, so any output fails), and it keeps the properties an
// operator relies on. verify also checks that ExecStart is executable: the test points it at a
// stand-in, since burrowd is not installed at /usr/local/bin here. `burrowd service print` is
// the same unit with ExecStart naming this node and this burrowd, which verify accepts as is.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MAIN } from '../helpers/server.js';

const UNIT = readFileSync(fileURLToPath(new URL('../../../contrib/burrowd.service', import.meta.url)), 'utf8');
const hasAnalyze = spawnSync('systemd-analyze', ['--version'], { stdio: 'ignore' }).status === 0;

/** The unit's `Key=value` lines of a section, in order (comments and blank lines left out). */
function section(name: string): [string, string][] {
  const body = UNIT.split(/^\[/m).find((s) => s.startsWith(`${name}]`)) ?? '';
  return body.split('\n').slice(1).filter((l) => /^[A-Za-z]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]);
}
const service = new Map(section('Service'));

test('systemd-analyze verify accepts the unit without a warning', () => {
  if (!hasAnalyze) return void console.log('skipped: systemd-analyze is not installed (Debian: apt-get install systemd; .ci/run does)');
  const dir = mkdtempSync(join(tmpdir(), 'burrow-unit-'));
  try {
    const stub = join(dir, 'burrowd');
    writeFileSync(stub, '#!/bin/sh\n');
    chmodSync(stub, 0o755);
    assert.is(service.get('ExecStart'), '/usr/local/bin/burrowd');
    const unit = join(dir, 'burrowd.service');
    writeFileSync(unit, UNIT.replace('ExecStart=/usr/local/bin/burrowd', `ExecStart=${stub}`));
    const r = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8', timeout: 30_000 });
    assert.is(r.status, 0, r.stderr);
    // Lines about other units of the machine (a container's odd setup) are not ours to judge.
    assert.equal(r.stderr.split('\n').filter((l) => l.includes('burrowd')), [], r.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a non-root user that may bind :80 and :443, data in /var/lib/burrow, restarts on failure, reloads with SIGHUP', () => {
  assert.ok(service.get('User') && service.get('User') !== 'root', 'runs as a user of its own');
  assert.is(service.get('AmbientCapabilities'), 'CAP_NET_BIND_SERVICE');
  assert.is(service.get('CapabilityBoundingSet'), 'CAP_NET_BIND_SERVICE');
  assert.is(service.get('StateDirectory'), 'burrow');
  assert.is(service.get('Environment'), 'BURROW_DATA_DIR=/var/lib/burrow');
  assert.is(service.get('Restart'), 'on-failure');
  assert.is(service.get('ExecReload'), '/bin/kill -HUP $MAINPID');
  assert.not.ok(service.has('MemoryDenyWriteExecute'), "V8's JIT needs writable executable memory");
  assert.equal(section('Install'), [['WantedBy', 'multi-user.target']]);
});

test('the unit says how the first admin comes to exist', () => {
  assert.match(UNIT, /BURROW_SEED_API_KEY=1 in \/etc\/burrow\/burrowd\.env/);
  assert.match(UNIT, /BURROW_INITIAL_ADMIN_EMAIL/);
  assert.match(UNIT, /burrowd service print \| sudo tee \/etc\/systemd\/system\/burrowd\.service/);
});

test('burrowd service print: the same unit, ExecStart naming this node and burrowd; verify accepts it as is', () => {
  const r = spawnSync(process.execPath, [MAIN, 'service', 'print'], { encoding: 'utf8', timeout: 30_000 });
  assert.is(r.status, 0, r.stderr);
  const execStart = `${process.execPath} ${realpathSync(MAIN)}`;
  assert.is(r.stdout, UNIT.replace('ExecStart=/usr/local/bin/burrowd', `ExecStart=${execStart}`));
  if (!hasAnalyze) return void console.log('skipped: systemd-analyze is not installed');
  const dir = mkdtempSync(join(tmpdir(), 'burrow-unit-'));
  try {
    const unit = join(dir, 'burrowd.service');
    writeFileSync(unit, r.stdout);
    const v = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8', timeout: 30_000 });
    assert.is(v.status, 0, v.stderr);
    assert.equal(v.stderr.split('\n').filter((l) => l.includes('burrowd')), [], v.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const bad = spawnSync(process.execPath, [MAIN, 'service', 'nonsense'], { encoding: 'utf8', timeout: 30_000 });
  assert.is(bad.status, 2);
  assert.match(bad.stderr, /unknown command 'nonsense'/);
});

test.run();
