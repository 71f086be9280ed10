import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import http2 from 'node:http2';
import { execFile } from 'node:child_process';
import { CliSuite } from '../cli/harness.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { tlsFixture } from '../helpers/certs.js';
import { RunningBurrows, tempDir } from '../cli/harness.js';
import { h2Get } from './helpers.js';

// HTTP/2 visitors through a real burrowd and a real `burrow http` toward an HTTP/1.1 service:
// curl with --http2-prior-knowledge on the plain port (h2c) and --http2 over TLS (ALPN), the
// request reaching the service as HTTP/1.1 with its hop-by-hop fields dropped; a connection
// coalesced over two tunnels of one wildcard certificate; 421 for a host the certificate does
// not cover; the API staying on HTTP/1.1.

const DOMAIN = 'tunnels.test';
const fixture = tlsFixture('burrow-h2-', DOMAIN);
let plain: CliSuite;
let secure: TestServer;
const burrows = new RunningBurrows();
const home = tempDir();
let h2cHost = '';
/** A tunnel with --basic-auth: the access rules apply to each stream. */
let lockedHost = '';
let servicePort = 0;
const tlsHosts: string[] = [];
let seen: { version: string; headers: http.IncomingHttpHeaders; body: string }[] = [];

function curl(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('curl', ['-sS', '--max-time', '10', ...args], (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

/** `burrow http` on `srv` toward the service, as `id`; its public host. */
async function expose(srv: TestServer, id: string, extra: string[] = []): Promise<string> {
  const child = burrows.start({ configDir: home.dir, env: { BURROW_SERVER: srv.url, BURROW_TOKEN: srv.adminKey } }, ['http', String(servicePort), '--id', id, '--no-inspect', ...extra]);
  const url = await burrows.firstLine(child);
  return new URL(url).host;
}

test.before(async () => {
  plain = await CliSuite.start({ workers: 1 });
  servicePort = await plain.http((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      seen.push({ version: req.httpVersion, headers: req.headers, body });
      res.setHeader('content-type', 'text/plain');
      res.setHeader('connection', 'keep-alive');
      res.end(`hello over ${req.httpVersion}: ${body.length}`);
    });
  });
  h2cHost = await expose(plain.srv, 'h2c-one');
  lockedHost = await expose(plain.srv, 'h2c-locked', ['--basic-auth', 'ann:s3cret']);
  secure = await startServer({ workers: 1, args: ['--domain', DOMAIN, '--tls-cert', fixture.main.cert, '--tls-key', fixture.main.key, '--tls-dir', fixture.sniDir] });
  tlsHosts.push(await expose(secure, 'alpha', ['--ca', fixture.ca.cert]), await expose(secure, 'beta', ['--ca', fixture.ca.cert]));
});

test.after(async () => {
  burrows.killAll();
  await plain?.stop();
  await secure?.stop();
  home.remove();
  fixture.tmp.remove();
});

test('h2c with prior knowledge: curl speaks HTTP/2, the service hears HTTP/1.1 without hop-by-hop fields', async () => {
  seen = [];
  const r = await curl(['--http2-prior-knowledge', '-i', '-H', `Host: ${h2cHost}`, '-H', 'te: trailers', '--data-binary', 'payload', `http://127.0.0.1:${plain.srv.port}/echo?q=1`]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /^HTTP\/2 200/);
  assert.match(r.stdout, /hello over 1\.1: 7/);
  assert.not.match(r.stdout, /connection:/i);
  assert.is(seen.length, 1);
  assert.is(seen[0]!.body, 'payload');
  assert.is(seen[0]!.headers.host, h2cHost);
  assert.is(seen[0]!.headers.te, undefined);
  assert.is(seen[0]!.headers['x-forwarded-for'], '127.0.0.1');
});

test('h2c: many streams on one connection each get their answer', async () => {
  const session = http2.connect(`http://127.0.0.1:${plain.srv.port}`);
  try {
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => h2Get(session, h2cHost, `/n/${i}`).then((r) => r.body)));
    assert.is(answers.length, 20);
    for (const a of answers) assert.is(a, 'hello over 1.1: 0');
  } finally {
    session.close();
  }
});

