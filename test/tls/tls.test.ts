import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import type https from 'node:https';
import tls from 'node:tls';
import { spawn } from 'node:child_process';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MAIN, startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/fixtures.js';
import { issue, makeCa, tlsFixture, type Ca } from '../helpers/certs.js';
import { bulkRoute, httpsGet, MIB, MIB_SHA, peerCertificate, type HttpsGot } from '../helpers/https-visit.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, type Local } from '../tunnel/helpers.js';
import { burrow, closedPort, RunningBurrows, tempDir } from '../cli/harness.js';

// TLS on the one port, end to end: a CA made by the test signs a certificate for localhost,
// *.localhost and 127.0.0.1 (the default) and one for *.sni.test (in --tls-dir, chosen by SNI).
// Visitors are node:https clients; the CLI runs as a child process with --ca.

// Tunnels live under tunnels.test (Node refuses a wildcard over a single label like *.localhost).
const DOMAIN = 'tunnels.test';
const { tmp, certs, sniDir, ca, main, caPem } = tlsFixture('burrow-tls-', DOMAIN);
const otherCa: Ca = makeCa(certs, 'other');

let server: TestServer;
let local: Local;
let httpPort = 0;
const clients: TunnelClient[] = [];
const burrows = new RunningBurrows();
let release: () => void = () => undefined;
let slowArrived: () => void = () => undefined;

/** One HTTPS request to the server as `servername` (SNI and Host), verified against the test CA unless `ca` says otherwise. */
function get(servername: string, path: string, opts: { ca?: string; agent?: https.Agent; body?: Buffer } = {}): Promise<HttpsGot> {
  return httpsGet(server.port, servername, path, { ...opts, ca: opts.ca ?? caPem });
}

/** The certificate a fresh handshake with this SNI name gets (not verified: the test looks at it). */
function certificateFor(servername: string): Promise<tls.PeerCertificate> {
  return peerCertificate(server.port, servername, null);
}

test.before(async () => {
  local = await listen(
    http.createServer((req, res) => {
      if (req.url === '/slow') {
        slowArrived();
        // Answered once the test releases it (after a certificate reload).
        const done = () => res.end('slow done');
        release = done;
        return;
      }
      if (bulkRoute(req, res)) return;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ proto: req.headers['x-forwarded-proto'], host: req.headers.host, path: req.url }));
    }),
  );
  httpPort = await closedPort();
  server = await startServer({
    args: ['--domain', DOMAIN, '--tls-cert', main.cert, '--tls-key', main.key, '--tls-dir', sniDir, '--http-port', String(httpPort)],
  });
});

test.after(async () => {
  burrows.killAll();
  for (const c of clients) await c.stop().catch(() => undefined);
  await server?.stop();
  await local.close();
  tmp.remove();
});

async function tunnel(): Promise<string> {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, ca: [...tls.rootCertificates, caPem] });
  clients.push(c);
  const r = await withDeadline(c.start(), 20_000, 'tunnel start over wss');
  assert.match(r.url, /^https:\/\/[a-z0-9-]+\.tunnels\.test:\d+$/);
  return r.id;
}

test('HTTPS end to end: the tunnel registers over wss, its public URL is https://, the visitor is served over TLS with X-Forwarded-Proto https', async () => {
  assert.match(server.stdout(), /listening on https:\/\/127\.0\.0\.1:\d+ \(this machine only; [^;]+; base URL https:\/\/tunnels\.test:\d+\)/);
  const id = await tunnel();
  const r = await get(`${id}.${DOMAIN}`, '/hello?x=1');
  assert.is(r.status, 200, r.body);
  assert.equal(JSON.parse(r.body), { proto: 'https', host: `${id}.${DOMAIN}`, path: '/hello?x=1' });
  assert.is(r.subject, DOMAIN);
  // The API on the same port, same certificate.
  const health = await get(DOMAIN, '/healthz');
  assert.is(health.status, 200);
});

