import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { createHash } from 'node:crypto';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient, TunnelRefused, type AccessRules } from '../../src/client/tunnel-client.js';
import { F } from '../../src/protocol/frames.js';
import { GUESS_LIMIT } from '../../src/edge/access.js';
import { listen, once, sleep, type Local } from './helpers.js';
import { rawPeer, refusalIn } from './raw-peer.js';
import { lanePorts } from '../helpers/ports.js';

// Access rules on tunnels (burrow http|tcp --basic-auth --allow-ip --deny-ip --expires), from
// both sides: an admitted visitor reaches the local service; a refused one gets 401 (with the
// Basic challenge) or 403 problem+json, or its TCP connection closed, and neither the client
// nor the local service ever hears of it. Visitors come from three loopback addresses
// (127.0.0.1, 127.0.0.2 and ::1) on a dual-stack listener; two shards, so visitors land on
// the tunnel's shard and on the other one.

type From = '127.0.0.1' | '127.0.0.2' | '127.0.0.3' | '::1';

let server: TestServer;
let web: Local;
let echo: Local;
/** What reached the local services. */
const seen: { host: string; authorization: string | undefined; from: string }[] = [];
let upgrades = 0;
const upgraded: net.Socket[] = [];
let tcpConnections = 0;
const clients: TunnelClient[] = [];
const RANGE = { min: lanePorts(51).min, span: 50 };

function start(type: 'http' | 'tcp', access: AccessRules, id?: string): TunnelClient & { requests: number; connections: number } {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type, local: { host: '127.0.0.1', port: type === 'http' ? web.port : echo.port }, id, access });
  const counted = Object.assign(c, { requests: 0, connections: 0 });
  c.on('request', () => counted.requests++);
  c.on('connection', () => counted.connections++);
  clients.push(c);
  return counted;
}

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One public request from a given loopback source address. */
function visitFrom(from: From, id: string, headers: Record<string, string> = {}): Promise<Reply> {
  return withDeadline(
    new Promise<Reply>((resolve, reject) => {
      const req = http.request({
        host: from === '::1' ? '::1' : '127.0.0.1',
        localAddress: from,
        port: server.port,
        path: '/hello',
        headers: { host: `${id}.localhost`, ...headers },
        agent: false,
      });
      req.on('error', reject);
      req.on('response', (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      });
      req.end();
    }),
    15_000,
    `GET ${id} from ${from}`,
  );
}

const basic = (cred: string): Record<string, string> => ({ authorization: `Basic ${Buffer.from(cred).toString('base64')}` });

/** Sends `data` over a TCP connection from `from` and reads until the peer closes. */
function tcpFrom(from: From, port: number, data: string): Promise<{ received: string; reset: boolean }> {
  return withDeadline(
    new Promise((resolve) => {
      const s = net.connect({ host: from === '::1' ? '::1' : '127.0.0.1', port, localAddress: from, allowHalfOpen: false });
      let received = '';
      let reset = false;
      s.on('connect', () => s.write(data));
      s.on('data', (c: Buffer) => {
        received += c.toString();
        if (received.length >= data.length) s.end();
      });
      s.on('error', () => (reset = true));
      s.on('close', () => resolve({ received, reset }));
    }),
    15_000,
    `tcp from ${from}`,
  );
}

test.before(async () => {
  server = await startServer({ args: ['--host', '::', '--tcp-port-range', `${RANGE.min}-${RANGE.min + RANGE.span}`] });
  const h = http.createServer((req, res) => {
    seen.push({ host: String(req.headers['x-forwarded-host'] ?? req.headers.host), authorization: req.headers.authorization, from: String(req.headers['x-forwarded-for']) });
    res.end('hello from local');
  });
  h.on('upgrade', (req, sock: net.Socket) => {
    upgrades++;
    upgraded.push(sock);
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    sock.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  });
  web = await listen(h);
  echo = await listen(
    net.createServer((s) => {
      tcpConnections++;
      s.pipe(s);
    }),
  );
});

test.after(async () => {
  await withDeadline(Promise.all(clients.map((c) => c.stop())), 10_000, 'clients stop').catch(() => undefined);
  for (const s of upgraded) s.destroy();
  await web?.close();
  await echo?.close();
  await server?.stop();
});

const reached = (id: string): number => seen.filter((s) => s.host.startsWith(`${id}.`)).length;

