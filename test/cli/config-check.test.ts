// burrow config check and the burrow.yml rules (src/cli/tunnel-file.ts, tunnel-spec.ts): every
// error at once with its line and field, exit 2; a valid file summarised; the same validation
// as the flags of burrow http|tcp. No server needed: nothing here connects.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseTunnelFile } from '../../src/cli/tunnel-file.js';
import { validateTunnel } from '../../src/cli/tunnel-spec.js';
import { burrow, closedPort, tempDir } from './harness.js';

let home: { dir: string; remove: () => void };

test.before(() => {
  home = tempDir();
});
test.after(() => home?.remove());

function file(name: string, text: string): string {
  const p = join(home.dir, name);
  writeFileSync(p, text);
  return p;
}

const BROKEN = `version: 1
server: localhost:8080
tunnels:
  web:  { proto: http, addr: abc, id: myapp, basic_auth: [ "me:secret", "nopass" ], allow_ip: [ 10.0.0.0/8, 300.1.1.1 ] }
  db:   { proto: tcp,  addr: "localhost:5432", remote_port: 25432, colour: red }
  api:
    proto: http
    addr: "https://localhost:8443"
    host_header: "bad header\\r\\nX: 1"
    expires: yesterday
  ssh:
    proto: tcp
    addr: 22
    basic_auth: [ "a:b" ]
extra: 1
`;

test('config check: every error with its line and field, exit 2', async () => {
  const p = file('broken.yml', BROKEN);
  const r = await burrow({ configDir: home.dir }, ['config', 'check', '--config', p]);
  assert.is(r.code, 2, r.stderr);
  assert.is(r.stdout, '');
  const lines = r.stderr.trim().split('\n');
  const expected = [
    /^error: .*broken\.yml:2: server: expected an http:\/\/ or https:\/\/ URL, got "localhost:8080"$/,
    /^error: .*broken\.yml:4: tunnels\.web\.addr: expected a port or host:port, got "abc"$/,
    /^error: .*broken\.yml:4: tunnels\.web\.basic_auth\[1\]: a credential must be USER:PASS$/,
    /^error: .*broken\.yml:4: tunnels\.web\.allow_ip\[1\]: expected an address or CIDR block .*"300\.1\.1\.1"$/,
    /^error: .*broken\.yml:5: tunnels\.db\.colour: unknown key \(allowed: proto, addr, id, team, remote_port, /,
    /^error: .*broken\.yml:9: tunnels\.api\.host_header: expected "rewrite" or a host name/,
    /^error: .*broken\.yml:10: tunnels\.api\.expires: expected a duration like 30d/,
    /^error: .*broken\.yml:14: tunnels\.ssh\.basic_auth: only http tunnels take basic auth/,
    /^error: .*broken\.yml:15: extra: unknown key \(allowed: version, server, tunnels\)$/,
  ];
  for (const re of expected) assert.ok(lines.some((l) => re.test(l)), `no line matches ${re}\n${r.stderr}`);
  assert.match(r.stderr, /error: invalid config file: .*broken\.yml: 9 errors/);
  assert.match(r.stderr, /hint: /);
});

test('config check: a misspelt key gets "did you mean", a far-off one only the allowed list', async () => {
  const p = file('typo.yml', 'version: 1\ntunnel:\n  web: { proto: http, adr: 3000 }\n');
  const r = await burrow({ configDir: home.dir }, ['config', 'check', '--config', p]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /typo\.yml:2: tunnel: unknown key \(did you mean `tunnels`\? allowed: version, server, tunnels\)/);
  const { errors } = parseTunnelFile('version: 1\ntunnels:\n  web: { proto: http, adr: 3000, Remote-Port: 1, colour: red }\n', 'x.yml');
  const messages = errors.map((e) => `${e.field}: ${e.message}`);
  assert.ok(messages.some((m) => m.startsWith('tunnels.web.adr: unknown key (did you mean `addr`? allowed: proto, addr,')), messages.join('\n'));
  assert.ok(messages.some((m) => m.startsWith('tunnels.web.Remote-Port: unknown key (did you mean `remote_port`?')), messages.join('\n'));
  assert.ok(messages.some((m) => m.startsWith('tunnels.web.colour: unknown key (allowed: ')), messages.join('\n'));
});

test('config check --json: the errors as data', async () => {
  const p = file('broken2.yml', 'version: 1\ntunnels:\n  web: { proto: htp, addr: 3000 }\n');
  const r = await burrow({ configDir: home.dir }, ['config', 'check', '--config', p, '--json']);
  assert.is(r.code, 2);
  const body = JSON.parse(r.stdout) as { valid: boolean; errors: { line: number; field: string; message: string }[] };
  assert.is(body.valid, false);
  assert.equal(body.errors, [{ line: 3, field: 'tunnels.web.proto', message: 'expected http or tcp, got "htp"' }]);
});

test('config check: YAML syntax errors and duplicate keys name their line', async () => {
  const p = file('syntax.yml', 'version: 1\ntunnels:\n  web: { proto: http, addr: 3000 }\n  web: { proto: tcp, addr: 22 }\n');
  const r = await burrow({ configDir: home.dir }, ['config', 'check', '--config', p]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /syntax\.yml:4: Map keys must be unique/);
  const q = file('syntax2.yml', 'version: 1\ntunnels:\n  web: { proto: http, addr: 3000\n');
  const r2 = await burrow({ configDir: home.dir }, ['config', 'check', '--config', q]);
  assert.is(r2.code, 2);
  assert.match(r2.stderr, /syntax2\.yml:\d+: /);
});

test('config check: a valid file is summarised; ./burrow.yml then $XDG_CONFIG_HOME/burrow/burrow.yml are the defaults', async () => {
  const text = `version: 1
server: https://burrow.example.com
tunnels:
  web:  { proto: http, addr: 3000, id: myapp, basic_auth: [ "me:secret" ], allow_ip: [ 10.0.0.0/8 ] }
  db:   { proto: tcp,  addr: "localhost:5432", remote_port: 25432 }
  api:  { proto: http, addr: "https://localhost:8443", host_header: rewrite, team: web }
`;
  mkdirSync(join(home.dir, 'burrow'), { recursive: true });
  writeFileSync(join(home.dir, 'burrow', 'burrow.yml'), text);
  const r = await burrow({ configDir: home.dir }, ['config', 'check']);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /burrow\.yml: ok, 3 tunnels on https:\/\/burrow\.example\.com/);
  assert.match(r.stdout, /web\s+http http:\/\/localhost:3000\s+id myapp/);
  assert.match(r.stdout, /db\s+tcp\s+tcp:\/\/localhost:5432\s+remote port 25432/);
  assert.match(r.stdout, /api\s+http https:\/\/localhost:8443/);

  const none = await burrow({ configDir: join(home.dir, 'empty') }, ['config', 'check']);
  assert.is(none.code, 2);
  assert.match(none.stderr, /error: no config file: neither \.\/burrow\.yml nor .*empty\/burrow\/burrow\.yml exists/);
});

