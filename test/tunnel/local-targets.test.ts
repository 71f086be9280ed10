import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient, type TunnelClientOptions } from '../../src/client/tunnel-client.js';
import { visit } from './helpers.js';
import { listenIpv6Only } from '../helpers/ipv6-only.js';

// Local targets the client must reach: an https:// service (certificate verified, or accepted
// with --upstream-insecure when self-signed), a service listening on ::1 only behind the name
// `localhost`, and a dev server that refuses a Host it does not know. Real servers on loopback;
// the certificate is made here with the openssl CLI.

let server: TestServer;
let certDir: string;
const clients: TunnelClient[] = [];
const closers: (() => void)[] = [];

function listen<S extends net.Server>(s: S, host: string): Promise<number> {
  closers.push(() => {
    (s as unknown as http.Server).closeAllConnections?.();
    s.close();
  });
  if (host === '::1') return listenIpv6Only(s);
  return new Promise((resolve) => s.listen(0, host, () => resolve((s.address() as net.AddressInfo).port)));
}

async function tunnel(local: TunnelClientOptions['local'], type: 'http' | 'tcp' = 'http') {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type, local, responseTimeoutMs: 10_000 });
  clients.push(c);
  const events: { status: number; error?: string }[] = [];
  c.on('request', (e) => events.push(e));
  const r = await withDeadline(c.start(), 10_000, 'tunnel start');
  return { ...r, host: `${r.id}.localhost`, events, client: c };
}

test.before(async () => {
  server = await startServer({ workers: 1 });
  certDir = mkdtempSync(join(tmpdir(), 'burrow-local-tls-'));
  execFileSync('/usr/bin/openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem'),
  ], { stdio: 'ignore' });
});

test.after(async () => {
  await Promise.all(clients.map((c) => c.stop()));
  for (const close of closers) close();
  await server?.stop();
  rmSync(certDir, { recursive: true, force: true });
});

test('https:// local service: a self-signed certificate is refused (502, and why), accepted with insecure', async () => {
  const tls = https.createServer({ key: readFileSync(join(certDir, 'key.pem')), cert: readFileSync(join(certDir, 'cert.pem')) }, (req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => res.end(`tls=${(req.socket as import('node:tls').TLSSocket).encrypted === true} ${req.method} ${body}`));
  });
  const port = await listen(tls, '127.0.0.1');

  const strict = await tunnel({ host: 'localhost', port, tls: true });
  const refused = await visit(server.port, strict.host);
  assert.is(refused.status, 502);
  const e = await withDeadline((async () => { while (!strict.events[0]) await new Promise((r) => setTimeout(r, 20)); return strict.events[0]; })(), 10_000, 'request event');
  assert.is(e.status, 502);
  assert.match(e.error ?? '', /localhost:\d+'s TLS certificate is not trusted \(DEPTH_ZERO_SELF_SIGNED_CERT\); --upstream-insecure/);

  const lax = await tunnel({ host: 'localhost', port, tls: true, insecure: true });
  const get = await visit(server.port, lax.host);
  assert.is(get.status, 200);
  assert.is(get.body.toString(), 'tls=true GET ');
  // A body takes the upload pool; Expect: 100-continue takes node:https: both speak TLS too.
  const post = await visit(server.port, lax.host, { method: 'POST', body: 'hello' });
  assert.is(post.body.toString(), 'tls=true POST hello');
  const expect = await visit(server.port, lax.host, { method: 'POST', headers: { expect: '100-continue', 'content-length': '2' }, body: 'hi' });
  assert.is(expect.body.toString(), 'tls=true POST hi');
});

test('localhost reaches a service listening on ::1 only (http and tcp)', async () => {
  const v6 = http.createServer((req, res) => res.end(`v6 ${req.socket.localAddress}`));
  const port = await listen(v6, '::1');
  const t = await tunnel({ host: 'localhost', port });
  const r = await visit(server.port, t.host);
  assert.is(r.status, 200);
  assert.is(r.body.toString(), 'v6 ::1');

  const echo = net.createServer((s) => s.pipe(s));
  const echoPort = await listen(echo, '::1');
  const tcp = await tunnel({ host: 'localhost', port: echoPort }, 'tcp');
  const publicPort = Number(/:(\d+)$/.exec(tcp.url)![1]);
  const got = await withDeadline(
    new Promise<string>((resolve, reject) => {
      const s = net.connect(publicPort, '127.0.0.1', () => s.write('ping over v6'));
      let data = '';
      s.on('data', (d) => {
        data += d;
        if (data.length >= 'ping over v6'.length) {
          s.destroy();
          resolve(data);
        }
      });
      s.on('error', reject);
    }),
    30_000,
    'tcp echo',
  );
  assert.is(got, 'ping over v6');
  // And a service on 127.0.0.1 still answers first.
  const v4 = http.createServer((req, res) => res.end('v4'));
  const t4 = await tunnel({ host: 'localhost', port: await listen(v4, '127.0.0.1') });
  assert.is((await visit(server.port, t4.host)).body.toString(), 'v4');
});

test('a dev server that checks Host: refused as is, served with rewrite or a given value', async () => {
  let port = 0;
  const picky = http.createServer((req, res) => {
    const ok = req.headers.host === `localhost:${port}` || req.headers.host === 'app.test';
    res.writeHead(ok ? 200 : 403).end(`host=${req.headers.host}`);
  });
  port = await listen(picky, '127.0.0.1');
  const plain = await tunnel({ host: 'localhost', port });
  const refused = await visit(server.port, plain.host);
  assert.is(refused.status, 403);
  assert.is(refused.body.toString(), `host=${plain.host}`);
  const rewrite = await tunnel({ host: 'localhost', port, hostHeader: 'rewrite' });
  const ok = await visit(server.port, rewrite.host, { method: 'POST', body: 'x' });
  assert.is(ok.status, 200);
  assert.is(ok.body.toString(), `host=localhost:${port}`);
  const given = await tunnel({ host: 'localhost', port, hostHeader: 'app.test' });
  assert.is((await visit(server.port, given.host)).body.toString(), 'host=app.test');
});

test.run();
