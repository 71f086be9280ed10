import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, decodeFrame, encodeFrame, type Frame } from '../../src/protocol/frames.js';
import { exchange, rawOrigin, sequence, type RawOrigin } from './raw-http.js';
import { sleep } from './helpers.js';

// The public edge of HTTP tunnels against hostile or unusual peers, with raw sockets on both
// ends: a visitor writing exact bytes, a `net` origin (behind the real client library)
// recording exactly what reaches it, and a raw control client forging response heads.
// Two shards: visitors land on either, so both the local and the mesh path are crossed.

let server: TestServer;
let origin: RawOrigin;
let client: TunnelClient;
let host = '';

test.before(async () => {
  server = await startServer();
  origin = await rawOrigin((req) => {
    const head = req.head.startsWith('HEAD ');
    switch (req.target) {
      case '/204':
        return 'HTTP/1.1 204 No Content\r\nX-Kind: empty\r\n\r\n';
      case '/304':
        return 'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n';
      case '/chunked':
        return `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n${head ? '' : '5\r\nhello\r\n0\r\n\r\n'}`;
      case '/ws-cookies':
        // A WebSocket origin that tosses cookies at the base domain and at another tunnel.
        return 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n'
          + 'Set-Cookie: base=1; Domain=localhost; Path=/\r\nSet-Cookie: dotted=2; domain=.localhost\r\nSet-Cookie: other=3; Path=/; Domain=victim.localhost\r\n'
          + `Set-Cookie: own=4; Domain=${host.split(':')[0]}\r\n\r\n`;
      case '/h2c':
        // As an h2c server does: it switches when asked, then reads HTTP/2 from the visitor.
        return /\r\nupgrade:[^\r]*h2c/i.test(req.head) ? 'HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n' : 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain';
      case '/len':
        return `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n${head ? '' : 'hello'}`;
      default:
        return 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok';
    }
  });
  client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: origin.port } });
  const r = await withDeadline(client.start(), 10_000, 'tunnel start');
  host = `${r.id}.localhost:${server.port}`;
});

test.after(async () => {
  await client?.stop();
  await origin?.close();
  await server?.stop();
});

const req = (method: string, path: string, extra = ''): string => `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`;
const seenTargets = (): string[] => origin.seen.map((r) => r.target);

test('204, 304 and HEAD carry no body and no 2^63 Content-Length; the connection goes on', async () => {
  const x = await sequence(server.port, [
    { bytes: req('GET', '/204') },
    { bytes: req('GET', '/304') },
    { bytes: req('HEAD', '/chunked'), head: true },
    { bytes: req('HEAD', '/len'), head: true },
    { bytes: req('GET', '/len') },
  ]);
  assert.not.ok(x.text.includes('9223372036854775808'), x.text);
  const [r204, r304, headChunked, headLen, getLen] = x.responses;
  assert.is(r204!.status, 204);
  assert.equal(r204!.header('content-length'), []);
  assert.equal(r204!.header('x-kind'), ['empty']);
  assert.is(r304!.status, 304);
  assert.equal(r304!.header('etag'), ['"v1"']);
  assert.is(headChunked!.status, 200);
  assert.equal(headChunked!.header('content-length'), []);
  assert.equal(headLen!.header('content-length'), ['5']);
  assert.is(getLen!.body.toString(), 'hello');
});

test('Connection: close is answered with Connection: close and the connection closes', async () => {
  for (const path of ['/len', '/chunked', '/204']) {
    const x = await exchange(server.port, req('GET', path, 'Connection: close\r\n'), { untilClose: true });
    assert.is(x.responses.length, 1, `${path}: ${x.text}`);
    assert.equal(x.responses[0]!.header('connection'), ['close'], path);
    assert.ok(x.closed, `${path}: closed`);
  }
  // Unknown tunnel (404 from the edge itself) too.
  const n = await exchange(server.port, `GET / HTTP/1.1\r\nHost: nosuch.localhost\r\nConnection: close\r\n\r\n`, { untilClose: true });
  assert.is(n.responses[0]!.status, 404);
  assert.equal(n.responses[0]!.header('connection'), ['close']);
});

