// burrow http|tcp access flags against a real burrowd: --basic-auth, --allow-ip, --deny-ip and
// --expires reach the edge (a visitor without the password gets 401, one with it is served),
// the rules are shown without the password, the tunnel ends at its expiry with exit 0 and a
// line saying so, and every malformed flag is a usage error (exit 2) that never prints a password.
import { request } from 'node:http';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { api, withDeadline } from '../helpers/fixtures.js';
import type { TestServer } from '../helpers/server.js';
import { burrow, CliSuite, exitOf, RunningBurrows, waitFor, type CliEnv } from './harness.js';
import { parseTunnelExpiry } from '../../src/cli/expose.js';
import { accessSummary } from '../../src/cli/expose-screen.js';

let suite: CliSuite;
let srv: TestServer;
let webPort: number;
let reached = 0;
let bob: CliEnv;
let burrows: RunningBurrows;

test.before(async () => {
  suite = await CliSuite.start();
  ({ srv, burrows } = suite);
  webPort = await suite.http((_req, res) => {
    reached++;
    res.end('hello');
  });
  ({ cli: bob } = await suite.member({ email: 'bob@example.test' }, ['tunnels']));
});

test.after(async () => {
  await suite?.stop();
});

function visit(id: string, headers: Record<string, string> = {}): Promise<number> {
  return withDeadline(
    new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: srv.port, path: '/', headers: { host: `${id}.localhost`, ...headers }, agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.on('error', reject);
      req.end();
    }),
    10_000,
    `visit ${id}`,
  );
}

test('burrow http with --basic-auth and --allow-ip: enforced, shown without the password', async () => {
  const child = burrows.start(bob, ['http', String(webPort), '--id', 'cli-access', '--basic-auth', 'alice:s3cret-pw', '--allow-ip', '127.0.0.1', '--allow-ip', '::1']);
  assert.is(await burrows.firstLine(child), `http://cli-access.localhost:${srv.port}`);
  await waitFor(() => (child.output.stderr.includes('access:') ? true : undefined), 10_000, 'access line');
  assert.match(child.output.stderr, /^access: basic auth \(alice\) · allow 127\.0\.0\.1 ::1$/m);
  const shown = await api(srv, 'GET', '/tunnels/cli-access', { key: srv.adminKey });
  assert.equal(shown.body.access, { basic_auth: true, allow_ip: ['127.0.0.1', '::1'], deny_ip: [], expires_at: null });
  const got = await burrow(bob, ['tunnels', 'get', 'cli-access']);
  assert.is(got.code, 0, got.stderr);
  assert.match(got.stdout, /^access\s+basic auth · allow 127\.0\.0\.1 ::1$/m);

  assert.is(await visit('cli-access'), 401);
  assert.is(await visit('cli-access', { authorization: `Basic ${Buffer.from('alice:wrong').toString('base64')}` }), 401);
  assert.is(reached, 0);
  assert.is(await visit('cli-access', { authorization: `Basic ${Buffer.from('alice:s3cret-pw').toString('base64')}` }), 200);
  assert.is(reached, 1);
  await waitFor(() => (child.output.stdout.split('\n').length > 2 ? true : undefined), 10_000, 'one request line');
  assert.match(child.output.stdout.split('\n')[1]!, /GET\s+\/\s+200 OK/);
  child.kill('SIGINT');
  assert.is(await exitOf(child, 10_000, 'exit on SIGINT'), 0);
  assert.not.match(child.output.stdout + child.output.stderr, /s3cret/);
});

test('burrow http --expires: the tunnel ends then; the client says so and exits 0', async () => {
  const child = burrows.start(bob, ['http', String(webPort), '--id', 'cli-expiry', '--expires', '3s']);
  assert.is(await burrows.firstLine(child), `http://cli-expiry.localhost:${srv.port}`);
  await waitFor(() => (child.output.stderr.includes('access:') ? true : undefined), 10_000, 'access line');
  assert.match(child.output.stderr, /^access: expires \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/m);
  assert.is(await exitOf(child, 60_000, 'exit at expiry'), 0);
  assert.match(child.output.stderr, /the tunnel expired at \S+ \(--expires\): closed/);
  assert.is((await api(srv, 'GET', '/tunnels/cli-expiry', { key: srv.adminKey })).status, 404);
});

