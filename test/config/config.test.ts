import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { buildServerCommand, configFromOptions, withPort } from '../../src/config.js';
import { MAIN } from '../helpers/server.js';

// Flags beat env; every flag has a BURROW_ env twin unless the spec names one; cross-flag
// rules fail with a message an operator can act on.

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

test('defaults are the documented ones', () => {
  const c = parse([]);
  assert.is(c.host, '0.0.0.0');
  assert.is(c.port, 8080);
  assert.is(c.domain, 'localhost');
  assert.is(c.baseUrl, 'http://localhost:8080');
  assert.is(c.databaseUrl, null);
  assert.is(c.dataDir, './burrow-data');
  assert.equal(c.tcpPortRange, { min: 20000, max: 29999 });
  assert.is(c.seedApiKey, false);
  assert.is(c.loginKeyTtlSecs, 90 * 86400);
  assert.is(c.authFailureLimit, 100);
  assert.is(c.logLevel, 'info');
  assert.ok(c.workers >= 1);
});

test('flags beat env; BURROW_* and the spec-named variables are read', () => {
  assert.is(parse([], { BURROW_PORT: '9001' }).port, 9001);
  assert.is(parse(['--port', '9002'], { BURROW_PORT: '9001' }).port, 9002);
  assert.is(parse([], { DATABASE_URL: 'postgres://x@h/db' }).databaseUrl, 'postgres://x@h/db');
  assert.is(parse([], { DATABASE_URL: '' }).databaseUrl, null, 'empty means embedded');
  assert.is(parse([], { BURROW_TCP_PORT_RANGE: 'off' }).tcpPortRange, null);
  assert.is(parse([], { BASE_URL: 'https://edge.example.com/' }).baseUrl, 'https://edge.example.com');
});

test('the base URL follows the real port unless given', () => {
  assert.is(withPort(parse(['--port', '0']), 41234).baseUrl, 'http://localhost:41234');
  assert.is(withPort(parse(['--port', '0', '--base-url', 'https://x.example']), 41234).baseUrl, 'https://x.example');
});

test('a provider without --base-url is refused with a clear message', () => {
  assert.throws(() => parse(['--github-client-id', 'a', '--github-client-secret', 'b']), /--base-url .* is required/);
  const ok = parse(['--github-client-id', 'a', '--github-client-secret', 'b', '--base-url', 'https://e.example']);
  assert.is(ok.github?.clientId, 'a');
  assert.throws(() => parse(['--github-client-id', 'a', '--base-url', 'https://e.example']), /--github-client-secret is required/);
  assert.throws(
    () => parse(['--oauth-provider-name', 'okta', '--oauth-client-id', 'c', '--base-url', 'https://e.example']),
    /--oauth-authorize-url is required/,
  );
});

test('bad values name the flag and the value', () => {
  assert.throws(() => parse(['--port', '70000']), /--port must be an integer in 0..65535, got "70000"/);
  assert.throws(() => parse(['--tcp-port-range', '300-200']), /MIN-MAX/);
  assert.throws(() => parse(['--login-key-ttl', 'soon']), /duration/);
});

test('burrowd exits 2 with usage on a bad flag and --help lists every flag', () => {
  const bad = spawnSync(process.execPath, [MAIN, '--port', 'x'], { encoding: 'utf8', timeout: 10_000 });
  assert.is(bad.status, 2, bad.stderr);
  assert.match(bad.stderr, /--port must be an integer/);
  assert.is(bad.stdout, '', 'nothing on stdout');
  const help = spawnSync(process.execPath, [MAIN, '--help'], { encoding: 'utf8', timeout: 10_000 });
  assert.is(help.status, 0);
  for (const flag of ['--host', '--port', '--domain', '--base-url', '--database-url', '--data-dir', '--workers', '--tcp-port-range', '--seed-api-key',
    '--initial-admin-email', '--github-client-id', '--github-client-secret', '--oauth-provider-name', '--oauth-client-id', '--oauth-client-secret',
    '--oauth-authorize-url', '--oauth-token-url', '--oauth-userinfo-url', '--oauth-scopes', '--oauth-id-field', '--oauth-email-field',
    '--oauth-name-field', '--oauth-avatar-field', '--log-level', '--login-key-ttl', '--auth-failure-limit', '--metrics-addr']) {
    assert.ok(help.stdout.includes(flag), `--help lists ${flag}`);
  }
});