test('Connection naming Host or Content-Length never strips them; X-Real-IP comes from the socket', async () => {
  const before = origin.seen.length;
  const x = await exchange(server.port, `POST /named HTTP/1.1\r\nHost: ${host}\r\nConnection: host, content-length, x-drop\r\nX-Drop: 1\r\nX-Real-IP: 6.6.6.6\r\nContent-Length: 3\r\n\r\nabc`);
  assert.is(x.responses[0]!.status, 200, x.text);
  const got = origin.seen.slice(before);
  assert.is(got.length, 1);
  const lines = got[0]!.head.split('\r\n').map((l) => l.toLowerCase());
  assert.ok(lines.includes(`host: ${host}`), got[0]!.head);
  assert.ok(lines.includes('content-length: 3'), got[0]!.head);
  assert.is(got[0]!.body.toString(), 'abc');
  assert.not.ok(lines.some((l) => l.startsWith('x-drop:')), got[0]!.head);
  assert.equal(lines.filter((l) => l.startsWith('x-real-ip:')), ['x-real-ip: 127.0.0.1']);
  assert.not.ok(got[0]!.head.includes('6.6.6.6'));
});

test('Set-Cookie on a WebSocket 101 follows the host-only rule: no Domain of the base domain or another tunnel', async () => {
  const upgrade = `GET /ws-cookies HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`;
  const x = await exchange(server.port, upgrade, { until: (t) => t.includes('\r\n\r\n') });
  assert.match(x.text, /^HTTP\/1\.1 101 /, x.text);
  const head = x.text.slice(0, x.text.indexOf('\r\n\r\n'));
  const cookies = head.split('\r\n').filter((l) => /^set-cookie:/i.test(l)).map((l) => l.slice(l.indexOf(':') + 1).trim());
  assert.equal(cookies, ['base=1; Path=/', 'dotted=2', 'other=3; Path=/', `own=4; Domain=${host.split(':')[0]}`]);
  assert.match(head, /\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=/i, 'the rest of the 101 goes out as sent');
});

test('Upgrade: h2c never reaches the origin: the request is plain HTTP/1.1 and the connection goes on', async () => {
  const before = origin.seen.length;
  const h2c = 'Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n';
  const x = await sequence(server.port, [{ bytes: req('GET', '/h2c', h2c) }, { bytes: req('GET', '/len') }]);
  assert.is(x.responses[0]!.status, 200, x.text);
  assert.is(x.responses[0]!.body.toString(), 'plain');
  assert.is(x.responses[1]!.status, 200, 'the connection serves the next request');
  const got = origin.seen.slice(before);
  const lines = got[0]!.head.split('\r\n').map((l) => l.toLowerCase());
  assert.not.ok(lines.some((l) => /^(upgrade|http2-settings|connection):/.test(l)), got[0]!.head);
  // Pipelined behind it, in the same packet, the next request is served too.
  const piped = await exchange(server.port, req('GET', '/h2c', h2c) + req('GET', '/len'), { expect: 2 });
  assert.equal(piped.responses.map((r) => r.body.toString()), ['plain', 'hello'], piped.text);
  // Offered beside a WebSocket: the WebSocket alone is passed on.
  const both = await exchange(server.port, req('GET', '/h2c', 'Connection: Upgrade\r\nUpgrade: websocket, h2c\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n'));
  assert.is(both.responses[0]?.status, 200, both.text);
  const head = origin.seen[origin.seen.length - 1]!.head.toLowerCase();
  assert.match(head, /\r\nupgrade: websocket\r\n/, head);
  assert.not.match(head, /upgrade:[^\r]*h2c/, head);
});

