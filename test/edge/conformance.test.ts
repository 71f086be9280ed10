import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { exchange, parseResponses, rawOrigin, type RawOrigin } from '../tunnel/raw-http.js';
import { sleep } from '../tunnel/helpers.js';

// HTTP/1.x at the public front, byte by byte: what a visitor writes, what it reads back, and
// exactly what reaches the origin behind a tunnel (a `net` origin recording every byte). The
// cases are those a real edge must keep: HTTP/1.0, pipelining answered later, chunk extensions,
// absolute-form targets, Expect: 100-continue, and the malformed heads it must refuse at once
// with nothing reaching the origin. Two shards: the local path and the mesh are both crossed.

let server: TestServer;
let origin: RawOrigin;
let client: TunnelClient;
let host = '';

test.before(async () => {
  server = await startServer();
  origin = await rawOrigin((req) => {
    if (req.target === '/slow') return 'HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow';
    // No length the edge could keep: the client drops the origin's chunked framing (hop-by-hop).
    if (req.target === '/unframed') return 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n';
    const body = `${req.target} ${(/\r\ntransfer-encoding:[^\r]*chunked/i.test(req.head) ? dechunk(req.body) : req.body).toString('latin1')}`;
    const head = `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body, 'latin1')}\r\n\r\n`;
    return req.head.startsWith('HEAD ') ? head : head + body;
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

/** The payload of a chunked body as the origin received it (sizes, extensions and trailers dropped). */
function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let p = 0;
  for (;;) {
    const le = raw.indexOf('\r\n', p);
    const size = parseInt(raw.subarray(p, le).toString('latin1'), 16);
    if (!(size > 0)) return Buffer.concat(parts);
    parts.push(raw.subarray(le + 2, le + 2 + size));
    p = le + 2 + size + 2;
  }
}

const targets = (): string[] => origin.seen.map((r) => r.target);
const originHead = (target: string): string => origin.seen.find((r) => r.target === target)?.head ?? '';

test('HTTP/1.0 with Host is served through the tunnel, then the connection closes', async () => {
  const x = await exchange(server.port, `GET /ten HTTP/1.0\r\nHost: ${host}\r\n\r\n`, { untilClose: true });
  assert.is(x.responses.length, 1, x.text);
  assert.is(x.responses[0]!.status, 200);
  assert.is(x.responses[0]!.body.toString(), '/ten ');
  assert.ok(x.closed, 'a 1.0 request without keep-alive ends the connection');
  assert.ok(targets().includes('/ten'));
});

test('HTTP/1.0 keep-alive: Connection: keep-alive back, and a second request on the connection', async () => {
  const one = `GET /ka1 HTTP/1.0\r\nHost: ${host}\r\nConnection: keep-alive\r\n\r\n`;
  const two = `GET /ka2 HTTP/1.0\r\nHost: ${host}\r\nConnection: keep-alive\r\n\r\n`;
  const x = await exchange(server.port, one + two, { expect: 2 });
  assert.is(x.responses.length, 2, x.text);
  assert.equal(x.responses.map((r) => r.body.toString()), ['/ka1 ', '/ka2 ']);
  assert.equal(x.responses[0]!.header('connection'), ['keep-alive']);
});

test('HTTP/1.0 without Host goes to the API host rule, never a tunnel', async () => {
  const x = await exchange(server.port, 'GET /healthz HTTP/1.0\r\n\r\n', { untilClose: true });
  assert.is(x.responses[0]?.status, 200, x.text);
  assert.is(x.responses[0]!.body.toString(), '{"status":"ok"}');
});

test('an unframed response to an HTTP/1.0 visitor is close-delimited; to HTTP/1.1 it is chunked', async () => {
  const ten = await exchange(server.port, `GET /unframed HTTP/1.0\r\nHost: ${host}\r\n\r\n`, { untilClose: true });
  assert.ok(ten.text.startsWith('HTTP/1.1 200'), ten.text);
  assert.not.ok(/transfer-encoding/i.test(ten.text), ten.text);
  assert.ok(ten.text.endsWith('\r\n\r\nhello'), ten.text);
  assert.ok(ten.closed);
  const eleven = await exchange(server.port, `GET /unframed HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
  assert.equal(eleven.responses[0]?.header('transfer-encoding'), ['chunked'], eleven.text);
  assert.is(eleven.responses[0]!.body.toString(), 'hello');
});

test('pipelined requests are all answered, in order, though each answer comes later', async () => {
  const reqs = ['/p1', '/p2', '/p3'].map((p) => `GET ${p} HTTP/1.1\r\nHost: ${host}\r\n\r\n`).join('');
  const x = await exchange(server.port, reqs, { expect: 3 });
  assert.equal(x.responses.map((r) => r.body.toString()), ['/p1 ', '/p2 ', '/p3 '], x.text);
  assert.not.ok(x.closed);
});

test('a chunk extension is ignored: the body arrives whole and the pipelined request stays a request', async () => {
  const post = `POST /ext HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n6;name="q s"\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n`;
  const after = `GET /after-ext HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
  const x = await exchange(server.port, post + after, { expect: 2 });
  assert.equal(x.responses.map((r) => r.body.toString()), ['/ext hello world', '/after-ext '], x.text);
});

test('an absolute-form target is routed by its authority, and its Host reaches the origin', async () => {
  const x = await exchange(server.port, `GET http://${host}/abs?q=1 HTTP/1.1\r\nHost: other.example\r\n\r\n`);
  assert.is(x.responses[0]?.status, 200, x.text);
  assert.is(x.responses[0]!.body.toString(), '/abs?q=1 ');
  const head = originHead('/abs?q=1');
  assert.match(head, new RegExp(`\\r\\nHost: ${host.replace(/[.]/g, '\\.')}\\r\\n`, 'i'));
  assert.not.match(head, /other\.example/);
});

test('Expect: 100-continue: the visitor gets 100 Continue, sends the body, and gets the answer', async () => {
  const text = await withDeadline(
    new Promise<string>((resolve, reject) => {
      let buf = '';
      const s = net.connect(server.port, '127.0.0.1', () => s.write(`POST /expect HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n`));
      s.on('data', (d: Buffer) => {
        buf += d.toString('latin1');
        if (buf.startsWith('HTTP/1.1 100') && buf.indexOf('\r\n\r\n') === buf.length - 4) s.write('body');
        if (/HTTP\/1\.1 200[\s\S]*\/expect body$/.test(buf)) {
          s.destroy();
          resolve(buf);
        }
      });
      s.on('error', reject);
    }),
    5_000,
    'expect 100-continue',
  );
  assert.ok(text.startsWith('HTTP/1.1 100 Continue\r\n'), text);
});

test('Connection: close is answered with Connection: close, and the connection closes', async () => {
  const x = await exchange(server.port, `GET /close HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`, { untilClose: true });
  assert.equal(x.responses[0]?.header('connection'), ['close'], x.text);
  assert.ok(x.closed);
});

test('no server fingerprint on tunnel answers and refusals', async () => {
  const ok = await exchange(server.port, `GET /fp HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
  const refused = await exchange(server.port, `GET /fp HTTP/1.1\r\nHost: ${host}\r\nX-A : b\r\n\r\n`);
  for (const x of [ok, refused]) {
    assert.is(x.responses[0]!.header('server').length, 0, x.text);
    assert.is(x.responses[0]!.header('x-powered-by').length, 0);
  }
});

/** Malformed requests: each refused with its status at once, then a close; the smuggled request after it never reaches the origin. */
const MALFORMED: [string, number, (tag: string) => string][] = [
  ['CL and TE together', 400, (t) => `POST /${t} HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`],
  ['two different Content-Length', 400, (t) => `POST /${t} HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc`],
  ['a list Content-Length', 400, (t) => `POST /${t} HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 3, 3\r\n\r\nabc`],
  ['TE other than chunked last', 400, (t) => `POST /${t} HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n`],
  ['obs-fold', 400, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\r\nX-A: 1\r\n folded\r\n\r\n`],
  ['whitespace before the colon', 400, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\r\nX-A : 1\r\n\r\n`],
  ['a bare LF in the head', 400, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\nX-A: 1\r\n\r\n`],
  ['a bare CR in a value', 400, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\r\nX-A: 1\r2\r\n\r\n`],
  ['NUL in a value', 400, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\r\nX-A: a\0b\r\n\r\n`],
  ['a bad header name', 400, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\r\nX(A): 1\r\n\r\n`],
  ['a bad chunk size', 400, (t) => `POST /${t} HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n`],
  ['a space after the chunk size', 400, (t) => `POST /${t} HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n0\r\n\r\n`],
  ['no CRLF after chunk data', 400, (t) => `POST /${t} HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n`],
  ['HTTP/1.1 without Host', 400, (t) => `GET /${t} HTTP/1.1\r\n\r\n`],
  ['two Host headers', 400, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\r\nHost: ${host}\r\n\r\n`],
  ['a request line over 8 KiB', 414, (t) => `GET /${t}?${'a'.repeat(9 * 1024)} HTTP/1.1\r\nHost: ${host}\r\n\r\n`],
  ['a head over 32 KiB', 431, (t) => `GET /${t} HTTP/1.1\r\nHost: ${host}\r\n${Array.from({ length: 40 }, (_, i) => `X-${i}: ${'b'.repeat(1000)}\r\n`).join('')}\r\n`],
];

test('malformed requests: the right 4xx at once, then a close, and nothing reaches the origin', async () => {
  for (const [what, status, make] of MALFORMED) {
    const tag = `bad-${what.replace(/[^a-z0-9]+/gi, '-')}`;
    const smuggled = `GET /smuggled-${tag} HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
    const x = await exchange(server.port, make(tag) + smuggled, { untilClose: true, ms: 4_000 });
    assert.is(x.responses[0]?.status, status, `${what}: ${x.text.slice(0, 200)}`);
    assert.is(x.responses.length, 1, `${what}: one answer only`);
    assert.equal(x.responses[0]!.header('connection'), ['close'], what);
    assert.ok(x.closed, `${what}: the connection closes`);
  }
  await sleep(200);
  const seen = targets();
  for (const [what] of MALFORMED) {
    const tag = `bad-${what.replace(/[^a-z0-9]+/gi, '-')}`;
    assert.not.ok(seen.some((t) => t.includes(tag)), `${what} reached the origin: ${seen.join(' ')}`);
  }
});

test('CONNECT is refused with 501; an unknown method with 400', async () => {
  const c = await exchange(server.port, `CONNECT ${host} HTTP/1.1\r\nHost: ${host}\r\n\r\n`, { untilClose: true, ms: 4_000 });
  assert.is(c.responses[0]?.status, 501, c.text);
  const u = await exchange(server.port, `FROB / HTTP/1.1\r\nHost: ${host}\r\n\r\n`, { untilClose: true, ms: 4_000 });
  assert.is(u.responses[0]?.status, 400, u.text);
});

test('HEAD: the origin length, no body, and the connection goes on', async () => {
  const x = await exchange(server.port, `HEAD /head HTTP/1.1\r\nHost: ${host}\r\n\r\nGET /after-head HTTP/1.1\r\nHost: ${host}\r\n\r\n`, { expect: 2, noBody: [true, false] });
  assert.is(x.responses.length, 2, x.text);
  assert.equal(x.responses[0]!.header('content-length'), ['6']);
  assert.is(x.responses[1]!.body.toString(), '/after-head ');
});

test('a request split into one-byte writes is parsed the same', async () => {
  const bytes = Buffer.from(`POST /split HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n`);
  const text = await withDeadline(
    new Promise<string>((resolve, reject) => {
      let buf = Buffer.alloc(0);
      const s = net.connect(server.port, '127.0.0.1', async () => {
        for (const b of bytes) {
          s.write(Buffer.from([b]));
          await new Promise((r) => setImmediate(r));
        }
      });
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        if (parseResponses(buf).length >= 1) {
          s.destroy();
          resolve(buf.toString('latin1'));
        }
      });
      s.on('error', reject);
    }),
    8_000,
    'split request',
  );
  assert.match(text, /\/split abc$/);
});

test('a malformed control handshake is refused with 400 before any key check or upgrade', async () => {
  const base = `Host: 127.0.0.1:${server.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nAuthorization: Bearer ${server.adminKey}\r\n`;
  const cases: [string, string, RegExp][] = [
    ['POST', `${base}Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 0\r\n`, /GET with Upgrade: websocket/],
    ['GET', `${base}Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n`, /version 13/],
    ['GET', `${base}Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short\r\n`, /16 bytes in base64/],
  ];
  for (const [method, headers, detail] of cases) {
    const x = await exchange(server.port, `${method} /tunnel/v1/connect HTTP/1.1\r\n${headers}\r\n`, { untilClose: true, ms: 4_000 });
    assert.is(x.responses[0]?.status, 400, x.text);
    assert.match(JSON.parse(x.responses[0]!.body.toString()).detail, detail);
    assert.not.match(x.text, /101 Switching/);
  }
});

test.run();