test('--expires: a duration or a date-time, in the future, at most a year ahead', () => {
  const now = Date.parse('2026-06-01T12:00:00Z');
  assert.is(parseTunnelExpiry('30m', now), now + 30 * 60_000);
  assert.is(parseTunnelExpiry('2d', now), now + 2 * 86_400_000);
  assert.is(parseTunnelExpiry('2026-06-01T14:30:00+02:00', now), now + 30 * 60_000);
  assert.throws(() => parseTunnelExpiry('2026-06-01T11:00:00Z', now), /in the past/);
  assert.throws(() => parseTunnelExpiry('0s', now), /in the future/);
  assert.throws(() => parseTunnelExpiry('400d', now), /more than a year away/);
  assert.throws(() => parseTunnelExpiry('2y', now), /more than a year away/);
  assert.throws(() => parseTunnelExpiry('soon', now), /expected a duration/);
});

test('the status line of the rules names users, never passwords', () => {
  assert.is(accessSummary(undefined), null);
  assert.is(
    accessSummary({ basicAuth: ['alice:pw', 'bob:x:y'], allowIp: ['10.0.0.0/8', '::1'], denyIp: ['10.1.0.0/16'], expiresAt: Date.parse('2026-12-31T18:00:00Z') }),
    'basic auth (alice, bob) · allow 10.0.0.0/8 ::1 · deny 10.1.0.0/16 · expires 2026-12-31T18:00:00Z',
  );
});

test('malformed access flags are usage errors (exit 2) that never print the password', async () => {
  const cases: [string[], RegExp][] = [
    [['tcp', '22', '--basic-auth', 'alice:s3cret-pw'], /--basic-auth applies to http tunnels only/],
    [['http', '3000', '--basic-auth', 'alice-s3cret-pw'], /invalid --basic-auth: a credential must be USER:PASS/],
    [['http', '3000', '--basic-auth', ':s3cret-pw'], /invalid --basic-auth: the user of a credential/],
    [['http', '3000', '--basic-auth', 'alice:'], /invalid --basic-auth: the password for user "alice"/],
    [['http', '3000', '--allow-ip', '10.0.0.0/33'], /expected an IP address or CIDR .* got "10\.0\.0\.0\/33"/],
    [['tcp', '22', '--deny-ip', 'example.com'], /expected an IP address or CIDR/],
    [['http', '3000', '--expires', '0s'], /must be in the future/],
    [['http', '3000', '--expires', '2000-01-01T00:00:00Z'], /is in the past/],
    [['http', '3000', '--expires', '400d'], /more than a year away/],
    [['http', '3000', '--expires', 'tomorrow'], /expected a duration like 30d, 12h, 2w or a date-time/],
  ];
  for (const [args, message] of cases) {
    const r = await burrow(bob, args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
    assert.not.match(r.stderr + r.stdout, /s3cret/, args.join(' '));
  }
});

test('burrow http --pool with --basic-auth and --allow-ip joining a pool without them: refused (exit 5) with what differs, never the password', async () => {
  const first = burrows.start(bob, ['http', String(webPort), '--id', 'cli-pool-rules', '--pool', '--no-inspect']);
  assert.is(await burrows.firstLine(first), `http://cli-pool-rules.localhost:${srv.port}`);
  const before = reached;
  const r = await burrow(bob, ['http', String(webPort), '--id', 'cli-pool-rules', '--pool', '--no-inspect', '--basic-auth', 'alice:s3cret-pw', '--allow-ip', '127.0.0.1']);
  assert.is(r.code, 5, r.stderr);
  assert.is(r.stdout, '', 'no URL printed: this client serves nothing');
  assert.match(r.stderr, /^error: .*basic auth differs \(the pool has none\); allow-ip differs \(the pool's: none\)\nhint: a pool's members serve under one set of rules/m);
  assert.not.match(r.stderr, /s3cret/);
  assert.is(await visit('cli-pool-rules'), 200, 'the pool serves on under its own rules');
  assert.is(reached, before + 1);
});

test.run();
