import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { createHash } from 'node:crypto';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { h2Get, listen, visit, type Local } from '../tunnel/helpers.js';
import { parseExposition, sampleNames, valueOf, type Family } from './exposition.js';
import { echoClient, startEcho, unaryCall } from '../helpers/grpc-echo.js';
import { lanePorts } from '../helpers/ports.js';
import { exchange } from '../tunnel/raw-http.js';

// GET /metrics after known traffic through real tunnels (HTTP and TCP, two shards): exact
// counter values, who may read them on the main port, the open --metrics-addr listener, the
// exposition format, and the Grafana dashboard's queries against what the server exports.

let server: TestServer;
let web: Local;
let echo: Local;
let metricsPort: number;
let tcpPort: number;
const clients: TunnelClient[] = [];
/** The local service's upgraded sockets: http.Server.close waits for them. */
const upgraded = new Set<net.Socket>();
const TCP_MIN = lanePorts(21).min;
const DASHBOARD = fileURLToPath(new URL('../../../docs/grafana-dashboard.json', import.meta.url));

async function scrapeOpen(path = '/metrics', method = 'GET'): Promise<Response> {
  return withDeadline(fetch(`http://127.0.0.1:${metricsPort}${path}`, { method }), 10_000, `${method} ${path} on --metrics-addr`);
}

async function scrape(): Promise<Map<string, Family>> {
  const r = await scrapeOpen();
  assert.is(r.status, 200);
  return parseExposition(await r.text());
}

/** TCP: writes `data`, half-closes, reads until the peer closes. */
function tcpRoundTrip(port: number, data: Buffer): Promise<Buffer> {
  return withDeadline(
    new Promise<Buffer>((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true });
      const chunks: Buffer[] = [];
      s.on('data', (c: Buffer) => chunks.push(c));
      s.on('end', () => resolve(Buffer.concat(chunks)));
      s.on('error', reject);
      s.end(data);
    }),
    15_000,
    'tcp round trip',
  );
}

test.before(async () => {
  server = await startServer({ args: ['--metrics-addr', '127.0.0.1:0', '--tcp-port-range', `${TCP_MIN}-${TCP_MIN + 20}`] });
  const m = /metrics on http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(server.stdout());
  assert.ok(m, `the start-up line names the metrics address: ${server.stdout()}`);
  metricsPort = Number(m[1]);
  web = await listen(
    http.createServer((req, res) => {
      req.resume().on('end', () => {
        if (req.url === '/ok') res.end('hello');
        else if (req.url === '/moved') res.writeHead(301, { location: '/ok' }).end();
        else if (req.url === '/fail') res.writeHead(500).end('boom');
        else res.writeHead(404).end('nope');
      });
    }),
  );
  // WebSocket upgrades: a bare 101 (RFC 6455 accept), then the socket stays open until closed.
  web.server.on('upgrade', (req: http.IncomingMessage, sock: net.Socket) => {
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    sock.on('error', () => undefined);
    upgraded.add(sock.once('close', () => upgraded.delete(sock)));
    sock.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  });
  echo = await listen(net.createServer({ allowHalfOpen: true }, (s) => s.pipe(s)));
  const h = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: web.port }, id: 'metered' });
  const t = new TunnelClient({ server: server.url, token: server.adminKey, type: 'tcp', local: { host: '127.0.0.1', port: echo.port } });
  clients.push(h, t);
  const [, tcp] = await withDeadline(Promise.all([h.start(), t.start()]), 15_000, 'tunnels start');
  tcpPort = Number(new URL(tcp.url).port);
});

test.after(async () => {
  for (const c of clients) await c.stop().catch(() => undefined);
  for (const s of upgraded) s.destroy();
  await web?.close();
  await echo?.close();
  await server?.stop();
});

