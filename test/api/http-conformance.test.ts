import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { exchange, parseResponses, sequence } from '../tunnel/raw-http.js';

// HTTP/1.1 at the API's edge, with raw sockets: HEAD, Connection: close, bodies over the
// limit, Content-Length framing this uWS build cannot carry.

let server: TestServer;

test.before(async () => {
  server = await startServer({ workers: 1 });
});

test.after(async () => {
  await server?.stop();
});

const get = (path: string, extra = ''): string => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${server.adminKey}\r\n${extra}\r\n`;

test('HEAD gets the GET\'s status and headers and no body; the connection stays usable', async () => {
  const g = await exchange(server.port, get('/api/v1/me'));
  const headReq = `HEAD /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${server.adminKey}\r\n\r\n`;
  // HEAD then GET on one connection: a body after the HEAD's head would be read as the next response.
  const x = await sequence(server.port, [{ bytes: headReq, head: true }, { bytes: get('/healthz') }]);
  assert.is(x.responses.length, 2, x.text);
  const [h, next] = x.responses;
  assert.is(h!.status, g.responses[0]!.status);
  assert.is(h!.header('content-length')[0], String(g.responses[0]!.body.length));
  assert.equal(h!.header('content-type'), g.responses[0]!.header('content-type'));
  assert.is(next!.status, 200);
  assert.is(next!.body.toString(), '{"status":"ok"}');
  // What Node's client saw as HPE_INVALID_CONSTANT.
  const r = await withDeadline(
    new Promise<number>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: server.port, method: 'HEAD', path: '/api/v1/keys', headers: { authorization: `Bearer ${server.adminKey}` }, agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.on('error', reject);
      req.end();
    }),
    10_000,
    'HEAD /keys',
  );
  assert.is(r, 200);
});

test('Connection: close is answered with Connection: close, then the server closes', async () => {
  const x = await exchange(server.port, get('/healthz', 'Connection: close\r\n'), { untilClose: true });
  assert.is(x.responses.length, 1, x.text);
  assert.equal(x.responses[0]!.header('connection'), ['close']);
  assert.ok(x.closed, 'server closed the connection');
  // An error answer too, and once only.
  const e = await exchange(server.port, 'GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n', { untilClose: true });
  assert.is(e.responses[0]!.status, 401);
  assert.equal(e.responses[0]!.header('connection'), ['close']);
});

test('a 2 MB body is refused with 413 that fetch and node:http both read', async () => {
  const body = Buffer.alloc(2_000_000, 0x61);
  const f = await withDeadline(fetch(`${server.url}/api/v1/keys`, { method: 'POST', body, headers: { 'content-type': 'application/json', authorization: `Bearer ${server.adminKey}` } }), 15_000, 'fetch 2 MB');
  assert.is(f.status, 413);
  assert.is(f.headers.get('connection'), 'close');
  assert.is(((await f.json()) as { type: string }).type, '/problems/payload-too-large');
  // Ten times: the race this guards against (the server's close against the client's parse) was
  // lost about one time in ten.
  for (let round = 0; round < 10; round++) {
    const status = await withDeadline(
      new Promise<number>((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port: server.port, method: 'POST', path: '/api/v1/keys', headers: { 'content-type': 'application/json', 'content-length': body.length }, agent: false }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
        });
        // agent: false sends `Connection: close`; the server must still read the whole upload
        // before it closes, or the reset for the unread bytes can destroy the 413 before it is read.
        req.on('error', reject);
        req.end(body);
      }),
      15_000,
      'node:http 2 MB',
    );
    assert.is(status, 413, `round ${round}`);
  }
});

test('after a 413 the server keeps reading the body: a client still uploading sees no FIN, EPIPE or reset', async () => {
  const n = 2_000_000;
  const piece = Buffer.alloc(64 * 1024, 0x61);
  const got = await withDeadline(
    new Promise<{ text: string; error: string | null; serverEnded: boolean; sent: number }>((resolve) => {
      let buf = Buffer.alloc(0);
      let started = false;
      let sent = 0;
      let error: string | null = null;
      let serverEnded = false;
      const s = net.connect(server.port, '127.0.0.1', () => s.write(`POST /api/v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${n}\r\n\r\n`));
      const done = (): void => {
        s.destroy();
        resolve({ text: buf.toString('latin1'), error, serverEnded, sent });
      };
      // The body goes out piece by piece after the answer arrived, as a slow uploader's would.
      const pump = (): void => {
        if (error || serverEnded) return done();
        if (sent >= n) return done();
        const k = Math.min(piece.length, n - sent);
        sent += k;
        s.write(piece.subarray(0, k), () => setTimeout(pump, 2));
      };
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        if (!started && parseResponses(buf).length === 1) {
          started = true;
          pump();
        }
      });
      // A FIN once the whole body is in is the close the 413 announced: only one before counts.
      s.on('end', () => (serverEnded = sent < n));
      s.on('error', (e: NodeJS.ErrnoException) => {
        error = e.code ?? e.message;
        done();
      });
    }),
    30_000,
    '413 then body',
  );
  assert.is(got.error, null, got.text.slice(0, 300));
  assert.not.ok(got.serverEnded, `the server ended the connection after ${got.sent} body bytes`);
  assert.is(got.sent, n);
  const r = parseResponses(Buffer.from(got.text, 'latin1'));
  assert.is(r.length, 1, got.text.slice(0, 300));
  assert.is(r[0]!.status, 413);
  assert.equal(r[0]!.header('connection'), ['close']);
});

test('a client that said Connection: close still reads the 413 while it uploads, and the close comes after its last byte', async () => {
  // uWS closes at once when a response to such a request ends; with the body still arriving,
  // the reset for the unread bytes could destroy the 413 before the client read it (EPIPE).
  const n = 1_000_000;
  const piece = Buffer.alloc(64 * 1024, 0x61);
  const got = await withDeadline(
    new Promise<{ text: string; error: string | null; endedAt: number | null; sent: number }>((resolve) => {
      let buf = Buffer.alloc(0);
      let started = false;
      let sent = 0;
      let error: string | null = null;
      let endedAt: number | null = null;
      const s = net.connect(server.port, '127.0.0.1', () => s.write(`POST /api/v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${n}\r\n\r\n`));
      const finish = (): void => {
        s.destroy();
        resolve({ text: buf.toString('latin1'), error, endedAt, sent });
      };
      // Piece by piece once the answer's head arrived; then wait for the server's close.
      const pump = (): void => {
        if (error || endedAt !== null) return finish();
        if (sent >= n) return;
        const k = Math.min(piece.length, n - sent);
        sent += k;
        s.write(piece.subarray(0, k), () => setTimeout(pump, 2));
      };
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        if (!started && buf.includes('\r\n\r\n')) {
          started = true;
          pump();
        }
      });
      s.on('end', () => {
        endedAt = sent;
        finish();
      });
      s.on('error', (e: NodeJS.ErrnoException) => {
        error = e.code ?? e.message;
        finish();
      });
    }),
    30_000,
    '413 then body, Connection: close',
  );
  assert.is(got.error, null, got.text.slice(0, 300));
  assert.is(got.endedAt, n, `the server closed after ${got.endedAt} of ${n} body bytes`);
  const r = parseResponses(Buffer.from(got.text, 'latin1'));
  assert.is(r.length, 1, got.text.slice(0, 300));
  assert.is(r[0]!.status, 413);
  assert.equal(r[0]!.header('connection'), ['close']);
  assert.is((JSON.parse(r[0]!.body.toString()) as { type: string }).type, '/problems/payload-too-large');
});

test('Content-Length of 10 digits or more: 413 with a detail, not a bare reset', async () => {
  for (const cl of ['1000000000', '0000000005', '99999999999999999999']) {
    const x = await exchange(server.port, `POST /api/v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${cl}\r\n\r\n{}`);
    assert.is(x.responses.length, 1, `${cl}: ${x.text.slice(0, 200)}`);
    const r = x.responses[0]!;
    assert.is(r.status, 413);
    assert.is(r.header('content-type')[0], 'application/problem+json');
    const p = JSON.parse(r.body.toString()) as { type: string; detail: string };
    assert.is(p.type, '/problems/payload-too-large');
    // Past 2^64 llhttp itself stops at the header: the detail names it, not the digits.
    assert.ok(cl.length === 20 ? /Content-Length/.test(p.detail) : p.detail.includes(cl), p.detail);
  }
  // 999,999,999 is still within what uWS frames: the ordinary limit answers (its end waits for
  // the body, which never comes here).
  const ok = await exchange(server.port, `POST /api/v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 999999999\r\n\r\n`, { until: (t) => t.includes('payload-too-large') });
  assert.ok(ok.text.startsWith('HTTP/1.1 413 '), ok.text.slice(0, 100));
});

test('malformed or conflicting Content-Length: 400', async () => {
  for (const lines of ['Content-Length: 3\r\nContent-Length: 5\r\n', 'Content-Length: -1\r\n', 'Content-Length: 3x\r\n']) {
    const x = await exchange(server.port, `POST /api/v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\n${lines}\r\nabcde`);
    assert.is(x.responses.length, 1, `${JSON.stringify(lines)}: ${x.text.slice(0, 200)}`);
    assert.is(x.responses[0]!.status, 400, lines);
    assert.is((JSON.parse(x.responses[0]!.body.toString()) as { type: string }).type, '/problems/bad-request');
  }
});

test('a chunk extension in an API body is ignored, and the request pipelined after it is answered on its own', async () => {
  const body = JSON.stringify({ name: 'chunk-ext' });
  const post =
    `POST /api/v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${server.adminKey}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n` +
    `${body.length.toString(16)};a=b\r\n${body}\r\n0\r\n\r\n`;
  const x = await exchange(server.port, post + get('/healthz'), { expect: 2 });
  assert.is(x.responses.length, 2, x.text);
  assert.is(x.responses[0]!.status, 201, x.text);
  assert.is((JSON.parse(x.responses[0]!.body.toString()) as { info: { name: string } }).info.name, 'chunk-ext');
  assert.is(x.responses[1]!.status, 200);
  assert.is(x.responses[1]!.body.toString(), '{"status":"ok"}');
});

test.run();
