// TLS on a development domain: burrowd with a certificate for burrow.localhost and
// *.burrow.localhost (what mkcert or a local CA makes), reached by the CLI under those names,
// which resolve to loopback for it as they do for browsers and curl (RFC 6761), whatever the
// system resolver says. A name the certificate does not hold is refused with the names it does
// hold; a name that does not resolve says so instead of "is burrowd running there?".
import http from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { issue, makeCa } from '../helpers/certs.js';
import { httpsGet } from '../helpers/https-visit.js';
import { burrow, RunningBurrows, tempDir, type CliEnv } from '../cli/harness.js';
import { isLoopbackName, lookupLoopbackNames } from '../../src/protocol/loopback-names.js';

const DOMAIN = 'burrow.localhost';
const dir = mkdtempSync(join(tmpdir(), 'burrow-devtls-'));
const ca = makeCa(dir, 'dev');
const main = issue(dir, ca, 'server', DOMAIN, [DOMAIN, `*.${DOMAIN}`]);
const caPem = readFileSync(ca.cert, 'utf8');

let server: TestServer;
let local: http.Server;
let localPort = 0;
let home: { dir: string; remove: () => void };
const burrows = new RunningBurrows();

test.before(async () => {
  home = tempDir();
  local = http.createServer((req, res) => res.end(`hello from ${req.url}`));
  await new Promise<void>((r) => local.listen(0, '127.0.0.1', r));
  localPort = (local.address() as { port: number }).port;
  server = await startServer({ workers: 1, args: ['--domain', DOMAIN, '--tls-cert', main.cert, '--tls-key', main.key] });
});

test.after(async () => {
  burrows.killAll();
  await server?.stop();
  local?.close();
  home?.remove();
  rmSync(dir, { recursive: true, force: true });
});

const as = (serverUrl: string): CliEnv => ({ configDir: home.dir, env: { BURROW_SERVER: serverUrl, BURROW_TOKEN: server.adminKey, BURROW_CA: ca.cert } });

test('names under .localhost are loopback, others go to the system resolver', async () => {
  for (const n of ['localhost', 'burrow.localhost', 'A.Burrow.LOCALHOST.']) assert.ok(isLoopbackName(n), n);
  for (const n of ['localhost.example.com', 'mylocalhost', 'example.com']) assert.not.ok(isLoopbackName(n), n);
  const all = await new Promise((resolve, reject) => lookupLoopbackNames('x.burrow.localhost', { all: true }, (err, addresses) => (err ? reject(err) : resolve(addresses))));
  assert.equal(all, [{ address: '127.0.0.1', family: 4 }, { address: '::1', family: 6 }]);
  const six = await new Promise((resolve) => lookupLoopbackNames('x.localhost', { family: 6 }, (_e, address, family) => resolve([address, family])));
  assert.equal(six, ['::1', 6]);
});

test('the CLI reaches https://burrow.localhost:PORT (API and wss tunnel); the tunnel serves at its *.burrow.localhost URL', async () => {
  const serverUrl = `https://${DOMAIN}:${server.port}`;
  const who = await burrow(as(serverUrl), ['whoami', '--json']);
  assert.is(who.code, 0, who.stderr);
  assert.is(JSON.parse(who.stdout).email, 'seed@burrow.local');
  const child = burrows.start(as(serverUrl), ['http', String(localPort), '--no-inspect']);
  const url = await burrows.firstLine(child);
  assert.match(url, new RegExp(`^https://[a-z0-9-]+\\.burrow\\.localhost:${server.port}$`));
  const got = await httpsGet(server.port, new URL(url).hostname, '/dev', { ca: caPem });
  assert.is(got.status, 200, got.body);
  assert.is(got.body, 'hello from /dev');
  child.kill('SIGINT');
});

test('a name the certificate does not hold: refused, listing the names it holds', async () => {
  const r = await burrow(as(`https://127.0.0.1:${server.port}`), ['whoami']);
  assert.is(r.code, 1, r.stderr);
  assert.match(r.stderr, `error: TLS verification failed: 127.0.0.1:${server.port}: its certificate is for burrow.localhost, *.burrow.localhost, not 127.0.0.1 (name mismatch)\n`);
  const t = await burrow(as(`https://127.0.0.1:${server.port}`), ['http', String(localPort), '--no-inspect'], 30_000);
  assert.is(t.code, 1, t.stderr);
  assert.match(t.stderr, 'its certificate is for burrow.localhost, *.burrow.localhost, not 127.0.0.1 (name mismatch)');
});

test('a name that does not resolve: the hint says so, not "is burrowd running there?"', async () => {
  for (const args of [['whoami'], ['http', String(localPort), '--no-inspect']]) {
    const r = await burrow(as(`https://no-such-name.invalid:${server.port}`), args, 30_000);
    assert.is(r.code, 6, r.stderr);
    assert.match(r.stderr, /^error: server unreachable: cannot connect to https:\/\/no-such-name\.invalid:\d+ \((ENOTFOUND|EAI_AGAIN)\)$/m);
    assert.match(r.stderr, /^hint: the name no-such-name\.invalid does not resolve \(DNS\): check its spelling in --server/m);
    assert.not.match(r.stderr, /is burrowd running there/);
  }
});

test.run();