test('basic auth: the right credentials reach the local service (without the password); missing or wrong ones get 401 + challenge and reach nothing', async () => {
  const c = start('http', { basicAuth: ['alice:s3cret-pw', 'bob:hunter2:with:colons'] }, 'acc-basic');
  await withDeadline(c.start(), 15_000, 'start');
  const refused: [string, Record<string, string>][] = [
    ['no credentials', {}],
    ['wrong password', basic('alice:wrong')],
    ['wrong user', basic('mallory:s3cret-pw')],
    ['user only', basic('alice')],
    ['another scheme', { authorization: 'Bearer s3cret-pw' }],
    ['not base64', { authorization: 'Basic !!!' }],
    ['empty basic', { authorization: 'Basic ' }],
  ];
  for (const [what, headers] of refused) {
    // Twice each: the kernel puts connections on either shard, the tunnel lives on one.
    for (let i = 0; i < 2; i++) {
      const r = await visitFrom('127.0.0.1', 'acc-basic', headers);
      assert.is(r.status, 401, what);
      assert.is(r.headers['www-authenticate'], 'Basic realm="burrow"', what);
      assert.is(r.headers['content-type'], 'application/problem+json', what);
      assert.is(JSON.parse(r.body).status, 401);
      assert.not.match(r.body, /s3cret|hunter2/);
    }
  }
  assert.is(reached('acc-basic'), 0, 'a refused visitor reached the local service');
  assert.is(c.requests, 0, 'the client saw a refused visitor');

  for (const cred of ['alice:s3cret-pw', 'bob:hunter2:with:colons']) {
    const r = await visitFrom('127.0.0.1', 'acc-basic', basic(cred));
    assert.is(r.status, 200, cred);
    assert.is(r.body, 'hello from local');
  }
  assert.is(reached('acc-basic'), 2);
  // The password was the tunnel's, not the local service's: it is not passed on.
  for (const s of seen.filter((x) => x.host.startsWith('acc-basic.'))) assert.is(s.authorization, undefined);
  await eventually(() => c.requests === 2, 10_000, 'the client counted the two admitted requests');
});

test('guessing passwords: past the limit an address gets 429 with Retry-After, and still reaches nothing', async () => {
  const c = start('http', { basicAuth: ['alice:s3cret-pw'] }, 'acc-guess');
  await withDeadline(c.start(), 15_000, 'start');
  // The limit is per shard and the kernel spreads connections over both: at most 2 × GUESS_LIMIT
  // wrong answers before every shard this address reaches refuses it.
  let limited: Reply | null = null;
  for (let i = 0; i <= 2 * GUESS_LIMIT && !limited; i++) {
    const r = await visitFrom('127.0.0.3', 'acc-guess', basic(`alice:guess-${i}`));
    if (r.status === 429) limited = r;
    else assert.is(r.status, 401, `guess ${i}`);
  }
  assert.ok(limited, `no 429 after ${2 * GUESS_LIMIT + 1} wrong passwords`);
  assert.match(String(limited!.headers['retry-after']), /^\d+$/);
  assert.is(limited!.headers['content-type'], 'application/problem+json');
  assert.is(reached('acc-guess'), 0);
  assert.is(c.requests, 0);
  // Another address is not affected.
  assert.is((await visitFrom('127.0.0.1', 'acc-guess', basic('alice:s3cret-pw'))).status, 200);
});

test('IP rules on http: allow list, deny list, deny wins over allow; IPv4 and IPv6 visitors', async () => {
  const cases: { id: string; access: AccessRules; allowed: From[]; refused: From[] }[] = [
    { id: 'acc-allow', access: { allowIp: ['127.0.0.1/32'] }, allowed: ['127.0.0.1'], refused: ['127.0.0.2', '::1'] },
    { id: 'acc-deny', access: { denyIp: ['::1'] }, allowed: ['127.0.0.1', '127.0.0.2'], refused: ['::1'] },
    { id: 'acc-both', access: { allowIp: ['127.0.0.0/8', '::1/128'], denyIp: ['127.0.0.2'] }, allowed: ['127.0.0.1', '::1'], refused: ['127.0.0.2'] },
    { id: 'acc-v6only', access: { allowIp: ['::1/128'] }, allowed: ['::1'], refused: ['127.0.0.1', '127.0.0.2'] },
    // An IPv4 rule matches IPv4 visitors whether the socket shows them as v4 or v4-mapped v6.
    { id: 'acc-mapped', access: { denyIp: ['::ffff:127.0.0.2/128'] }, allowed: ['127.0.0.1', '::1'], refused: ['127.0.0.2'] },
  ];
  for (const k of cases) {
    const c = start('http', k.access, k.id);
    await withDeadline(c.start(), 15_000, `start ${k.id}`);
    for (const from of k.refused) {
      for (let i = 0; i < 2; i++) {
        const r = await visitFrom(from, k.id);
        assert.is(r.status, 403, `${k.id} from ${from}`);
        assert.is(r.headers['content-type'], 'application/problem+json');
        const p = JSON.parse(r.body);
        assert.is(p.status, 403);
        assert.match(p.detail, /may not reach this tunnel/);
        assert.is(r.headers['www-authenticate'], undefined);
      }
    }
    assert.is(reached(k.id), 0, `${k.id}: a refused visitor reached the local service`);
    for (const from of k.allowed) {
      const r = await visitFrom(from, k.id);
      assert.is(r.status, 200, `${k.id} from ${from}`);
    }
    assert.is(reached(k.id), k.allowed.length, k.id);
    await eventually(() => c.requests === k.allowed.length, 10_000, `${k.id}: client request events`);
    await sleep(100);
    assert.is(c.requests, k.allowed.length, `${k.id}: the client saw a refused visitor`);
  }
});