test('bulk over TLS: rounds of 16 concurrent 1 MiB downloads and 16 uploads at once arrive intact, and the control connection stays up', async () => {
  // Response bytes reach the edge on the wss control connection while request bodies leave on
  // it faster than the client reads them. uWS's TLS layer (uSockets) discarded the rest of a
  // large read when anything wrote during it, breaking the control connection (both ends 1006)
  // in the first or second round; Node's TLS in the front must carry it whole.
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, ca: [...tls.rootCertificates, caPem] });
  clients.push(c);
  const reconnects: string[] = [];
  c.on('reconnecting', (e) => reconnects.push(e.reason));
  const { id } = await withDeadline(c.start(), 20_000, 'tunnel start over wss');
  const host = `${id}.${DOMAIN}`;
  for (let round = 0; round < 3; round++) {
    const [down, up] = await Promise.all([
      Promise.all(Array.from({ length: 16 }, () => get(host, '/mib'))),
      Promise.all(Array.from({ length: 16 }, () => get(host, '/sha', { body: MIB }))),
    ]);
    for (const [i, r] of down.entries()) {
      assert.is(r.status, 200, `download ${i} of round ${round}: ${r.body.slice(0, 200)}`);
      assert.is(r.sha, MIB_SHA, `download ${i} of round ${round} arrived altered`);
    }
    for (const [i, r] of up.entries()) {
      assert.is(r.status, 200, `upload ${i} of round ${round}: ${r.body.slice(0, 200)}`);
      assert.is(r.body, MIB_SHA, `upload ${i} of round ${round} arrived altered`);
    }
  }
  assert.equal(reconnects, [], 'the control connection never dropped');
  // The server runs the fixed copy and so says nothing about the defect.
  assert.not.match(server.stderr(), 'TLS read fix');
});

test('SNI picks the --tls-dir certificate for its name; other names get the default', async () => {
  assert.is((await certificateFor('app.sni.test')).subject.CN, 'sni.test');
  assert.is((await certificateFor(`app.${DOMAIN}`)).subject.CN, DOMAIN);
  // Served, not just handshaken: the SNI name's routes are the same as the default's.
  const r = await get('app.sni.test', '/healthz');
  assert.is(r.status, 200, r.body);
  assert.is(r.subject, 'sni.test');
});

test('--http-port answers 308 to the same URL over https', async () => {
  const r = await withDeadline(
    new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: httpPort, method: 'POST', path: '/api/v1/me?a=b', headers: { host: `myapp.${DOMAIN}:${httpPort}` } }, resolve);
      req.on('error', reject);
      req.end();
    }),
    10_000,
    'redirect',
  );
  r.resume();
  assert.is(r.statusCode, 308);
  assert.is(r.headers.location, `https://myapp.${DOMAIN}:${server.port}/api/v1/me?a=b`);
});

test('the CLI verifies the server: --ca (flag, env, context) works; without it, or with another CA, a clear error and exit 1', async () => {
  const cfg = tempDir();
  try {
    const env = { BURROW_SERVER: server.url, BURROW_TOKEN: server.adminKey };
    const ok = await burrow({ configDir: cfg.dir, env }, ['tunnels', 'list', '--json', '--ca', ca.cert]);
    assert.is(ok.code, 0, ok.stderr);
    const viaEnv = await burrow({ configDir: cfg.dir, env: { ...env, BURROW_CA: ca.cert } }, ['whoami', '--json']);
    assert.is(viaEnv.code, 0, viaEnv.stderr);

    for (const args of [[], ['--ca', otherCa.cert]]) {
      const refused = await burrow({ configDir: cfg.dir, env }, ['tunnels', 'list', ...args]);
      assert.is(refused.code, 1, refused.stderr);
      assert.match(refused.stderr, 'TLS verification failed');
      assert.match(refused.stderr, `127.0.0.1:${server.port}`);
      assert.match(refused.stderr, 'unknown CA');
      assert.match(refused.stderr, '--ca');
    }

    const created = await burrow({ configDir: cfg.dir }, ['context', 'create', 'lab', '--server', server.url, '--token', server.adminKey, '--ca', ca.cert, '--use']);
    assert.is(created.code, 0, created.stderr);
    const fromContext = await burrow({ configDir: cfg.dir }, ['whoami', '--json']);
    assert.is(fromContext.code, 0, fromContext.stderr);
  } finally {
    cfg.remove();
  }
});