test('flags and file share one validation: the same bad value, the same message', async () => {
  const env = { configDir: home.dir, env: { BURROW_SERVER: 'http://127.0.0.1:9', BURROW_TOKEN: 'bk_x' } };
  const flag = await burrow(env, ['http', '3000', '--id', 'Not_An_Id']);
  assert.is(flag.code, 2);
  const { errors } = validateTunnel('web', { proto: 'http', addr: 3000, id: 'Not_An_Id' });
  assert.is(errors.length, 1);
  assert.ok(flag.stderr.includes(errors[0]!.message), flag.stderr);
  assert.match(flag.stderr, /error: invalid --id: /);
  const target = await burrow(env, ['tcp', 'abc']);
  assert.is(target.code, 2);
  assert.match(target.stderr, /error: invalid target: expected a port or host:port, got "abc"/);
});

test('validateTunnel: kinds, lists and cross-field rules', () => {
  const ok = validateTunnel('w', { proto: 'http', addr: 'https://localhost', upstream_insecure: true, deny_ip: '192.168.0.0/16', expires: '2h' }, 0);
  assert.equal(ok.errors, []);
  assert.equal(ok.spec!.local, { host: 'localhost', port: 443, tls: true });
  assert.equal(ok.spec!.access, { denyIp: ['192.168.0.0/16'], expiresAt: 2 * 3600_000 });
  const bad = validateTunnel('t', { proto: 'tcp', addr: 'https://x:1', host_header: 'rewrite', upstream_insecure: 'yes', remote_port: 1.5 });
  assert.equal(bad.errors.map((e) => e.field).sort(), ['addr', 'host_header', 'remote_port', 'upstream_insecure']);
  assert.is(validateTunnel('x', {}).errors.map((e) => e.field).join(','), 'proto,addr');
  assert.ok(validateTunnel('x', { proto: 'http', addr: 80, remote_port: 8080 }).errors[0]!.message.includes('only tcp tunnels'));
  for (const c of ['10.0.0.0/33', '1.2.3', 'x/8', '::/129']) assert.is(validateTunnel('x', { proto: 'tcp', addr: 1, allow_ip: [c] }).errors.length, 1, c);
  assert.equal(validateTunnel('x', { proto: 'tcp', addr: 1, allow_ip: ['10.0.0.0/8', '::1'], deny_ip: '2001:db8::/32' }).spec!.access, { allowIp: ['10.0.0.0/8', '::1'], denyIp: ['2001:db8::/32'] });
});

test('parseTunnelFile: aliases are bounded, duplicate ids across entries are errors, names are checked', () => {
  const dup = parseTunnelFile('version: 1\ntunnels:\n  a: { proto: http, addr: 1, id: same-id }\n  b: { proto: http, addr: 2, id: same-id }\n', 'f.yml');
  assert.equal(dup.errors.map((e) => `${e.line} ${e.field}`), ['4 tunnels.b.id']);
  const name = parseTunnelFile('version: 1\ntunnels:\n  "web app": { proto: http, addr: 1 }\n', 'f.yml');
  assert.equal(name.errors.map((e) => `${e.line} ${e.field}`), ['3 tunnels.web app']);
  // A billion-laughs document: the library's alias limit stops it, reported as an error.
  let bomb = 'version: 1\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n';
  for (let i = 1; i < 9; i++) bomb += `a${i}: &a${i} [${Array(10).fill(`*a${i - 1}`).join(', ')}]\n`;
  bomb += 'tunnels:\n  web: { proto: http, addr: 1, allow_ip: *a8 }\n';
  const r = parseTunnelFile(bomb, 'f.yml');
  assert.ok(r.errors.some((e) => e.field === 'tunnels.web' && /alias/i.test(e.message)), JSON.stringify(r.errors));
  const top = parseTunnelFile('- 1\n- 2\n', 'f.yml');
  assert.is(top.errors[0]!.field, '');
  assert.is(parseTunnelFile('version: 1\ntunnels: {}\n', 'f.yml').errors[0]!.field, 'tunnels');
});

test.run();