test('counters after known traffic: requests by status class, bytes both ways, a TCP connection, failed auth', async () => {
  const before = await scrape();
  for (const name of ['burrow_visitor_requests_total', 'burrow_tunnel_bytes_total', 'burrow_auth_failures_total']) {
    assert.is(valueOf(before, name), 0, `${name} starts at 0`);
  }
  const host = `metered.localhost:${server.port}`;
  for (let i = 0; i < 3; i++) assert.is((await visit(server.port, host, { path: '/ok' })).status, 200);
  assert.is((await visit(server.port, host, { path: '/moved' })).status, 301);
  assert.is((await visit(server.port, host, { path: '/missing' })).status, 404);
  assert.is((await visit(server.port, host, { path: '/gone' })).status, 404);
  assert.is((await visit(server.port, host, { path: '/fail', method: 'POST', body: '0123456789' })).status, 500);
  // Refused by the edge itself: no tunnel by that name (a 4xx, but no tunnel bytes).
  assert.is((await visit(server.port, `nobody.localhost:${server.port}`, { path: '/' })).status, 404);
  assert.equal((await tcpRoundTrip(tcpPort, Buffer.from('7 bytes'))).toString(), '7 bytes');
  // Two failed authentications: no key at all, and a well-formed key that does not exist.
  assert.is((await api(server, 'GET', '/api/v1/keys')).status, 401);
  assert.is((await api(server, 'GET', '/api/v1/keys', { key: 'bk_AAAAAAAAAAAA_' + 'A'.repeat(43) })).status, 401);

  const expected: [string, Record<string, string>, number][] = [
    ['burrow_visitor_requests_total', { type: 'http', code_class: '2xx' }, 3],
    ['burrow_visitor_requests_total', { type: 'http', code_class: '3xx' }, 1],
    ['burrow_visitor_requests_total', { type: 'http', code_class: '4xx' }, 3],
    ['burrow_visitor_requests_total', { type: 'http', code_class: '5xx' }, 1],
    ['burrow_visitor_requests_total', { type: 'http', code_class: '1xx' }, 0],
    ['burrow_visitor_requests_total', { type: 'tcp', code_class: 'none' }, 1],
    // in: the POST body and the TCP bytes; out: 3 × "hello", 2 × "nope", "boom" and the echo.
    ['burrow_tunnel_bytes_total', { direction: 'in' }, 10 + 7],
    ['burrow_tunnel_bytes_total', { direction: 'out' }, 3 * 5 + 2 * 4 + 4 + 7],
    ['burrow_auth_failures_total', {}, 2],
    ['burrow_tunnels', { type: 'http' }, 1],
    ['burrow_tunnels', { type: 'tcp' }, 1],
    // the two tunnels' connections, and the http tunnel's lane on the other shard (it had visitors)
    ['burrow_control_connections', {}, 3],
    ['burrow_shard_restarts_total', {}, 0],
    ['burrow_access_refusals_total', { rule: 'basic_auth' }, 0],
    ['burrow_access_refusals_total', { rule: 'ip' }, 0],
  ];
  const show = (f: Map<string, Family>) => expected.map(([n, l, v]) => `${n}${JSON.stringify(l)} = ${valueOf(f, n, l)} (want ${v})`).join('\n');
  // Shards report every 250 ms and bytes travel with the session counters: the totals arrive,
  // and since counters only grow, a value past the expected one would never match.
  let last = before;
  await eventually(
    async () => {
      last = await scrape();
      return expected.every(([n, l, v]) => valueOf(last, n, l) === v);
    },
    10_000,
    'exact counters',
  ).catch((err: Error) => assert.unreachable(`${err.message}\n${show(last)}`));

  // Flushes of the session counters are timed (one a second while sessions are live).
  await eventually(async () => valueOf(await scrape(), 'burrow_stats_flush_seconds_count') >= 1, 10_000, 'a timed flush');
  const m = await scrape();
  assert.ok(valueOf(m, 'burrow_stats_flush_seconds_sum') >= 0);
  // Process metrics: process-wide CPU and RSS, and every shard's heap.
  assert.ok(valueOf(m, 'burrow_process_cpu_seconds_total') > 0, 'process CPU');
  assert.ok(valueOf(m, 'burrow_process_resident_memory_bytes') > 10_000_000, 'process RSS');
  assert.ok(valueOf(m, 'burrow_nodejs_heap_size_used_bytes') > 0, "main thread's heap");
  for (const shard of ['0', '1']) assert.ok(valueOf(m, 'burrow_shard_heap_used_bytes', { shard }) > 0, `heap of shard ${shard}`);
  assert.is(m.get('burrow_tunnels')!.type, 'gauge');
  assert.is(m.get('burrow_visitor_requests_total')!.type, 'counter');
  assert.is(m.get('burrow_stats_flush_seconds')!.type, 'histogram');
  for (const f of m.values()) assert.ok(f.name.startsWith('burrow_'), `${f.name} starts with burrow_`);
});