test('an HTTP/1.1 request on the plain port is still served as before, and Upgrade: h2c is not honoured', async () => {
  seen = [];
  const r = await curl(['--http2', '-i', '-H', `Host: ${h2cHost}`, `http://127.0.0.1:${plain.srv.port}/up`]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /^HTTP\/1\.1 200/);
  assert.is(seen[0]!.headers.upgrade, undefined);
  assert.is(seen[0]!.headers['http2-settings'], undefined);
});

test('basic auth applies to each stream of one connection; the password never reaches the service', async () => {
  seen = [];
  const session = http2.connect(`http://127.0.0.1:${plain.srv.port}`);
  try {
    const ask = (authorization: string | null) =>
      new Promise<number>((resolve, reject) => {
        const req = session.request({ ':path': '/locked', ':authority': lockedHost, ...(authorization ? { authorization } : {}) });
        req.on('response', (h) => resolve(Number(h[':status'])));
        req.on('error', reject);
        req.resume();
        req.end();
      });
    const good = `Basic ${Buffer.from('ann:s3cret').toString('base64')}`;
    assert.equal(await Promise.all([ask(null), ask(good), ask(`Basic ${Buffer.from('ann:nope').toString('base64')}`)]), [401, 200, 401]);
    assert.is(seen.length, 1);
    assert.is(seen[0]!.headers.authorization, undefined);
  } finally {
    session.close();
  }
});

test('requests that came as HTTP/2 streams are counted apart (burrow_h2_requests_total)', async () => {
  let text = '';
  // The shards report their counts on their own schedule: wait for all of them, not the first.
  const counted = /^burrow_h2_requests_total (2[1-9]|[3-9]\d)/m;
  for (let i = 0; i < 50 && !counted.test(text); i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 100));
    text = await (await fetch(`http://127.0.0.1:${plain.srv.port}/metrics`, { headers: { authorization: `Bearer ${plain.srv.adminKey}` } })).text();
  }
  assert.match(text, counted);
});

test('TLS: ALPN h2 for a tunnel host, answered over HTTP/2', async () => {
  const r = await curl(['--http2', '-i', '--cacert', fixture.ca.cert, '--resolve', `${tlsHosts[0]!.split(':')[0]}:${secure.port}:127.0.0.1`, `https://${tlsHosts[0]}/x`]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /^HTTP\/2 200/);
  assert.match(r.stdout, /hello over 1\.1/);
});

test('TLS: the API host keeps HTTP/1.1 (ALPN)', async () => {
  const r = await curl(['--http2', '-i', '--cacert', fixture.ca.cert, '--resolve', `${DOMAIN}:${secure.port}:127.0.0.1`, `https://${DOMAIN}:${secure.port}/healthz`]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /^HTTP\/1\.1 200/);
});

test('TLS: two tunnels coalesced on one connection under the wildcard certificate; 421 for a host it does not cover', async () => {
  const [a, b] = tlsHosts.map((h) => h.split(':')[0]!);
  const session = http2.connect(`https://127.0.0.1:${secure.port}`, { ca: fixture.caPem, servername: a });
  const ask = (authority: string): Promise<{ status: number; body: string }> => h2Get(session, `${authority}:${secure.port}`, '/c');
  try {
    const first = await ask(a);
    const second = await ask(b);
    assert.is(first.status, 200);
    assert.is(second.status, 200);
    // *.sni.test is served by --tls-dir, but this connection's certificate is *.tunnels.test.
    const other = await ask('x.sni.test');
    assert.is(other.status, 421);
    const api = await ask(DOMAIN);
    assert.is(api.status, 421);
  } finally {
    session.close();
  }
});

test.run();
