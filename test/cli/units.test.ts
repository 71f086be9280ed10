// Pure pieces of the CLI: config precedence and file mode, parsing of flags, output formatting,
// and the expose screen's numbers. Server-backed behaviour is in the other suites.
import { statSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { configPath, loadConfig, resolveTarget, saveConfig, setContextToken, DEFAULT_SERVER } from '../../src/cli/config.js';
import { CliError, EXIT } from '../../src/cli/errors.js';
import { ExposeStats } from '../../src/cli/expose-stats.js';
import { connectionLine, renderBlock, requestLine, summaryLine } from '../../src/cli/expose-screen.js';
import { exitCodeForRefusal, parseLocal } from '../../src/cli/expose.js';
import { keyStatus, parseExpires, parseScopes } from '../../src/cli/keys.js';
import { formatAge, formatBytes, formatDuration, formatMs, painter, table, tokenPrefix, visibleLength } from '../../src/cli/output.js';
import { tempDir } from './harness.js';
import { positiveInt } from '../../src/cli/common.js';

const KEY_A = 'bk_AAAAAAAAAAAA_' + 'a'.repeat(43);
const KEY_B = 'bk_BBBBBBBBBBBB_' + 'b'.repeat(43);
const dirs: (() => void)[] = [];

function freshConfigHome(): string {
  const t = tempDir();
  dirs.push(t.remove);
  process.env.XDG_CONFIG_HOME = t.dir;
  delete process.env.BURROW_SERVER;
  delete process.env.BURROW_TOKEN;
  return t.dir;
}

test.after(() => dirs.forEach((r) => r()));

test('integer options take decimal digits only (1e3, 0x10, 1.0 are refused)', () => {
  const limit = positiveInt('--limit', 1000);
  for (const v of ['1e3', '0x10', '0b1', '1.0', '+5', ' 12', '', '0']) assert.throws(() => limit(v), /--limit must be an integer in 1\.\.1000, got "/, `"${v}"`);
  assert.is(limit('16'), 16);
  assert.is(limit('1000'), 1000);
});

test('configPath follows XDG_CONFIG_HOME', () => {
  const home = freshConfigHome();
  assert.is(configPath(), join(home, 'burrow', 'config.json'));
});

test('saveConfig writes mode 0600 in a 0700 directory, atomically (no temp files left)', () => {
  const home = freshConfigHome();
  saveConfig({ currentContext: 'a', contexts: { a: { server: 'http://a:1', token: KEY_A } } });
  assert.is(statSync(configPath()).mode & 0o777, 0o600);
  assert.is(statSync(join(home, 'burrow')).mode & 0o777, 0o700);
  saveConfig({ currentContext: 'a', contexts: { a: { server: 'http://a:2', token: KEY_A } } });
  assert.is(loadConfig().contexts.a!.server, 'http://a:2');
  assert.equal(
    (readFileSync(configPath(), 'utf8').match(/"server"/g) ?? []).length,
    1,
  );
});

test('resolveTarget: flag > env > context file; default server without any', () => {
  freshConfigHome();
  assert.equal(resolveTarget({}), { server: DEFAULT_SERVER, token: null, contextName: null, ca: null });
  saveConfig({ currentContext: 'a', contexts: { a: { server: 'http://a:1', token: KEY_A }, b: { server: 'http://b:1', token: KEY_B } } });
  assert.equal(resolveTarget({}), { server: 'http://a:1', token: KEY_A, contextName: 'a', ca: null });
  assert.equal(resolveTarget({ context: 'b' }), { server: 'http://b:1', token: KEY_B, contextName: 'b', ca: null });
  process.env.BURROW_TOKEN = 'env-token';
  process.env.BURROW_SERVER = 'http://env:1';
  assert.equal(resolveTarget({}), { server: 'http://env:1', token: 'env-token', contextName: 'a', ca: null });
  assert.equal(resolveTarget({ server: 'http://flag:1', token: 'flag-token' }), { server: 'http://flag:1', token: 'flag-token', contextName: 'a', ca: null });
  delete process.env.BURROW_SERVER;
  delete process.env.BURROW_TOKEN;
});

test('resolveTarget: --ca > BURROW_CA > the context\'s CA, and a context\'s CA only for its own server', () => {
  freshConfigHome();
  saveConfig({ currentContext: 'a', contexts: { a: { server: 'https://a:1', token: KEY_A, ca: '/ctx/ca.pem' } } });
  assert.is(resolveTarget({}).ca, '/ctx/ca.pem');
  assert.is(resolveTarget({ server: 'https://elsewhere:1' }).ca, null);
  process.env.BURROW_CA = '/env/ca.pem';
  assert.is(resolveTarget({}).ca, '/env/ca.pem');
  assert.is(resolveTarget({ ca: '/flag/ca.pem' }).ca, '/flag/ca.pem');
  delete process.env.BURROW_CA;
});

test("resolveTarget never sends a context's key to another server", () => {
  freshConfigHome();
  saveConfig({ currentContext: 'a', contexts: { a: { server: 'http://a:1', token: KEY_A } } });
  assert.is(resolveTarget({ server: 'http://elsewhere:1' }).token, null);
  assert.is(resolveTarget({ server: 'http://a:1/' }).token, KEY_A); // same server, trailing slash
});

test('resolveTarget: an unknown --context is a usage error', () => {
  freshConfigHome();
  try {
    resolveTarget({ context: 'nope' });
    assert.unreachable();
  } catch (e) {
    assert.instance(e, CliError);
    assert.is((e as CliError).exitCode, EXIT.usage);
  }
});

test('setContextToken: creates "default" and makes it current; later updates the same context', () => {
  freshConfigHome();
  setContextToken(null, 'http://s:1', KEY_A);
  assert.equal(loadConfig(), { currentContext: 'default', contexts: { default: { server: 'http://s:1', token: KEY_A } } });
  setContextToken(null, 'http://s:1', KEY_B);
  assert.is(loadConfig().contexts.default!.token, KEY_B);
  setContextToken(null, 'http://other:2', KEY_A); // another server: its own context, now current
  const cfg = loadConfig();
  assert.is(cfg.contexts.default!.server, 'http://s:1');
  assert.is(cfg.currentContext, 'other-2');
  assert.equal(cfg.contexts['other-2'], { server: 'http://other:2', token: KEY_A });
  setContextToken('default', 'http://s:1', null); // logout of a named context
  assert.is(loadConfig().contexts.default!.token, null);
  assert.is(statSync(configPath()).mode & 0o777, 0o600);
});

test('loadConfig tolerates a hand-edited file and rejects broken JSON with a hint', () => {
  const home = freshConfigHome();
  mkdirSync(join(home, 'burrow'), { recursive: true });
  writeFileSync(configPath(), JSON.stringify({ currentContext: 'gone', contexts: { a: { server: 'http://a:1' }, bad: 3 } }));
  assert.equal(loadConfig(), { currentContext: null, contexts: { a: { server: 'http://a:1', token: null } } });
  writeFileSync(configPath(), '{oops');
  try {
    loadConfig();
    assert.unreachable();
  } catch (e) {
    assert.match((e as CliError).hint ?? '', 'config.json');
  }
});

test('parseScopes and parseExpires', () => {
  assert.equal(parseScopes('tunnels'), ['tunnels']);
  assert.equal(parseScopes('tunnels, management,tunnels'), ['tunnels', 'management']);
  assert.throws(() => parseScopes('admin'), /unknown scope/);
  const now = Date.parse('2026-01-01T00:00:00Z');
  assert.is(parseExpires('30d', now), '2026-01-31T00:00:00.000Z');
  assert.is(parseExpires('12h', now), '2026-01-01T12:00:00.000Z');
  assert.is(parseExpires('2027-02-03T04:05:06Z', now), '2027-02-03T04:05:06.000Z');
  assert.throws(() => parseExpires('2020-01-01T00:00:00Z', now), /past/);
  assert.throws(() => parseExpires('soon', now), /duration/);
  assert.throws(() => parseExpires('0d', now), /future/);
});

test('keyStatus', () => {
  const base = { id: 'x', name: 'n', key_prefix: 'bk_', scopes: [], created_at: '2026-01-01T00:00:00Z' } as const;
  const now = Date.parse('2026-06-01T00:00:00Z');
  assert.is(keyStatus({ ...base, scopes: [], expires_at: null, revoked_at: null }, now), 'active');
  assert.is(keyStatus({ ...base, scopes: [], expires_at: '2026-05-01T00:00:00Z', revoked_at: null }, now), 'expired');
  assert.is(keyStatus({ ...base, scopes: [], expires_at: null, revoked_at: '2026-05-01T00:00:00Z' }, now), 'revoked');
});

test('parseLocal: port, host:port, [v6]:port, URL; bad input throws', () => {
  assert.equal(parseLocal('3000'), { host: 'localhost', port: 3000 });
  assert.equal(parseLocal('192.168.1.5:8080'), { host: '192.168.1.5', port: 8080 });
  assert.equal(parseLocal('[::1]:80'), { host: '::1', port: 80 });
  assert.equal(parseLocal('http://localhost:3000/'), { host: 'localhost', port: 3000 });
  for (const bad of ['0', '70000', 'host', 'host:', ':80', 'a b:1']) assert.throws(() => parseLocal(bad), /expected a port/);
  assert.equal(parseLocal('https://localhost:8443'), { host: 'localhost', port: 8443, tls: true });
  assert.equal(parseLocal('https://dev.internal'), { host: 'dev.internal', port: 443, tls: true });
  assert.equal(parseLocal('http://[::1]'), { host: '::1', port: 80 });
  assert.throws(() => parseLocal('ftp://localhost:21'), /expected an http:\/\/, https:\/\/, h2c:\/\/ or h2:\/\/ address/);
  // HTTP/2 local services (gRPC): h2c in clear, h2 over TLS.
  assert.equal(parseLocal('h2c://127.0.0.1:50051'), { host: '127.0.0.1', port: 50051, h2: true });
  assert.equal(parseLocal('h2://grpc.internal'), { host: 'grpc.internal', port: 443, tls: true, h2: true });
});

test('validateTunnel: response_timeout is a duration of an http tunnel', async () => {
  const { validateTunnel } = await import('../../src/cli/tunnel-spec.js');
  assert.is(validateTunnel('http', { proto: 'http', addr: 'h2c://localhost:50051', response_timeout: '5m' }).spec!.responseTimeoutMs, 300_000);
  assert.match(validateTunnel('http', { proto: 'http', addr: 3000, response_timeout: '0s' }).errors[0]!.message, /from 1s to 24h/);
  assert.match(validateTunnel('http', { proto: 'http', addr: 3000, response_timeout: 5 }).errors[0]!.message, /from 1s to 24h/);
  assert.match(validateTunnel('tcp', { proto: 'tcp', addr: 22, response_timeout: '5m' }).errors[0]!.message, /only http tunnels/);
  assert.match(validateTunnel('tcp', { proto: 'tcp', addr: 'h2c://localhost:1' }).errors[0]!.message, /h2c:\/\/ is for http tunnels/);
});

test('local targets: localhost is both loopback addresses; Host rewritten as asked', async () => {
  const { localLookup, withHostHeader } = await import('../../src/client/local-target.js');
  const all = await new Promise<unknown>((r) => localLookup('localhost', { all: true }, (_e, a) => r(a)));
  assert.equal(all, [{ address: '127.0.0.1', family: 4 }, { address: '::1', family: 6 }]);
  const v6 = await new Promise<unknown>((r) => localLookup('LOCALHOST', { all: true, family: 6 }, (_e, a) => r(a)));
  assert.equal(v6, [{ address: '::1', family: 6 }]);
  const local = { host: 'localhost', port: 5173 };
  const headers = ['Host', 'myapp.tunnels.example.com', 'Accept', '*/*'];
  assert.equal(withHostHeader(headers, local), headers);
  assert.equal(withHostHeader(headers, { ...local, hostHeader: 'rewrite' }), ['Host', 'localhost:5173', 'Accept', '*/*']);
  assert.equal(withHostHeader(headers, { ...local, hostHeader: 'app.test' }), ['Host', 'app.test', 'Accept', '*/*']);
  assert.equal(withHostHeader(['Accept', '*/*'], { host: '::1', port: 80, hostHeader: 'rewrite' }), ['Host', '[::1]:80', 'Accept', '*/*']);
});

test('exitCodeForRefusal maps refusal codes onto the exit code table', () => {
  assert.is(exitCodeForRefusal('unauthorized'), EXIT.auth);
  assert.is(exitCodeForRefusal('forbidden'), EXIT.auth);
  assert.is(exitCodeForRefusal('conflict'), EXIT.conflict);
  assert.is(exitCodeForRefusal('not-found'), EXIT.notFound);
  assert.is(exitCodeForRefusal('bad-request'), EXIT.usage);
  assert.is(exitCodeForRefusal('deleted'), EXIT.error);
});

test('formatBytes / formatDuration / formatMs / formatAge / tokenPrefix', () => {
  assert.is(formatBytes(0), '0 B');
  assert.is(formatBytes(1023), '1023 B');
  assert.is(formatBytes(1536), '1.50 KiB');
  assert.is(formatBytes(10 * 1024 * 1024), '10.0 MiB');
  assert.is(formatBytes(300 * 1024 ** 3), '300 GiB');
  assert.is(formatBytes(null), '-');
  assert.is(formatDuration(5), '5s');
  assert.is(formatDuration(192), '3m 12s');
  assert.is(formatDuration(7500), '2h 5m');
  assert.is(formatDuration(4 * 86400 + 3 * 3600), '4d 3h');
  assert.is(formatMs(12.4), '12ms');
  assert.is(formatMs(1250), '1.25s');
  const now = Date.parse('2026-01-10T00:00:00Z');
  assert.is(formatAge('2026-01-09T23:57:00Z', now), '3m ago');
  assert.is(formatAge('2026-02-09T00:00:00Z', now), 'in 30d');
  assert.is(tokenPrefix(KEY_A), 'bk_AAAAAAAAAAAA…');
  assert.not.match(tokenPrefix('some-other-secret-token'), 'secret');
});

test('table aligns columns on visible width and keeps colour codes out of the width', () => {
  const plain = painter({ isTTY: false } as NodeJS.WriteStream);
  const rows = [
    { a: 'x', b: 'long value' },
    { a: 'longer', b: 'y' },
  ];
  const text = table(rows, [{ header: 'A', value: (r) => r.a }, { header: 'B', value: (r) => r.b }], plain);
  assert.is(text, 'A        B\nx        long value\nlonger   y');
  assert.is(visibleLength('\x1b[32mok\x1b[39m'), 2);
});

test('NO_COLOR disables colour even when forced by a TTY', () => {
  process.env.NO_COLOR = '1';
  const p = painter({ isTTY: true } as NodeJS.WriteStream);
  assert.is(p.enabled, false);
  assert.is(p('red', 'x'), 'x');
  delete process.env.NO_COLOR;
  const saved = process.env.FORCE_COLOR;
  delete process.env.FORCE_COLOR;
  const q = painter({ isTTY: true } as NodeJS.WriteStream);
  if (process.env.TERM !== 'dumb') assert.is(q('red', 'x'), '\x1b[31mx\x1b[39m');
  if (saved !== undefined) process.env.FORCE_COLOR = saved;
});

test('ExposeStats: nearest-rank p50/p90 and counters', () => {
  const s = new ExposeStats(0);
  assert.is(s.percentile(50), null);
  for (let ms = 1; ms <= 10; ms++) s.addRequest({ method: 'GET', path: '/', status: 200, durationMs: ms, bytesIn: 1, bytesOut: 10 });
  assert.is(s.percentile(50), 5);
  assert.is(s.percentile(90), 9);
  assert.is(s.requests, 10);
  assert.is(s.bytesOut, 100);
  const plain = painter({ isTTY: false } as NodeJS.WriteStream);
  const block = renderBlock({ tunnels: [{ name: 'http', type: 'http', url: 'http://abc.localhost:8080', local: 'http://localhost:3000', failed: null }], account: 'a@b.c (admin)', state: 'online', stateDetail: null }, s, plain, 65_000).join('\n');
  assert.match(block, /Session Status\s+online/);
  assert.match(block, /Forwarding\s+http:\/\/abc\.localhost:8080 → http:\/\/localhost:3000/);
  assert.match(block, /Requests\s+ttl\s+opn\s+rt1\s+rt5\s+p50\s+p90\n\s+10\s+0\s+0\.00\s+0\.00\s+5ms\s+9ms/);
  assert.match(block, /Uptime\s+1m 5s/);
  assert.match(summaryLine({ tunnels: [{ name: 'http', type: 'http', url: 'http://abc.localhost:8080', local: '', failed: null }], account: null, state: 'closed', stateDetail: null }, s, 65_000), /10 requests \(p50 5ms, p90 9ms\)/);
});

test('ExposeStats: rt1 / rt5 are arrivals per second over the last 1 and 5 minutes', () => {
  const t0 = 1_000_000_000;
  const s = new ExposeStats(t0);
  // 120 requests one every 2 s over 4 minutes.
  for (let i = 0; i < 120; i++) s.addRequest({ method: 'GET', path: '/', status: 200, durationMs: 0, bytesIn: 0, bytesOut: 0 }, t0 + i * 2000);
  const now = t0 + 239_000;
  assert.is(s.rate(60, now), 30 / 60);
  assert.is(s.rate(300, now), 120 / 300);
  // Ten minutes later nothing is left in either window.
  assert.is(s.rate(60, now + 600_000), 0);
  assert.is(s.rate(300, now + 600_000), 0);
});

const screenInfo = (over: { url?: string; webInterface?: string | null } = {}): Parameters<typeof renderBlock>[0] => ({
  tunnels: [{ name: 'http', type: 'http', url: over.url ?? 'http://myapp.tunnels.example.com:8080', local: 'http://localhost:3000', failed: null }],
  account: 'someone.with.a.long.name@example.com (member)',
  state: 'reconnecting',
  stateDetail: '(attempt 3, in 2.1s: cannot reach https://tunnels.example.com:8080: connect ECONNREFUSED)',
  webInterface: 'webInterface' in over ? over.webInterface : 'http://127.0.0.1:4040',
});

test('status block fits 60 and 120 columns, wrapping between words (never cut mid-word)', () => {
  const plain = painter({ isTTY: false } as NodeJS.WriteStream);
  const s = new ExposeStats(0);
  for (const width of [59, 119]) {
    const lines = renderBlock(screenInfo(), s, plain, 5_000, width);
    for (const l of lines) assert.ok(visibleLength(l) <= width, `over ${width}: "${l}"`);
    const text = lines.join('\n');
    // Every word of the Forwarding and Session Status values is on screen whole.
    const words = (t: string) => t.split(/\s+/).filter(Boolean);
    const flat = words(text);
    for (const w of ['http://myapp.tunnels.example.com:8080', '→', 'http://localhost:3000', 'ECONNREFUSED)', 'https://tunnels.example.com:8080:', '(Ctrl+C', 'quit)']) {
      assert.ok(flat.includes(w), `"${w}" whole at width ${width}:\n${text}`);
    }
    assert.match(text, /Web Interface\s+http:\/\/127\.0\.0\.1:4040/);
    assert.match(text, /Traffic\s+in 0 B   out 0 B/);
    assert.ok(flat.includes('someone.with.a.long.name@example.com'));
  }
  const narrow = renderBlock(screenInfo(), s, plain, 5_000, 59);
  // At 60 columns the Forwarding value takes two lines, the second indented under the first.
  const i = narrow.findIndex((l) => l.startsWith('Forwarding'));
  assert.match(narrow[i]!, /^Forwarding\s+http:\/\/myapp\.tunnels\.example\.com:8080 →$/);
  assert.is(narrow[i + 1], `${' '.repeat(18)}http://localhost:3000`);
  // At 120 it is one line.
  const wide = renderBlock(screenInfo(), s, plain, 5_000, 119);
  assert.ok(wide.some((l) => /^Forwarding\s+http:\/\/myapp\.tunnels\.example\.com:8080 → http:\/\/localhost:3000$/.test(l)));
  // Without an inspector there is no Web Interface line.
  assert.not.match(renderBlock(screenInfo({ webInterface: null }), s, plain, 5_000, 119).join('\n'), /Web Interface/);
  // A URL too long for the value column but not for the line gets a line of its own, whole.
  const longer = 'http://myapp-staging-environment.tunnels.example.com:8080';
  const own = renderBlock(screenInfo({ url: longer }), s, plain, 5_000, 59);
  for (const l of own) assert.ok(visibleLength(l) <= 59);
  assert.ok(own.some((l) => l.trim() === longer), own.join('\n'));
  // Longer than a whole line: split, every character kept.
  const long = 'http://' + 'x'.repeat(80) + '.example.com';
  const tiny = renderBlock(screenInfo({ url: long }), s, plain, 5_000, 59);
  for (const l of tiny) assert.ok(visibleLength(l) <= 59);
  assert.ok(tiny.map((l) => l.trim()).join('').includes(long));
});

test('request lines: the time the request arrived and the status in words, as ngrok prints them', () => {
  const plain = painter({ isTTY: false } as NodeJS.WriteStream);
  const at = new Date(2026, 10, 25, 9, 5, 7, 42).getTime(); // local time, as the line shows it
  assert.is(requestLine({ method: 'GET', path: '/hello', status: 200, durationMs: 25, bytesIn: 0, bytesOut: 0 }, plain, at + 25), '09:05:07.042  GET    /hello                    200 OK           25ms');
  assert.match(requestLine({ method: 'POST', path: '/x', status: 404, durationMs: 3, bytesIn: 0, bytesOut: 0 }, plain, at), /^09:05:07\.039  POST\s+\/x\s+404 Not Found\s+3ms$/);
  assert.match(requestLine({ method: 'GET', path: '/', status: 599, durationMs: 3, bytesIn: 0, bytesOut: 0 }, plain, at), /\s599\s+3ms$/); // no name for it
  assert.match(connectionLine({ remote: '127.0.0.1:5555', durationMs: 1000, bytesIn: 74, bytesOut: 417 }, plain, at + 1000), /^09:05:07\.042  TCP\s+127\.0\.0\.1:5555  1\.00s  in 74 B  out 417 B$/);
});

test('failed requests and TCP connections say what the visitor got and why, in red', () => {
  const red = painter({ isTTY: true } as NodeJS.WriteStream);
  const plain = painter({ isTTY: false } as NodeJS.WriteStream);
  const line = requestLine({ method: 'GET', path: '/', status: 502, durationMs: 3, bytesIn: 0, bytesOut: 0, error: 'connection refused by localhost:3000' }, plain);
  assert.match(line, /^\d\d:\d\d:\d\d\.\d{3}  GET\s+\/\s+502 Bad Gateway\s+3ms\s+connection refused by localhost:3000$/);
  assert.match(requestLine({ method: 'GET', path: '/slow', status: 504, durationMs: 30_000, bytesIn: 0, bytesOut: 0, error: 'no response from localhost:3000 within 30 s' }, plain), /504 Gateway Timeout\s+30\.00s\s+no response from localhost:3000 within 30 s$/);
  assert.match(connectionLine({ remote: '127.0.0.1:5555', durationMs: 1, bytesIn: 0, bytesOut: 0, error: 'connection refused by localhost:5432' }, plain), /^\d\d:\d\d:\d\d\.\d{3}  TCP\s+127\.0\.0\.1:5555\s+failed: connection refused by localhost:5432$/);
  if (red.enabled) {
    const coloured = requestLine({ method: 'GET', path: '/', status: 502, durationMs: 3, bytesIn: 0, bytesOut: 0, error: 'connection refused by localhost:3000' }, red);
    assert.ok(coloured.includes('\x1b[31m502 Bad Gateway  \x1b[39m'));
    assert.ok(coloured.includes('\x1b[31mconnection refused by localhost:3000\x1b[39m'));
  }
});

test.run();