test('the per-user limits and sign-up policy have their documented defaults', () => {
  const c = parse([]);
  assert.is(c.idGraceSecs, 24 * 3600);
  assert.is(c.maxTunnelsPerUser, 100);
  assert.is(c.maxRegistrationsPerMinute, 120);
  assert.is(c.sessionRetentionSecs, 90 * 86400);
  assert.equal(c.signup, { mode: 'open', githubAllowedOrgs: [], allowedEmailDomains: [], linkAdmins: false });
  assert.is(parse(['--session-retention', 'off']).sessionRetentionSecs, null);
  assert.equal(parse([], { BURROW_GITHUB_ALLOWED_ORGS: 'Acme, widgets' }).signup.githubAllowedOrgs, ['acme', 'widgets']);
  assert.equal(parse(['--oauth-allowed-email-domains', 'Example.com']).signup.allowedEmailDomains, ['example.com']);
  assert.is(parse(['--signup', 'closed']).signup.mode, 'closed');
  assert.is(parse(['--oauth-link-admins']).signup.linkAdmins, true);
  assert.is(parse([], { BURROW_OAUTH_LINK_ADMINS: '1' }).signup.linkAdmins, true);
});

test('a --base-url whose host is a tunnel host (<label>.<domain>) is refused', () => {
  assert.throws(() => parse(['--domain', 'example.com', '--base-url', 'https://api.example.com']), /--base-url host "api.example.com" is a tunnel host/);
  assert.throws(() => parse(['--domain', 'example.com', '--base-url', 'https://Login.Example.com:8443']), /is a tunnel host/);
  // the domain itself, a name outside it, or deeper than one label are fine
  assert.is(parse(['--domain', 'example.com', '--base-url', 'https://example.com']).baseUrl, 'https://example.com');
  assert.is(parse(['--domain', 't.example.com', '--base-url', 'https://example.com']).baseUrl, 'https://example.com');
  assert.is(parse(['--domain', 'example.com', '--base-url', 'https://a.b.example.com']).baseUrl, 'https://a.b.example.com');
});

test('a port browsers refuse (the fetch standard\'s bad ports) stops the start: exit 2, and says why', () => {
  for (const args of [['--port', '6000'], ['--port', '6667'], ['--port', '10080'], ['--port', '8443', '--http-port', '6000', '--tls-cert', 'c.pem', '--tls-key', 'k.pem']]) {
    const r = spawnSync(process.execPath, [MAIN, ...args], { encoding: 'utf8', timeout: 10_000 });
    assert.is(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /port browsers and fetch clients refuse/);
    assert.is(r.stdout, '', 'nothing on stdout');
  }
  const env = spawnSync(process.execPath, [MAIN], { encoding: 'utf8', timeout: 10_000, env: { ...process.env, BURROW_PORT: '6000' } });
  assert.is(env.status, 2, env.stderr);
  assert.match(env.stderr, /--port 6000 is a port browsers/);
  // Neighbours and the usual ports are fine.
  for (const port of [8080, 6001, 6664, 443, 80]) assert.is(parse(['--port', String(port)]).port, port);
});

test('integer flags take decimal digits only: 1e3, 0x10, 1.0, +5 and blanks are usage errors (exit 2)', () => {
  for (const v of ['1e3', '0x10', '0b11', '0o7', '1.0', '+5', '-0', ' 12', '12 ', '', '1_000']) {
    assert.throws(() => parse(['--visitor-concurrency', v]), /--visitor-concurrency must be an integer in 1\.\.1000000, got "/, `"${v}"`);
    assert.throws(() => parse([], { BURROW_MAX_TUNNELS_PER_USER: v }), /--max-tunnels-per-user must be an integer/, `env "${v}"`);
  }
  assert.is(parse(['--visitor-concurrency', '1000']).visitorConcurrency, 1000);
  assert.is(parse(['--port', '0']).port, 0);
  for (const [flag, v] of [['--port', '0x1f90'], ['--auth-failure-limit', '1e3']]) {
    const r = spawnSync(process.execPath, [MAIN, flag!, v!], { encoding: 'utf8', timeout: 10_000 });
    assert.is(r.status, 2, `${flag} ${v}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`${flag} must be an integer in .*, got "${v}"`));
  }
});

test('a given but empty allow-list is a usage error (exit 2), never "no restriction"', () => {
  const lists = [
    ['--github-allowed-orgs', 'BURROW_GITHUB_ALLOWED_ORGS'],
    ['--oauth-allowed-email-domains', 'BURROW_OAUTH_ALLOWED_EMAIL_DOMAINS'],
    ['--proxy-protocol-from', 'BURROW_PROXY_PROTOCOL_FROM'],
  ] as const;
  for (const [flag, env] of lists) {
    const extra = flag === '--proxy-protocol-from' ? ['--proxy-protocol'] : [];
    for (const v of ['', ',', ' , ,']) {
      assert.throws(() => parse([...extra, flag, v]), new RegExp(`${flag} was given but names nothing`), `${flag} "${v}"`);
      assert.throws(() => parse(extra, { [env]: v }), new RegExp(`${flag} was given but names nothing`), `${env}="${v}"`);
    }
    const r = spawnSync(process.execPath, [MAIN, ...extra], { encoding: 'utf8', timeout: 10_000, env: { ...process.env, [env]: '' } });
    assert.is(r.status, 2, `${env}="": ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`${flag} was given but names nothing.*leave ${flag} and its environment variable unset`));
    assert.is(r.stdout, '');
  }
  // Left out, they restrict nothing; given, they restrict.
  assert.equal(parse([]).signup.githubAllowedOrgs, []);
  assert.equal(parse(['--github-allowed-orgs', 'acme,']).signup.githubAllowedOrgs, ['acme']);
  assert.equal(parse(['--proxy-protocol', '--proxy-protocol-from', '10.0.0.1']).proxyProtocolFrom.length, 1);
  // An empty --trust-proxy trusts nobody (the default): it fails closed, so it stays allowed.
  assert.equal(parse(['--trust-proxy', '']).trustProxy, []);
});

