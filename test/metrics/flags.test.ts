import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { buildServerCommand, configFromOptions } from '../../src/config.js';
import { MAIN } from '../helpers/server.js';

// --metrics-addr HOST:PORT: parsed with IPv6 in brackets, read from BURROW_METRICS_ADDR, off by
// default; a bad value or a taken address stops the start with a message naming the flag.

function parse(argv: string[], env: Record<string, string> = {}) {
  const saved = { ...process.env };
  Object.assign(process.env, env);
  try {
    const cmd = buildServerCommand().exitOverride();
    cmd.parse(argv, { from: 'user' });
    return configFromOptions(cmd.opts());
  } finally {
    for (const k of Object.keys(env)) delete process.env[k];
    Object.assign(process.env, saved);
  }
}

test('--metrics-addr: off by default, HOST:PORT or [IPv6]:PORT, flag or BURROW_METRICS_ADDR', () => {
  assert.is(parse([]).metricsAddr, null);
  assert.equal(parse(['--metrics-addr', '127.0.0.1:9100']).metricsAddr, { host: '127.0.0.1', port: 9100 });
  assert.equal(parse(['--metrics-addr', '[::1]:9100']).metricsAddr, { host: '::1', port: 9100 });
  assert.equal(parse(['--metrics-addr', 'metrics.internal:0']).metricsAddr, { host: 'metrics.internal', port: 0 });
  assert.equal(parse([], { BURROW_METRICS_ADDR: '10.0.0.5:9100' }).metricsAddr, { host: '10.0.0.5', port: 9100 });
  assert.is(parse([], { BURROW_METRICS_ADDR: '' }).metricsAddr, null, 'empty means off');
  for (const bad of ['9100', '127.0.0.1', '127.0.0.1:70000', '::1:9100', 'host:port', ':9100']) {
    assert.throws(() => parse(['--metrics-addr', bad]), /expected HOST:PORT/, bad);
  }
});

test('a bad --metrics-addr is a usage error (exit 2); a taken one stops the start (exit 1) before the database', async () => {
  const bad = spawnSync(process.execPath, [MAIN, '--metrics-addr', 'nowhere'], { encoding: 'utf8', timeout: 10_000 });
  assert.is(bad.status, 2, bad.stderr);
  assert.match(bad.stderr, /--metrics-addr/);
  const taken = net.createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', () => r()));
  const port = (taken.address() as net.AddressInfo).port;
  try {
    const r = spawnSync(process.execPath, [MAIN, '--port', '0', '--host', '127.0.0.1', '--database-url', 'postgres://nobody@127.0.0.1:1/none', '--metrics-addr', `127.0.0.1:${port}`], { encoding: 'utf8', timeout: 20_000 });
    assert.is(r.status, 1, r.stderr);
    assert.match(r.stderr, `burrowd: cannot listen on --metrics-addr 127.0.0.1:${port}: the address is already in use`);
    assert.is(r.stdout, '');
  } finally {
    taken.close();
  }
});

test.run();