test('client-address headers a CDN would set (True-Client-IP, CF-Connecting-IP, ...) never reach the origin from a visitor', async () => {
  const before = origin.seen.length;
  const forged = ['True-Client-IP', 'CF-Connecting-IP', 'Fastly-Client-IP', 'X-Client-IP', 'X-Cluster-Client-IP', 'X-Forwarded-Port', 'X-Forwarded-Ssl'];
  const x = await exchange(server.port, req('GET', '/forged', forged.map((h) => `${h}: 6.6.6.6\r\n`).join('')));
  assert.is(x.responses[0]!.status, 200, x.text);
  const head = origin.seen.slice(before)[0]!.head;
  assert.not.ok(head.includes('6.6.6.6'), head);
  assert.match(head.toLowerCase(), /\r\nx-real-ip: 127\.0\.0\.1\r\n/, head);
});

test('Content-Length past 2^53: 413 problem+json, nothing reaches the origin; 10 digits stream on', async () => {
  const before = origin.seen.length;
  const x = await exchange(server.port, req('POST', '/huge', 'Content-Length: 99999999999999999\r\n') + 'abc');
  assert.is(x.responses[0]?.status, 413, x.text.slice(0, 300));
  assert.is((JSON.parse(x.responses[0]!.body.toString()) as { type: string }).type, '/problems/payload-too-large');
  await sleep(200);
  assert.is(origin.seen.length, before);
  // A tunnel streams bodies: a gigabyte upload is no reason to refuse (the old front's limit).
  const big = await exchange(server.port, req('POST', '/gigabyte', 'Content-Length: 1000000000\r\n') + 'abc', { ms: 1_500 });
  assert.is(big.responses.length, 0, big.text.slice(0, 300));
});