test("access rules: every refusal counted by rule, refused HTTP visitors as 4xx answers", async () => {
  const guarded = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: web.port }, id: 'guarded', access: { basicAuth: ['me:secret'] } });
  const fenced = new TunnelClient({ server: server.url, token: server.adminKey, type: 'tcp', local: { host: '127.0.0.1', port: echo.port }, access: { denyIp: ['127.0.0.0/8'] } });
  clients.push(guarded, fenced);
  const [, tcp] = await withDeadline(Promise.all([guarded.start(), fenced.start()]), 15_000, 'guarded tunnels start');
  const before = await scrape();
  const host = `guarded.localhost:${server.port}`;
  const basic = (cred: string) => ({ authorization: `Basic ${Buffer.from(cred).toString('base64')}` });
  assert.is((await visit(server.port, host, { path: '/ok' })).status, 401);
  assert.is((await visit(server.port, host, { path: '/ok', headers: basic('me:wrong') })).status, 401);
  assert.is((await visit(server.port, host, { path: '/ok', headers: basic('me:secret') })).status, 200);
  // A refused TCP connection is closed at once: nothing comes back.
  assert.is((await tcpRoundTrip(Number(new URL(tcp.url).port), Buffer.from('x')).catch(() => Buffer.alloc(0))).length, 0);

  const delta = (m: Map<string, Family>, name: string, labels: Record<string, string>) => valueOf(m, name, labels) - valueOf(before, name, labels);
  const expected: [string, Record<string, string>, number][] = [
    ['burrow_access_refusals_total', { rule: 'basic_auth' }, 2],
    ['burrow_access_refusals_total', { rule: 'ip' }, 1],
    ['burrow_visitor_requests_total', { type: 'http', code_class: '4xx' }, 2],
    ['burrow_visitor_requests_total', { type: 'http', code_class: '2xx' }, 1],
    ['burrow_visitor_requests_total', { type: 'tcp', code_class: 'none' }, 0],
  ];
  let last = before;
  await eventually(
    async () => {
      last = await scrape();
      return expected.every(([n, l, v]) => delta(last, n, l) === v);
    },
    10_000,
    'refusals counted',
  ).catch((err: Error) => assert.unreachable(`${err.message}\n${expected.map(([n, l, v]) => `${n}${JSON.stringify(l)} +${delta(last, n, l)} (want +${v})`).join('\n')}`));
  await guarded.stop();
  await fenced.stop();
});