test('--session-retention shorter than --id-grace is refused (exit 2), naming both', () => {
  assert.throws(() => parse(['--session-retention', '1h']), /--session-retention \(3600 s\) is shorter than --id-grace \(86400 s\)/);
  assert.throws(() => parse(['--session-retention', '10m', '--id-grace', '1h']), /--session-retention .* --id-grace/);
  assert.is(parse(['--session-retention', '1h', '--id-grace', '1h']).sessionRetentionSecs, 3600);
  assert.is(parse(['--session-retention', '1h', '--id-grace', '0']).sessionRetentionSecs, 3600);
  assert.is(parse(['--session-retention', 'off', '--id-grace', '30d']).sessionRetentionSecs, null);
  const r = spawnSync(process.execPath, [MAIN, '--id-grace', '2d'], { encoding: 'utf8', timeout: 10_000, env: { ...process.env, BURROW_SESSION_RETENTION: '1d' } });
  assert.is(r.status, 2, r.stderr);
  assert.match(r.stderr, /--session-retention \(86400 s\) is shorter than --id-grace \(172800 s\)/);
});

test('--trust-proxy 0.0.0.0/0 or ::/0 starts with a warning on stderr that any address may forge the client address', () => {
  // An unreachable database stops the start right after the warning: no server needed.
  const start = (trust: string) =>
    spawnSync(process.execPath, [MAIN, '--port', '0', '--host', '127.0.0.1', '--trust-proxy', trust, '--database-url', 'postgres://nobody@127.0.0.1:1/none', '--log-level', 'warn'], {
      encoding: 'utf8',
      timeout: 20_000,
    });
  for (const trust of ['0.0.0.0/0', '::/0', '10.0.0.1,1.0.0.0/1', '2000::/3', '::ffff:0:0/96']) {
    const r = start(trust);
    const warning = r.stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { level: number; msg: string; trustProxy?: string[] }).find((l) => /--trust-proxy/.test(l.msg));
    assert.ok(warning, `${trust}: a warning; stderr: ${r.stderr.slice(0, 1000)}`);
    assert.is(warning!.level, 40, 'pino warn');
    assert.match(warning!.msg, /may forge the client address/);
    assert.ok(warning!.trustProxy!.length >= 1);
  }
  for (const trust of ['10.0.0.0/8', 'fc00::/7', '192.168.0.0/16,127.0.0.1']) {
    assert.not.match(start(trust).stderr, /--trust-proxy covers/, trust);
  }
});

test('burrowd --version prints the package version', () => {
  const r = spawnSync(process.execPath, [MAIN, '--version'], { encoding: 'utf8', timeout: 10_000 });
  assert.is(r.status, 0, r.stderr);
  const { version } = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  assert.is(r.stdout, `${version}\n`);
});

test('the public port\'s bounds: defaults, env twins, and values out of range refused', () => {
  const c = parse([]);
  assert.equal(c.front, { firstByteTimeoutMs: 5_000, sendTimeoutMs: 60_000, maxConnectionsPerIp: 512, publicFdLimit: null, visitorBufferBudgetBytes: 32 * 1024 * 1024 });
  const set = parse(['--first-byte-timeout', '2s', '--send-timeout', '1m', '--max-connections-per-ip', '20', '--public-fd-limit', '1000'], { BURROW_VISITOR_BUFFER_BUDGET: '8' });
  assert.equal(set.front, { firstByteTimeoutMs: 2_000, sendTimeoutMs: 60_000, maxConnectionsPerIp: 20, publicFdLimit: 1000, visitorBufferBudgetBytes: 8 * 1024 * 1024 });
  assert.throws(() => parse(['--send-timeout', '0']), /--send-timeout must be between 1s and 3600s, got "0"/);
  assert.throws(() => parse(['--first-byte-timeout', '10m']), /--first-byte-timeout must be between 1s and 300s/);
  assert.throws(() => parse(['--public-fd-limit', '10']), /--public-fd-limit must be an integer in 64\.\./);
  assert.throws(() => parse(['--max-connections-per-ip', '0']), /--max-connections-per-ip must be an integer/);
});

test.run();