test('IP rules and basic auth together: the address is checked first (403), then the password (401)', async () => {
  const c = start('http', { basicAuth: ['alice:s3cret-pw'], denyIp: ['127.0.0.2'] }, 'acc-mixed');
  await withDeadline(c.start(), 15_000, 'start');
  assert.is((await visitFrom('127.0.0.2', 'acc-mixed', basic('alice:s3cret-pw'))).status, 403);
  assert.is((await visitFrom('127.0.0.1', 'acc-mixed')).status, 401);
  assert.is((await visitFrom('::1', 'acc-mixed', basic('alice:s3cret-pw'))).status, 200);
  assert.is(reached('acc-mixed'), 1);
});

test('tcp: an admitted address is relayed; a refused connection is closed at once and never reaches the client', async () => {
  const c = start('tcp', { allowIp: ['127.0.0.0/8'], denyIp: ['127.0.0.2'] });
  const { url } = await withDeadline(c.start(), 15_000, 'start');
  const port = Number(url.split(':').pop());
  const before = tcpConnections;
  for (const from of ['127.0.0.2', '::1'] as From[]) {
    const r = await tcpFrom(from, port, 'knock knock');
    assert.is(r.received, '', `${from} got bytes back`);
  }
  await sleep(200);
  assert.is(tcpConnections, before, 'a refused connection reached the local service');
  assert.is(c.connections, 0, 'the client saw a refused connection');
  const ok = await tcpFrom('127.0.0.1', port, 'knock knock');
  assert.is(ok.received, 'knock knock');
  assert.is(tcpConnections, before + 1);
  await eventually(() => c.connections === 1, 10_000, 'the client counted the admitted connection');
});

/** A raw WebSocket upgrade request; resolves with the response head. */
function upgradeFrom(id: string, headers: string[] = []): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve, reject) => {
      const s = net.connect(server.port, '127.0.0.1', () =>
        s.write(
          [`GET /ws HTTP/1.1`, `Host: ${id}.localhost`, 'Upgrade: websocket', 'Connection: Upgrade', 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Version: 13', ...headers, '', ''].join('\r\n'),
        ),
      );
      let data = '';
      s.on('data', (c: Buffer) => {
        data += c.toString('latin1');
        const end = data.indexOf('\r\n\r\n');
        if (end >= 0) {
          s.destroy();
          resolve(data.slice(0, end));
        }
      });
      s.on('error', reject);
    }),
    15_000,
    `upgrade ${id}`,
  );
}

test('WebSocket upgrade: refused without credentials before anything reaches the tunnel; admitted with them', async () => {
  const c = start('http', { basicAuth: ['alice:s3cret-pw'] }, 'acc-ws');
  await withDeadline(c.start(), 15_000, 'start');
  for (let i = 0; i < 2; i++) {
    const head = await upgradeFrom('acc-ws');
    assert.match(head, /^HTTP\/1\.1 401 /);
    assert.match(head, /\r\nwww-authenticate: Basic realm="burrow"/i);
    const wrong = await upgradeFrom('acc-ws', [`Authorization: ${basic('alice:nope').authorization}`]);
    assert.match(wrong, /^HTTP\/1\.1 401 /);
  }
  assert.is(upgrades, 0, 'a refused upgrade reached the local service');
  assert.is(c.requests, 0);
  const ok = await upgradeFrom('acc-ws', [`Authorization: ${basic('alice:s3cret-pw').authorization}`]);
  assert.match(ok, /^HTTP\/1\.1 101 /);
  assert.is(upgrades, 1);
});