test('smuggling attempts never reach the origin as two requests', async () => {
  const smuggled = (n: string): string => `GET /smuggled-${n} HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
  // Duplicate Content-Length with different values: 400 from the edge.
  const dup = await exchange(server.port, req('POST', '/dup', 'Content-Length: 3\r\nContent-Length: 40\r\n') + 'abc' + smuggled('dup'));
  assert.is(dup.responses[0]?.status, 400, dup.text.slice(0, 300));
  assert.is(dup.responses.length, 1);
  // Content-Length and Transfer-Encoding together: uWS drops the connection before any callback.
  const clte = await exchange(server.port, req('POST', '/clte', 'Content-Length: 4\r\nTransfer-Encoding: chunked\r\n') + '0\r\n\r\n' + smuggled('clte'));
  assert.not.ok(/^HTTP\/1\.1 2/m.test(clte.text), clte.text);
  // A bad chunk size.
  const bad = await exchange(server.port, req('POST', '/badchunk', 'Transfer-Encoding: chunked\r\n') + 'zz\r\nabc\r\n0\r\n\r\n' + smuggled('badchunk'));
  assert.not.ok(/^HTTP\/1\.1 2/m.test(bad.text), bad.text);
  // obs-fold (RFC 9112 §5.2): never a request.
  const fold = await exchange(server.port, `GET /fold HTTP/1.1\r\nHost: ${host}\r\nX-A: 1\r\n folded\r\n\r\n${smuggled('fold')}`, { ms: 3_000 });
  assert.not.ok(/^HTTP\/1\.1 2/m.test(fold.text), fold.text);
  await sleep(300);
  const targets = seenTargets();
  for (const t of ['/dup', '/clte', '/fold', '/smuggled-dup', '/smuggled-clte', '/smuggled-badchunk', '/smuggled-fold']) {
    assert.not.ok(targets.includes(t), `${t} reached the origin: ${targets.join(' ')}`);
  }
});

// ---- a raw control client forging response heads ----

interface RawPeer {
  ws: WsClient;
  next(): Promise<Frame>;
  send(f: Frame): void;
}

async function rawPeer(): Promise<RawPeer> {
  const ws = await WsClient.connect(`${server.url}/tunnel/v1/connect`, { authorization: `Bearer ${server.adminKey}` }, MAX_FRAME_BYTES, 5_000);
  const queue: Frame[] = [];
  const waiters: ((f: Frame) => void)[] = [];
  ws.on('message', (m) => {
    const f = decodeFrame(m);
    if (f[0] === F.Ping) return;
    const w = waiters.shift();
    if (w) w(f);
    else queue.push(f);
  });
  // The connection's end reads as a Fatal frame, so a wait for a frame never outlives it.
  ws.on('close', () => {
    const end: Frame = [F.Fatal, { code: 'internal', message: 'connection closed', permanent: false }];
    for (const w of waiters.splice(0)) w(end);
    queue.push(end);
  });
  return {
    ws,
    send: (f) => ws.send(encodeFrame(f)),
    next: () => withDeadline(queue.length ? Promise.resolve(queue.shift()!) : new Promise<Frame>((r) => waiters.push(r)), 5_000, 'next frame'),
  };
}

/** Waits for the frame of `type` on stream `sid`, skipping others (bounded). */
async function frameOf(p: RawPeer, type: number, sid?: number): Promise<Frame> {
  for (let i = 0; i < 50; i++) {
    const f = await p.next();
    if (f[0] === type && (sid === undefined || f[1] === sid)) return f;
    if (f[0] === F.Fatal) throw new Error(`the connection ended (${JSON.stringify(f[1])}) before a frame of type ${type}`);
  }
  throw new Error(`no frame of type ${type}`);
}

/** A raw peer past Hello with one HTTP tunnel `<prefix>-<random>` open. */
async function peerWithTunnel(prefix: string): Promise<{ p: RawPeer; id: string }> {
  const p = await rawPeer();
  p.send([F.Hello, { v: PROTOCOL_VERSION, agent: prefix }]);
  await frameOf(p, F.Welcome);
  const id = `${prefix}-${randomBytes(3).toString('hex')}`;
  p.send([F.Open, 1, { type: 'http', id }]);
  await frameOf(p, F.Opened);
  return { p, id };
}

test('a client answer with a bare LF, NUL, a bad name or a bad status: 502 to the visitor, nothing forged, stream reset', async () => {
  // Protocol 2: the client relays the local service's bytes and the edge parses them again
  // (llhttp, strict). A head it refuses is a 502; it never reaches the visitor as bytes.
  const forgeries: string[] = [
    'HTTP/1.1 200 OK\r\nX-Ok: a\nSet-Cookie: evil=1\r\n\r\n',
    'HTTP/1.1 200 OK\r\nX-Ok: a\rSet-Cookie: evil=1\r\n\r\n',
    'HTTP/1.1 200 OK\r\nX-Ok: a\0evil\r\n\r\n',
    'HTTP/1.1 200 OK\r\nBad Name: evil\r\n\r\n',
    'HTTP/1.1 200 OK\r\n: evil\r\n\r\n',
    'HTTP/1.1 200 OK\r\nX-A: 1\r\n folded: evil\r\n\r\n',
    'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n',
    'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n',
    'HTTP/1.1 1000 X\r\nX-Evil: evil\r\n\r\n',
    'HTTP/1.1 99 X\r\nX-Evil: evil\r\n\r\n',
    'HTTP/1.1 101 Switching Protocols\r\nX-Evil: evil\r\n\r\n',
    'SSH-2.0-evil\r\n\r\n',
  ];
  for (const forged of forgeries) {
    const { p, id } = await peerWithTunnel('forge');
    const visit = exchange(server.port, `GET /forge HTTP/1.1\r\nHost: ${id}.localhost\r\n\r\n`);
    const open = await frameOf(p, F.StreamOpen);
    const sid = open[1] as number;
    p.send([F.Data, sid, Buffer.from(forged, 'latin1')]);
    // No End: a stream the client ended is over for both sides and needs no Reset.
    p.send([F.Data, sid, Buffer.from('evil body')]);
    const x = await visit;
    const what = JSON.stringify(forged);
    assert.is(x.responses.length, 1, `${what}: ${x.text}`);
    assert.is(x.responses[0]!.status, 502, what);
    assert.equal(x.responses[0]!.header('content-type'), ['application/problem+json'], what);
    const problem = JSON.parse(x.responses[0]!.body.toString()) as { type: string; detail: string };
    assert.is(problem.type, '/problems/bad-gateway');
    assert.ok(/tunnel client broke the protocol|tunnel client went away/.test(problem.detail), problem.detail);
    // Only one response, and no forged header line.
    assert.not.ok(/(^|\n)set-cookie:/im.test(x.text), `${what}: ${x.text}`);
    assert.not.ok(/x-evil/i.test(x.text), `${what}: ${x.text}`);
    assert.is(x.text.split('HTTP/1.1').length, 2, x.text);
    assert.not.ok(x.text.includes('evil body'), what);
    const ending = await frameOf(p, F.Reset, sid).catch(() => null);
    if (ending) assert.is(ending[2], 'protocol', what);
    p.ws.close();
  }
});

test('a second answer smuggled after a complete one never reaches the visitor', async () => {
  const { p, id } = await peerWithTunnel('smuggle');
  const visit = exchange(server.port, `GET /one HTTP/1.1\r\nHost: ${id}.localhost\r\n\r\nGET /two HTTP/1.1\r\nHost: ${id}.localhost\r\n\r\n`, { expect: 2, ms: 3_000 });
  const sid = (await frameOf(p, F.StreamOpen))[1] as number;
  p.send([F.Data, sid, Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\noneHTTP/1.1 200 OK\r\nSet-Cookie: evil=1\r\nContent-Length: 4\r\n\r\nevil')]);
  const x = await visit;
  assert.is(x.responses[0]?.status, 200, x.text);
  assert.is(x.responses[0]!.body.toString(), 'one');
  assert.not.ok(/set-cookie|evil/i.test(x.text), x.text);
  assert.is((await frameOf(p, F.Reset, sid))[2], 'protocol');
  p.ws.close();
});

test('a bare LF in a WebSocket 101: 502 to the visitor, nothing forged', async () => {
  const { p, id } = await peerWithTunnel('forge');
  {
    const upgrade = `GET /ws HTTP/1.1\r\nHost: ${id}.localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat\r\n\r\n`;
    const visit = exchange(server.port, upgrade);
    const sid = (await frameOf(p, F.StreamOpen))[1] as number;
    p.send([F.Data, sid, Buffer.from('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: chat\nSet-Cookie: evil=1\r\n\r\n')]);
    const x = await visit;
    assert.is(x.responses[0]?.status, 502, x.text);
    assert.not.ok(/(^|\n)set-cookie:/im.test(x.text), x.text);
    const ending = await frameOf(p, F.Reset, sid).catch(() => null);
    if (ending) assert.is(ending[2], 'protocol');
  }
  p.ws.close();
});

test('an interim 103 is not relayed; obs-text in a header value is allowed', async () => {
  const { p, id } = await peerWithTunnel('fine');
  const visit = exchange(server.port, `GET /fine HTTP/1.1\r\nHost: ${id}.localhost\r\n\r\n`);
  const sid = (await frameOf(p, F.StreamOpen))[1] as number;
  p.send([F.Data, sid, Buffer.from('HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n')]);
  p.send([F.Data, sid, Buffer.from('HTTP/1.1 200 OK\r\nX-Latin: caf\u00e9\r\nContent-Length: 2\r\n\r\nok', 'latin1')]);
  p.send([F.End, sid]);
  const x = await visit;
  assert.is(x.responses.length, 1, x.text);
  assert.is(x.responses[0]!.status, 200);
  assert.is(x.responses[0]!.body.toString(), 'ok');
  p.ws.close();
});

test.run();
