import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/fixtures.js';
import { issue, tlsFixture } from '../helpers/certs.js';
import { bulkRoute, httpsGet, MIB, MIB_SHA, type HttpsGot } from '../helpers/https-visit.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, type Local } from '../tunnel/helpers.js';

// --proxy-protocol with --tls-cert: a TCP load balancer (node:net here) writes a PROXY header,
// then passes the visitor's TLS through; burrowd reads the header, terminates TLS, and the
// address in the header is the client everywhere. Visitors are node:https clients through the
// balancer; the tunnel client connects over wss through it too.

const DOMAIN = 'tunnels.test';
const { tmp, certs, sniDir, ca, main, caPem } = tlsFixture('burrow-proxy-tls-', DOMAIN);

let server: TestServer;
let local: Local;
let balancer: net.Server;
let lbPort = 0;
let client: TunnelClient;
let tunnelId = '';
/** What the balancer writes first on its next connections (a v1 line naming this client). */
const CLIENT_IP = '203.0.113.9';

test.before(async () => {
  local = await listen(
    http.createServer((req, res) => {
      if (bulkRoute(req, res)) return;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ xff: req.headers['x-forwarded-for'], proto: req.headers['x-forwarded-proto'] }));
    }),
  );
  server = await startServer({ args: ['--proxy-protocol', '--domain', DOMAIN, '--tls-cert', main.cert, '--tls-key', main.key, '--tls-dir', sniDir] });
  let n = 0;
  balancer = net.createServer((visitor) => {
    const up = net.connect({ host: '127.0.0.1', port: server.port, localAddress: '127.0.0.2' });
    up.write(`PROXY TCP4 ${CLIENT_IP} 127.0.0.1 ${40000 + (n++ % 20000)} 443\r\n`);
    visitor.pipe(up).pipe(visitor);
    visitor.on('error', () => up.destroy());
    up.on('error', () => visitor.destroy());
    visitor.on('close', () => up.destroy());
    up.on('close', () => visitor.destroy());
  });
  await new Promise<void>((r) => balancer.listen(0, '127.0.0.1', r));
  lbPort = (balancer.address() as net.AddressInfo).port;
  client = new TunnelClient({ server: `https://127.0.0.1:${lbPort}`, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, ca: [caPem] });
  tunnelId = (await withDeadline(client.start(), 20_000, 'tunnel start over wss through the balancer')).id;
});

test.after(async () => {
  await client?.stop().catch(() => undefined);
  await server?.stop();
  balancer?.close();
  await local?.close();
  tmp.remove();
});

function get(servername: string, path: string, body?: Buffer): Promise<HttpsGot> {
  return httpsGet(lbPort, servername, path, { ca: caPem, body });
}

test('the header\'s client is the visitor and the tunnel client, over TLS terminated by burrowd; SNI still picks the certificate', async () => {
  const host = `${tunnelId}.${DOMAIN}`;
  const r = await get(host, '/who');
  assert.is(r.status, 200, r.body);
  assert.equal(JSON.parse(r.body), { xff: CLIENT_IP, proto: 'https' });
  assert.is(r.subject, DOMAIN);
  assert.is((await get('app.sni.test', '/healthz')).subject, 'sni.test');
  // The control connection came through the balancer too: its session names the same client.
  const ip = await eventually(async () => {
    const row = (await sessions()).find((x) => x.tunnel_id === tunnelId);
    if (!row) throw new Error('no session yet');
    return row.client_ip;
  }, 10_000, 'session row');
  assert.is(ip, CLIENT_IP);
});

/** Sessions, read through the balancer (the API is on the same port). */
async function sessions(): Promise<{ tunnel_id: string; client_ip: string | null }[]> {
  const r = await httpsGet(lbPort, DOMAIN, '/api/v1/sessions?all=true&limit=1000', { ca: caPem, headers: { authorization: `Bearer ${server.adminKey}` } });
  if (r.status !== 200) throw new Error(`${r.status} ${r.body}`);
  return JSON.parse(r.body);
}

test('bulk both ways at once through the front: rounds of 8 downloads and 8 uploads of 1 MiB arrive intact', async () => {
  // Behind the front, shards write to unix sockets, whose small buffers fill at once: uWS's
  // long-send path lost payloads there (keepLongSendsWhole in src/http/uws.ts), in round 0 or 1.
  const host = `${tunnelId}.${DOMAIN}`;
  for (let round = 0; round < 3; round++) await bulkRound(host);
});

async function bulkRound(host: string): Promise<void> {
  const [down, up] = await Promise.all([
    Promise.all(Array.from({ length: 8 }, () => get(host, '/mib'))),
    Promise.all(Array.from({ length: 8 }, () => get(host, '/sha', MIB))),
  ]);
  for (const [i, r] of down.entries()) {
    assert.is(r.status, 200, `download ${i}: ${r.body.slice(0, 200)}`);
    assert.is(r.sha, MIB_SHA, `download ${i} arrived altered`);
  }
  for (const [i, r] of up.entries()) {
    assert.is(r.status, 200, `upload ${i}: ${r.body.slice(0, 200)}`);
    assert.is(r.body, MIB_SHA, `upload ${i} arrived altered`);
  }
}

test('SIGHUP: new handshakes get the new certificate; the tunnel keeps serving', async () => {
  const next = issue(certs, ca, 'next', 'reloaded', [DOMAIN, `*.${DOMAIN}`, 'IP:127.0.0.1']);
  writeFileSync(`${main.cert}.new`, readFileSync(next.cert));
  writeFileSync(`${main.key}.new`, readFileSync(next.key));
  renameSync(`${main.key}.new`, main.key);
  renameSync(`${main.cert}.new`, main.cert);
  assert.ok(server.proc.kill('SIGHUP'));
  await eventually(async () => {
    const r = await get(`${tunnelId}.${DOMAIN}`, '/who');
    if (r.subject !== 'reloaded') throw new Error(`still ${r.subject}`);
    return true;
  }, 20_000, 'a handshake with the reloaded certificate');
  assert.is((await get('app.sni.test', '/healthz')).subject, 'sni.test');
});

test.run();