test('the API shows each tunnel\'s access rules and never a credential', async () => {
  const expiresAt = Date.now() + 3_600_000;
  const c = start('http', { basicAuth: ['alice:s3cret-pw'], allowIp: ['10.0.0.0/8', '::1'], denyIp: ['10.1.0.0/16'], expiresAt }, 'acc-api');
  await withDeadline(c.start(), 15_000, 'start');
  const plain = start('http', {}, 'acc-plain');
  await withDeadline(plain.start(), 15_000, 'start plain');
  const list = await api(server, 'GET', '/tunnels', { key: server.adminKey });
  assert.is(list.status, 200);
  assert.not.match(list.text, /s3cret|alice/);
  const byId = new Map((list.body as { id: string; access: unknown }[]).map((t) => [t.id, t.access]));
  const want = { basic_auth: true, allow_ip: ['10.0.0.0/8', '::1'], deny_ip: ['10.1.0.0/16'], expires_at: new Date(expiresAt).toISOString() };
  assert.equal(byId.get('acc-api'), want);
  assert.equal(byId.get('acc-plain'), { basic_auth: false, allow_ip: [], deny_ip: [], expires_at: null });
  const one = await api(server, 'GET', '/tunnels/acc-api', { key: server.adminKey });
  assert.is(one.status, 200);
  assert.equal(one.body.access, want);
  assert.not.match(one.text, /s3cret|alice/);
  // Nor in burrowd's logs.
  assert.not.match(server.stderr() + server.stdout(), /s3cret/);
});

test('expiry: the edge ends the tunnel then, telling the client it expired (permanent); the id is gone', async () => {
  const c = start('http', { expiresAt: Date.now() + 2_500 }, 'acc-expiry');
  await withDeadline(c.start(), 15_000, 'start');
  assert.is((await visitFrom('127.0.0.1', 'acc-expiry')).status, 200);
  const [closed] = await once<[{ permanent: boolean; code: string; reason: string }]>(c, 'closed', 20_000);
  assert.is(closed.code, 'expired');
  assert.ok(closed.permanent);
  assert.match(closed.reason, /^the tunnel expired at \d{4}-/);
  await eventually(async () => (await visitFrom('127.0.0.1', 'acc-expiry')).status === 404, 10_000, 'the id is gone');
  const one = await api(server, 'GET', '/tunnels/acc-expiry', { key: server.adminKey });
  assert.is(one.status, 404);
});

test('rules the edge cannot apply are refused for good: basic auth on tcp, an expiry past or over a year away', async () => {
  const cases: [string, 'http' | 'tcp', AccessRules, RegExp][] = [
    ['basic auth on tcp', 'tcp', { basicAuth: ['alice:s3cret-pw'] }, /basic auth applies to http tunnels only/],
    ['expired already', 'http', { expiresAt: Date.now() - 1000 }, /is in the past/],
    ['over a year', 'http', { expiresAt: Date.now() + 400 * 86_400_000 }, /more than a year away/],
  ];
  for (const [what, type, access, message] of cases) {
    const err = await withDeadline(start(type, access).start(), 15_000, what).then(
      () => null,
      (e: unknown) => e,
    );
    assert.instance(err, TunnelRefused, what);
    assert.is((err as TunnelRefused).code, 'bad-request', what);
    assert.ok((err as TunnelRefused).permanent, what);
    assert.match((err as TunnelRefused).message, message);
  }
});

test('malformed access fields in an Open end that control connection, naming the field and not the password', async () => {
  const bad: [unknown, RegExp][] = [
    [{ allowIp: ['10.0.0.0/40'] }, /open\.access\.allowIp\[0\] must be an IPv4 or IPv6 address or CIDR/],
    [{ basicAuth: ['no-colon-s3cret'] }, /open\.access\.basicAuth\[0\]: a credential must be USER:PASS/],
    [{ basicAuth: Array.from({ length: 17 }, (_, i) => `u${i}:s3cret`) }, /open\.access\.basicAuth must be a list of at most 16/],
    [{ expiresAt: 'tomorrow' }, /open\.access\.expiresAt must be an integer/],
  ];
  for (const [access, message] of bad) {
    const peer = await rawPeer(server.url, server.adminKey);
    peer.send([F.Open, 1, { type: 'http', access } as never]);
    const fatal = refusalIn(await peer.waitFor((f) => f[0] === F.Fatal, 10_000, 'Fatal'));
    assert.is(fatal.code, 'bad-request');
    assert.match(fatal.message, message);
    assert.not.match(fatal.message, /s3cret/);
    await withDeadline(peer.closed, 10_000, 'close');
  }
  assert.not.match(server.stderr(), /s3cret/);
});

test.run();