test('main port: an admin key with the management scope reads the same metrics; anyone else gets 401/403 problem+json', async () => {
  const r = await withDeadline(fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${server.adminKey}` } }), 10_000, 'GET /metrics');
  assert.is(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  const viaMain = parseExposition(await r.text());
  const viaListener = await scrape();
  assert.equal([...viaMain.keys()].sort(), [...viaListener.keys()].sort());
  assert.is(valueOf(viaMain, 'burrow_visitor_requests_total', { code_class: '2xx' }), valueOf(viaListener, 'burrow_visitor_requests_total', { code_class: '2xx' }));

  const get = async (key?: string) => {
    const res = await withDeadline(fetch(`${server.url}/metrics`, { headers: key ? { authorization: `Bearer ${key}` } : {} }), 10_000, 'GET /metrics');
    const text = await res.text();
    return { status: res.status, headers: res.headers, text, body: res.headers.get('content-type') === 'application/problem+json' ? JSON.parse(text) : null };
  };
  const none = await get();
  assert.is(none.status, 401);
  assert.is(none.headers.get('content-type'), 'application/problem+json');
  assert.is(none.headers.get('www-authenticate'), 'Bearer');
  assert.is(none.body.status, 401);
  assert.is((await get('bk_AAAAAAAAAAAA_' + 'B'.repeat(43))).status, 401);

  const admin = await createUser(server, { role: 'admin' });
  const tunnelsOnly = await get(await createKeyFor(server, admin.id, { scopes: ['tunnels'] }));
  assert.is(tunnelsOnly.status, 403);
  assert.is(tunnelsOnly.headers.get('content-type'), 'application/problem+json');
  assert.match(tunnelsOnly.body.detail, 'reading metrics needs the management scope');
  const member = await createUser(server);
  const notAdmin = await get(await createKeyFor(server, member.id, { scopes: ['tunnels', 'management'] }));
  assert.is(notAdmin.status, 403);
  assert.match(notAdmin.body.detail, 'reading metrics needs the admin role');
  assert.is((await get(await createKeyFor(server, admin.id, { scopes: ['management'] }))).status, 200);
  // Public traffic to <id>.<domain>/metrics is the tunnel's, not ours.
  assert.is((await visit(server.port, `metered.localhost:${server.port}`, { path: '/metrics' })).body.toString(), 'nope');

  const post = await withDeadline(fetch(`${server.url}/metrics`, { method: 'POST', headers: { authorization: `Bearer ${server.adminKey}` } }), 10_000, 'POST /metrics');
  assert.is(post.status, 405);
  assert.is(post.headers.get('allow'), 'GET');
});

test('a WebSocket upgrade through the tunnel is a 1xx answer', async () => {
  const upgrades = (m: Map<string, Family>) => valueOf(m, 'burrow_visitor_requests_total', { type: 'http', code_class: '1xx' });
  const before = upgrades(await scrape());
  const ws = await WsClient.connect(`${server.url}/live`, { host: `metered.localhost:${server.port}` }, 1024 * 1024, 10_000);
  ws.close();
  await eventually(async () => upgrades(await scrape()) === before + 1, 10_000, 'the upgrade counted');
});

test('requests by protocol: an HTTP/1.1 request, an h2 stream and a gRPC call each under their own label', async () => {
  const echoRpc = await startEcho();
  const rpc = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: echoRpc.port, h2: true }, id: 'metered-rpc' });
  clients.push(rpc);
  await withDeadline(rpc.start(), 15_000, 'gRPC tunnel starts');
  const ok = (m: Map<string, Family>, protocol: string) => valueOf(m, 'burrow_visitor_requests_total', { type: 'http', code_class: '2xx', protocol });
  const before = await scrape();
  // Every protocol's usual classes are there from the start, at 0 or more: a fixed set of series.
  for (const protocol of ['http1', 'h2', 'grpc']) assert.ok(familyHas(before, { protocol, code_class: '5xx' }), protocol);
  const session = http2.connect(`http://127.0.0.1:${server.port}`);
  const grpcClient = echoClient(`127.0.0.1:${server.port}`, `metered-rpc.localhost:${server.port}`);
  try {
    assert.is((await visit(server.port, `metered.localhost:${server.port}`, { path: '/ok' })).status, 200);
    assert.is((await withDeadline(h2Get(session, `metered.localhost:${server.port}`, '/ok'), 10_000, 'h2 GET')).status, 200);
    assert.is((await withDeadline(unaryCall(grpcClient, Buffer.from('counted')), 10_000, 'gRPC call')).err, null);
  } finally {
    session.close();
    grpcClient.close();
    echoRpc.server.forceShutdown();
  }
  let last = before;
  await eventually(
    async () => {
      last = await scrape();
      return ['http1', 'h2', 'grpc'].every((p) => ok(last, p) === ok(before, p) + 1);
    },
    10_000,
    'one 2xx answer under each protocol',
  ).catch((err: Error) => assert.unreachable(`${err.message}: ${['http1', 'h2', 'grpc'].map((p) => `${p} ${ok(before, p)} → ${ok(last, p)}`).join(', ')}`));
  // TCP connections carry no protocol label; nothing outside the fixed set appears.
  const protocols = new Set(last.get('burrow_visitor_requests_total')!.samples.map((x) => x.labels.protocol));
  assert.equal([...protocols].sort(), [undefined, 'grpc', 'h2', 'http1'].sort());
});

/** Whether burrow_visitor_requests_total has a series with these labels (at any value). */
function familyHas(m: Map<string, Family>, labels: Record<string, string>): boolean {
  return m.get('burrow_visitor_requests_total')!.samples.some((x) => Object.entries(labels).every(([k, v]) => x.labels[k] === v));
}

test('--metrics-addr serves /metrics alone, without a key', async () => {
  const other = await scrapeOpen('/api/v1/keys');
  assert.is(other.status, 404);
  assert.is(other.headers.get('content-type'), 'application/problem+json');
  const post = await scrapeOpen('/metrics', 'POST');
  assert.is(post.status, 405);
  assert.is(post.headers.get('allow'), 'GET, HEAD');
  const head = await scrapeOpen('/metrics', 'HEAD');
  assert.is(head.status, 200);
  assert.is(await head.text(), '');
});

test('--metrics-addr answers only for its IP address, localhost and the configured names: a rebound name gets 404 and no metrics', async () => {
  const get = async (host: string) => (await exchange(metricsPort, `GET /metrics HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`, { untilClose: true })).responses[0]!;
  for (const host of ['attacker.example', `attacker.example:${metricsPort}`, `127.0.0.1.nip.io:${metricsPort}`, 'localhost.attacker.example']) {
    const r = await get(host);
    assert.is(r.status, 404, host);
    assert.equal(r.header('content-type'), ['application/problem+json'], host);
    assert.not.match(r.body.toString(), /burrow_/, host);
  }
  for (const host of [`127.0.0.1:${metricsPort}`, '127.0.0.1', `localhost:${metricsPort}`, 'LOCALHOST.', `[::1]:${metricsPort}`, '10.1.2.3:9100']) {
    const r = await get(host);
    assert.is(r.status, 200, host);
    assert.match(r.body.toString(), /burrow_/, host);
  }
});

interface Panel {
  title?: string;
  type?: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}

test('docs/grafana-dashboard.json: valid JSON whose every panel queries metrics the server exports', async () => {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { title?: string; panels?: Panel[] };
  assert.type(dashboard.title, 'string');
  const panels = (dashboard.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]).filter((p) => p.type !== 'row');
  assert.ok(panels.length >= 7, `${panels.length} panels`);
  const exported = sampleNames(await scrape());
  const used = new Set<string>();
  for (const p of panels) {
    assert.ok(p.targets && p.targets.length > 0, `panel "${p.title}" has a query`);
    for (const t of p.targets!) {
      const names = (t.expr ?? '').match(/\bburrow_[a-z0-9_]+\b/g) ?? [];
      assert.ok(names.length > 0, `panel "${p.title}": "${t.expr}" names a burrow metric`);
      for (const n of names) {
        assert.ok(exported.has(n), `panel "${p.title}": ${n} is not exported`);
        used.add(n);
      }
    }
  }
  for (const n of ['burrow_tunnels', 'burrow_visitor_requests_total', 'burrow_tunnel_bytes_total', 'burrow_control_connections', 'burrow_auth_failures_total', 'burrow_stats_flush_seconds_bucket', 'burrow_process_cpu_seconds_total', 'burrow_process_resident_memory_bytes']) {
    assert.ok(used.has(n), `the dashboard shows ${n}`);
  }
});

test.run();