test('burrow http over wss with --ca prints an https:// URL that serves; without --ca it stops with the TLS error', async () => {
  const cfg = tempDir();
  try {
    const env = { BURROW_SERVER: server.url, BURROW_TOKEN: server.adminKey };
    const child = burrows.start({ configDir: cfg.dir, env }, ['http', String(local.port), '--ca', ca.cert]);
    const url = await burrows.firstLine(child);
    assert.match(url, /^https:\/\/[a-z0-9-]+\.tunnels\.test:\d+$/);
    const r = await get(new URL(url).hostname, '/via-cli');
    assert.is(r.status, 200, r.body);
    assert.is(JSON.parse(r.body).proto, 'https');
    child.kill('SIGTERM');

    const refused = await burrow({ configDir: cfg.dir, env }, ['http', String(local.port)], 30_000);
    assert.is(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, 'TLS verification failed');
    assert.match(refused.stderr, 'unknown CA');
  } finally {
    cfg.remove();
  }
});

test('SIGHUP reloads the certificate: a request in flight completes, new handshakes get the new certificate, the tunnel keeps serving', async () => {
  const id = await tunnel();
  const host = `${id}.${DOMAIN}`;
  const arrived = new Promise<void>((r) => (slowArrived = r));
  const inFlight = get(host, '/slow');
  inFlight.catch(() => undefined); // awaited below; a deadline meanwhile must not crash the file
  await withDeadline(arrived, 20_000, 'slow request at the local service');

  // Replace the files in place (rename: never half-written), then SIGHUP.
  const next = issue(join(tmp.dir, 'certs'), ca, 'next', 'reloaded', [DOMAIN, `*.${DOMAIN}`, 'IP:127.0.0.1']);
  writeFileSync(`${main.cert}.new`, readFileSync(next.cert));
  writeFileSync(`${main.key}.new`, readFileSync(next.key));
  renameSync(`${main.key}.new`, main.key);
  renameSync(`${main.cert}.new`, main.cert);
  assert.ok(server.proc.kill('SIGHUP'), 'SIGHUP sent');

  await eventually(async () => {
    const cn = (await certificateFor(host)).subject.CN;
    if (cn !== 'reloaded') throw new Error(`still ${cn}`);
    return true;
  }, 20_000, 'a handshake with the reloaded certificate');

  release();
  const slow = await inFlight;
  assert.is(slow.status, 200);
  assert.is(slow.body, 'slow done');
  assert.is(slow.subject, DOMAIN);

  // The control connection (accepted before the reload) still carries new requests.
  const after = await get(host, '/after');
  assert.is(after.status, 200, after.body);
  assert.is(after.subject, 'reloaded');
  // The SNI pair was read again too, and still serves.
  assert.is((await certificateFor('x.sni.test')).subject.CN, 'sni.test');
});

test('unusable certificate files stop the start with exit 1, naming the file', async () => {
  const garbage = join(tmp.dir, 'garbage.crt');
  writeFileSync(garbage, 'not a certificate\n');
  const stranger = issue(certs, otherCa, 'stranger', 'localhost', ['localhost']);
  const cases: [string[], string][] = [
    [['--tls-cert', garbage, '--tls-key', main.key], garbage],
    [['--tls-cert', main.cert, '--tls-key', stranger.key], stranger.key],
    [['--tls-cert', join(tmp.dir, 'missing.crt'), '--tls-key', main.key], join(tmp.dir, 'missing.crt')],
  ];
  for (const [args, named] of cases) {
    const child = spawn(process.execPath, [MAIN, '--port', '0', '--host', '127.0.0.1', '--database-url', 'postgres://127.0.0.1:1/none', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const code = await withDeadline(new Promise<number | null>((r) => child.on('close', r)), 20_000, 'burrowd with a bad certificate');
    assert.is(code, 1, stderr);
    assert.ok(stderr.includes(`burrowd: `) && stderr.includes(named), stderr);
  }
});

test.run();
