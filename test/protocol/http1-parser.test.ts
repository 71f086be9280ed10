import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import '../helpers/property.js';
import {
  MAX_HEAD_BYTES,
  MAX_REQUEST_LINE_BYTES,
  RequestParser,
  ResponseParser,
  type ExecResult,
  type RequestHead,
  type ResponseHead,
} from '../../src/protocol/http1-parser.js';

// The HTTP/1.x parser of the public front (llhttp through Node's binding, plus our policy): every
// byte comes from a visitor or a hostile upstream. Each policy rule is fed as raw bytes, whole
// and byte by byte; accepted messages are checked for exactly what the sink saw; arbitrary
// requests and responses cut at arbitrary places give the same events as uncut; arbitrary bytes
// never throw.

type Ev = ['head', RequestHead | ResponseHead] | ['body', string] | ['end', string[]];

function recorder(): { events: Ev[]; sink: { head(h: RequestHead | ResponseHead): void; body(b: Buffer): void; end(t: string[]): void } } {
  const events: Ev[] = [];
  return {
    events,
    sink: {
      head: (h) => events.push(['head', h]),
      // merge consecutive pieces: how a body is cut depends on how the input was
      body: (b) => {
        const last = events[events.length - 1];
        if (last?.[0] === 'body') last[1] += b.toString('latin1');
        else events.push(['body', b.toString('latin1')]);
      },
      end: (t) => events.push(['end', [...t]]),
    },
  };
}

interface Run {
  events: Ev[];
  /** every result but 'more', in order */
  results: ExecResult[];
}

/** Feeds chunks the way a connection would: after 'paused', resume() and go on with the rest. */
function drive(p: RequestParser | ResponseParser, events: Ev[], chunks: Buffer[], beforeNext?: () => void): Run {
  const results: ExecResult[] = [];
  for (const chunk of chunks) {
    let rest = chunk;
    for (;;) {
      const r = p.execute(rest);
      if (r.kind === 'more') break;
      results.push(r);
      if (r.kind !== 'paused') return { events, results };
      assert.ok(r.consumed > 0 && r.consumed <= rest.length, 'consumed within the chunk');
      beforeNext?.();
      p.resume();
      rest = rest.subarray(r.consumed);
      if (rest.length === 0) break;
    }
  }
  return { events, results };
}

function request(bytes: string | Buffer, chunks?: number[], opts?: ConstructorParameters<typeof RequestParser>[1]): Run & { parser: RequestParser } {
  const buf = typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes;
  const { events, sink } = recorder();
  const parser = new RequestParser(sink, opts);
  const run = drive(parser, events, split(buf, chunks));
  return { ...run, parser };
}

function split(buf: Buffer, at?: number[]): Buffer[] {
  if (!at) return [buf];
  const out: Buffer[] = [];
  let from = 0;
  for (const i of [...new Set(at)].filter((i) => i > 0 && i < buf.length).sort((a, b) => a - b)) {
    out.push(buf.subarray(from, i));
    from = i;
  }
  out.push(buf.subarray(from));
  return out;
}

const kinds = (rs: ExecResult[]): string[] => rs.map((r) => r.kind);
const everyByte = (s: string | Buffer): number[] => Array.from({ length: s.length }, (_, i) => i);

function head(over: Partial<RequestHead>): RequestHead {
  return {
    method: 'GET', target: '/', authority: null, versionMinor: 1, headers: ['Host', 'x'], host: 'x', keepAlive: true,
    upgrade: false, expectContinue: false, chunked: false, contentLength: null, hasBody: false, ...over,
  };
}

test('a GET: its head exactly, then end; paused right after it', () => {
  const raw = 'GET /a/b?c=d&e HTTP/1.1\r\nHost: Example.COM:8080\r\nAccept: */*\r\nX-Empty:\r\nX-Ws: \t v  w \t\r\n\r\n';
  const { events, results, parser } = request(raw);
  assert.equal(events, [
    ['head', head({ target: '/a/b?c=d&e', host: 'Example.COM:8080', headers: ['Host', 'Example.COM:8080', 'Accept', '*/*', 'X-Empty', '', 'X-Ws', 'v  w'] })],
    ['end', []],
  ]);
  assert.equal(results, [{ kind: 'paused', consumed: raw.length }]);
  parser.close();
  const p = new RequestParser(recorder().sink);
  assert.equal(p.execute(Buffer.from(`${raw}GET`)), { kind: 'paused', consumed: raw.length });
  assert.throws(() => p.execute(Buffer.from('GET')), /resume/);
  p.resume();
  assert.equal(p.execute(Buffer.from('GET')), { kind: 'more' });
  p.close();
});

test('HTTP/1.0 with and without Host; keep-alive rules of 1.0 and 1.1', () => {
  assert.equal(request('GET / HTTP/1.0\r\n\r\n').events[0], ['head', head({ versionMinor: 0, headers: [], host: null, keepAlive: false })]);
  assert.equal(request('GET / HTTP/1.0\r\nHost: a\r\n\r\n').events[0], ['head', head({ versionMinor: 0, headers: ['Host', 'a'], host: 'a', keepAlive: false })]);
  const ka = request('GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n').events[0][1] as RequestHead;
  assert.is(ka.keepAlive, true);
  assert.is((request('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n').events[0][1] as RequestHead).keepAlive, false);
  assert.is((request('GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n').events[0][1] as RequestHead).keepAlive, true);
});

test('pipelined requests: each paused at its exact end; resume + the rest gives the next', () => {
  const a = 'POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello';
  const b = 'GET /b HTTP/1.1\r\nHost: y\r\n\r\n';
  const c = 'PUT /c HTTP/1.1\r\nHost: z\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n\r\n\r\r\n0\r\n\r\n';
  const { events, results } = request(a + b + c);
  assert.equal(results, [
    { kind: 'paused', consumed: a.length },
    { kind: 'paused', consumed: b.length },
    { kind: 'paused', consumed: c.length },
  ]);
  assert.equal(events, [
    ['head', head({ method: 'POST', target: '/a', headers: ['Host', 'x', 'Content-Length', '5'], contentLength: 5, hasBody: true })],
    ['body', 'hello'],
    ['end', []],
    ['head', head({ target: '/b', headers: ['Host', 'y'], host: 'y' })],
    ['end', []],
    ['head', head({ method: 'PUT', target: '/c', headers: ['Host', 'z', 'Transfer-Encoding', 'chunked'], host: 'z', chunked: true, hasBody: true })],
    ['body', '\r\n\r'],
    ['end', []],
  ]);
  // the same bytes one at a time: the same events
  assert.equal(request(a + b + c, everyByte(a + b + c)).events, events);
});

test('a chunked body: extensions ignored, trailers delivered, body and chunk sizes in any case', () => {
  const raw = 'POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n' +
    '5;a=b\r\nhello\r\n1;a="q s";flag\r\n \r\n0A\r\n\r\n\r\n\r\nab\r\n\r\n0\r\nT-One: 1\r\nT-Two:  two words \r\n\r\n';
  for (const at of [undefined, everyByte(raw)]) {
    const { events, results } = request(raw, at);
    assert.equal(events, [
      ['head', head({ method: 'POST', target: '/u', headers: ['Host', 'x', 'Transfer-Encoding', 'Chunked'], chunked: true, hasBody: true })],
      ['body', 'hello \r\n\r\n\r\nab\r\n'],
      ['end', ['T-One', '1', 'T-Two', 'two words']],
    ]);
    assert.equal(kinds(results), ['paused']);
  }
  assert.equal(request(raw).results, [{ kind: 'paused', consumed: raw.length }]);
});

test('a Content-Length body is handed out as views of the input (no copy)', () => {
  const input = Buffer.from('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody');
  const seen: Buffer[] = [];
  const p = new RequestParser({ head() {}, body: (b) => seen.push(b), end() {} });
  assert.equal(p.execute(input), { kind: 'paused', consumed: input.length });
  assert.is(seen.length, 1);
  assert.is(seen[0].buffer, input.buffer);
  assert.is(seen[0].toString(), 'body');
  p.close();
});

test('more than 32 header fields and trailers (Node hands them over in batches): all, in order', () => {
  const names = Array.from({ length: 75 }, (_, i) => `X-H${i}`);
  const trailers = Array.from({ length: 40 }, (_, i) => `T${i}`);
  const raw = `POST /many HTTP/1.1\r\nHost: x\r\n${names.map((n, i) => `${n}: v${i}\r\n`).join('')}Transfer-Encoding: chunked\r\n\r\n` +
    `1\r\nz\r\n0\r\n${trailers.map((n) => `${n}: t\r\n`).join('')}\r\n`;
  // Node then hands every later head over the same way (its "flushed" flag stays set)
  const next = 'GET /next HTTP/1.1\r\nHost: y\r\n\r\nPOST /last HTTP/1.1\r\nHost: z\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: 1\r\n\r\n';
  for (const at of [undefined, [40, 400, 900, 1200, 1300]]) {
    const { events, results } = request(raw + next, at);
    assert.equal(kinds(results), ['paused', 'paused', 'paused']);
    const h = events[0][1] as RequestHead;
    assert.equal(h.headers, ['Host', 'x', ...names.flatMap((n, i) => [n, `v${i}`]), 'Transfer-Encoding', 'chunked']);
    assert.is(h.target, '/many');
    assert.equal(events[2], ['end', trailers.flatMap((n) => [n, 't'])]);
    assert.equal(events.slice(3), [
      ['head', head({ target: '/next', headers: ['Host', 'y'], host: 'y' })],
      ['end', []],
      ['head', head({ method: 'POST', target: '/last', headers: ['Host', 'z', 'Transfer-Encoding', 'chunked'], host: 'z', chunked: true, hasBody: true })],
      ['end', ['T', '1']],
    ]);
  }
});

test('absolute-form: host is the authority (over a differing Host), its case kept; target is path+query', () => {
  const abs = (target: string, extra = 'Host: other\r\n', version = '1.1') => request(`GET ${target} HTTP/${version}\r\n${extra}\r\n`).events[0][1] as RequestHead;
  const a = abs('http://A.b:8/x?y');
  assert.equal([a.authority, a.host, a.target], ['A.b:8', 'A.b:8', '/x?y']);
  const b = abs('HTTPS://a.example');
  assert.equal([b.authority, b.host, b.target], ['a.example', 'a.example', '/']);
  const c = abs('http://[::1]:8080?q=1');
  assert.equal([c.authority, c.target], ['[::1]:8080', '/?q=1']);
  // HTTP/1.0 without Host: the authority still names the host
  const d = abs('http://a.b/p', '', '1.0');
  assert.equal([d.host, d.target, d.headers], ['a.b', '/p', []]);
});

test("OPTIONS * is taken; '*' with another method is not", () => {
  assert.equal((request('OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n').events[0][1] as RequestHead).target, '*');
  assert.equal(request('GET * HTTP/1.1\r\nHost: x\r\n\r\n').results[0].kind, 'error');
});

test('Expect: 100-continue is flagged; the body comes later', () => {
  const { events, sink } = recorder();
  const p = new RequestParser(sink);
  assert.equal(p.execute(Buffer.from('PUT /f HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n')), { kind: 'more' });
  assert.is((events[0][1] as RequestHead).expectContinue, true);
  assert.equal(p.execute(Buffer.from('ab')), { kind: 'more' });
  assert.equal(p.execute(Buffer.from('cGET')), { kind: 'paused', consumed: 1 });
  assert.equal(events.slice(1), [['body', 'abc'], ['end', []]]);
  p.close();
  assert.is((request('GET / HTTP/1.1\r\nHost: x\r\nExpect: something\r\n\r\n').events[0][1] as RequestHead).expectContinue, false);
});

test('an upgrade: head and end, then the bytes after the head are the new protocol', () => {
  const h = 'GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n';
  const { events, results, parser } = request(`${h}\x81\x05hello`);
  assert.equal(results, [{ kind: 'upgrade', consumed: h.length }]);
  assert.equal(events, [
    ['head', head({ target: '/ws', headers: ['Host', 'x', 'Connection', 'Upgrade', 'Upgrade', 'websocket'], upgrade: true })],
    ['end', []],
  ]);
  assert.throws(() => parser.execute(Buffer.from('x')), /upgrade/);
  parser.close();
  // Upgrade without "Connection: upgrade" is no upgrade
  assert.is((request('GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n').events[0][1] as RequestHead).upgrade, false);
});

test('an Upgrade on a request with a body is ignored: served as a plain request, the next one follows', () => {
  const a = 'POST / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nab';
  const b = 'GET /next HTTP/1.1\r\nHost: x\r\n\r\n';
  const { events, results } = request(a + b);
  assert.equal(results, [{ kind: 'paused', consumed: a.length }, { kind: 'paused', consumed: b.length }]);
  assert.is((events[0][1] as RequestHead).upgrade, false);
  assert.equal(events.slice(1, 3), [['body', 'ab'], ['end', []]]);
  assert.is((events[3][1] as RequestHead).target, '/next');
  // chunked: Node hides llhttp's errors while its upgrade flag is set; a bad chunk is still refused
  const bad = 'POST / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n';
  assert.equal(request(bad).results[0].kind, 'error');
  const good = 'POST / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n';
  assert.equal(request(good + b).results, [{ kind: 'paused', consumed: good.length }, { kind: 'paused', consumed: b.length }]);
});

test('an Upgrade that offers only another HTTP (h2c, HTTP/2.0, TLS/1.0) is no upgrade: served as plain HTTP/1.1, the next one follows', () => {
  const b = 'GET /next HTTP/1.1\r\nHost: x\r\n\r\n';
  for (const offer of ['h2c', 'H2C', 'HTTP/2.0', 'h2c, HTTP/2.0', 'TLS/1.0, HTTP/1.1']) {
    const a = `GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: ${offer}\r\nHTTP2-Settings: AAMAAABk\r\n\r\n`;
    const { events, results } = request(a + b);
    assert.equal(results, [{ kind: 'paused', consumed: a.length }, { kind: 'paused', consumed: b.length }], offer);
    assert.is((events[0][1] as RequestHead).upgrade, false, offer);
    assert.is((events[2][1] as RequestHead).target, '/next', offer);
  }
  const ws = 'GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c, websocket\r\n\r\n';
  assert.equal(request(ws).results, [{ kind: 'upgrade', consumed: ws.length }], 'a WebSocket offered beside it still upgrades');
});

test('empty lines before a request are skipped (RFC 9112 §2.2)', () => {
  const raw = '\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n';
  for (const at of [undefined, everyByte(raw)]) {
    const { events, results } = request(raw, at);
    assert.equal(events, [['head', head({})], ['end', []]]);
    assert.equal(results.length, 1);
  }
});

// [what, raw request, status]: refused before any head
const REFUSED_HEADS: [string, string, number][] = [
  ['Content-Length with Transfer-Encoding', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
  ['Transfer-Encoding then Content-Length', 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n', 400],
  ['Content-Length twice, same value', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc', 400],
  ['Content-Length twice, differing', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd', 400],
  ['Content-Length: 1, 1', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\na', 400],
  ['non-numeric Content-Length', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1a\r\n\r\na', 400],
  ['signed Content-Length', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\na', 400],
  ['empty Content-Length', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n', 400],
  ['Content-Length past 2^53', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9007199254740993\r\n\r\n', 413],
  ['Content-Length past 2^64', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n', 413],
  ['Transfer-Encoding: gzip', 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc', 400],
  ['Transfer-Encoding: chunked, chunked', 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n', 400],
  ['Transfer-Encoding twice', 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
  ['Transfer-Encoding: chunked, gzip', 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n', 400],
  ['Transfer-Encoding: gzip, chunked', 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n', 400],
  ['Transfer-Encoding in HTTP/1.0', 'POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
  ['obs-fold', 'GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n', 400],
  ['obs-fold with HTAB', 'GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n\tb\r\n\r\n', 400],
  ['a first header line starting with SP', 'GET / HTTP/1.1\r\n Host: x\r\n\r\n', 400],
  ['whitespace before the colon', 'GET / HTTP/1.1\r\nHost : x\r\n\r\n', 400],
  ['tab before the colon', 'GET / HTTP/1.1\r\nHost\t: x\r\n\r\n', 400],
  ['bare LF after the request line', 'GET / HTTP/1.1\nHost: x\r\n\r\n', 400],
  ['bare LF after a header', 'GET / HTTP/1.1\r\nHost: x\n\r\n', 400],
  ['bare LF ending the head', 'GET / HTTP/1.1\r\nHost: x\r\n\n', 400],
  ['bare CR in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n', 400],
  ['bare CR after a header', 'GET / HTTP/1.1\r\nHost: x\r\r\n\r\n', 400],
  ['NUL in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n', 400],
  ['control byte in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n', 400],
  ['DEL in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX: a\x7f\r\n\r\n', 400],
  ['ESC in a value', 'GET / HTTP/1.1\r\nHost: x\r\nX: \x1b[31m\r\n\r\n', 400],
  ['NUL in the target', 'GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['control byte in the target', 'GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['HTAB in the target', 'GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['non-ASCII in the target', 'GET /caf\xe9 HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['a header name that is not a token', 'GET / HTTP/1.1\r\nHost: x\r\nX@Y: 1\r\n\r\n', 400],
  ['a header name with a control byte', 'GET / HTTP/1.1\r\nHo\x01st: x\r\n\r\n', 400],
  ['an empty header name', 'GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n', 400],
  ['HTTP/1.1 without Host', 'GET / HTTP/1.1\r\n\r\n', 400],
  ['two Host headers', 'GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n', 400],
  ['two Host headers in 1.0', 'GET / HTTP/1.0\r\nhost: x\r\nHOST: y\r\n\r\n', 400],
  ['Host with a space', 'GET / HTTP/1.1\r\nHost: a b\r\n\r\n', 400],
  ['Host with a slash', 'GET / HTTP/1.1\r\nHost: a/b\r\n\r\n', 400],
  ['Host with userinfo', 'GET / HTTP/1.1\r\nHost: u@a\r\n\r\n', 400],
  ['Host with a control byte', 'GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n', 400],
  ['empty Host', 'GET / HTTP/1.1\r\nHost:\r\n\r\n', 400],
  ['Host with a bad port', 'GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n', 400],
  ['Host with an empty port', 'GET / HTTP/1.1\r\nHost: a:\r\n\r\n', 400],
  ['Host with letters in the port', 'GET / HTTP/1.1\r\nHost: a:8o\r\n\r\n', 400],
  ['Host with an open bracket', 'GET / HTTP/1.1\r\nHost: [::1\r\n\r\n', 400],
  ['Host with a bad escape', 'GET / HTTP/1.1\r\nHost: a%zz\r\n\r\n', 400],
  ['two spaces after the method', 'GET  / HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['two spaces before the version', 'GET /  HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['space after the version', 'GET / HTTP/1.1 \r\nHost: x\r\n\r\n', 400],
  ['space before the method', ' GET / HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['no version (HTTP/0.9)', 'GET /\r\nHost: x\r\n\r\n', 400],
  ['lower-case protocol', 'GET / http/1.1\r\nHost: x\r\n\r\n', 400],
  ['RTSP protocol', 'GET / RTSP/1.0\r\nHost: x\r\n\r\n', 400],
  ['ICE protocol', 'SOURCE / ICE/1.0\r\nHost: x\r\n\r\n', 400],
  ['malformed version', 'GET / HTTP/1.x\r\nHost: x\r\n\r\n', 400],
  ['lower-case method', 'get / HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['unknown method', 'FOO / HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['RTSP method', 'DESCRIBE / HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['relative target', 'GET foo HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['fragment in the target', 'GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['absolute-form with another scheme', 'GET ftp://a/ HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['absolute-form with userinfo', 'GET http://u@a/ HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['absolute-form without host', 'GET http:/// HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['absolute-form with a fragment', 'GET http://a/b#c HTTP/1.1\r\nHost: x\r\n\r\n', 400],
  ['absolute-form without Host in 1.1', 'GET http://a/ HTTP/1.1\r\n\r\n', 400],
  ['CONNECT', 'CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n', 501],
  ['HTTP/2.0', 'GET / HTTP/2.0\r\nHost: x\r\n\r\n', 505],
  ['HTTP/1.2', 'GET / HTTP/1.2\r\nHost: x\r\n\r\n', 505],
  ['HTTP/3.0', 'GET / HTTP/3.0\r\nHost: x\r\n\r\n', 505],
  ['HTTP/0.9 spelled out', 'GET / HTTP/0.9\r\nHost: x\r\n\r\n', 505],
  ['the HTTP/2 preface', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 505],
];

test('refused heads: the status, and no head reaches the sink (whole, and byte by byte)', () => {
  for (const [what, raw, status] of REFUSED_HEADS) {
    for (const at of [undefined, everyByte(raw)]) {
      const { events, results, parser } = request(raw, at);
      assert.is(results.length, 1, what);
      const r = results[0];
      assert.is(r.kind, 'error', what);
      if (r.kind === 'error') {
        assert.is(r.status, status, `${what}: ${r.reason}`);
        assert.ok(r.reason.length > 0);
      }
      assert.equal(events, [], what);
      // the verdict stays
      assert.equal(parser.execute(Buffer.from('GET / HTTP/1.1\r\n')), r, what);
      parser.close();
    }
  }
});

test('accepted Host values', () => {
  for (const host of ['a', 'a.b', 'A.B:8080', '127.0.0.1:1', '[::1]', '[2001:db8::7]:443', 'xn--bcher-kva.example', 'a_b-c~d', 'a%41b:0']) {
    const { events, results } = request(`GET / HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    assert.equal(results, [{ kind: 'paused', consumed: 26 + host.length }], host);
    assert.is((events[0][1] as RequestHead).host, host);
  }
});

// refused after the head was delivered: the body's framing is wrong
const REFUSED_BODIES: [string, string][] = [
  ['non-hex chunk size', 'z\r\nabcde\r\n0\r\n\r\n'],
  ['chunk size overflow', 'fffffffffffffffff\r\nabcde\r\n0\r\n\r\n'],
  ['chunk size with trailing space', '5 \r\nabcde\r\n0\r\n\r\n'],
  ['space before an extension', '5 ;a=b\r\nabcde\r\n0\r\n\r\n'],
  ['no CRLF after chunk data', '5\r\nabcdeX0\r\n\r\n'],
  ['bare LF after chunk data', '5\r\nabcde\n0\r\n\r\n'],
  ['bare LF after chunk size', '5\nabcde\r\n0\r\n\r\n'],
  ['empty chunk size', '\r\nabcde\r\n0\r\n\r\n'],
  ['bad trailer name', '1\r\na\r\n0\r\nT : 1\r\n\r\n'],
  ['bare LF in the trailers', '1\r\na\r\n0\r\nT: 1\n\r\n'],
];

test('refused chunked bodies: 400 after the head', () => {
  const h = 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n';
  for (const [what, body] of REFUSED_BODIES) {
    for (const at of [undefined, everyByte(h + body)]) {
      const { events, results } = request(h + body, at);
      assert.is(results.length, 1, what);
      assert.is(results[0].kind === 'error' && results[0].status, 400, what);
      assert.is(events[0][0], 'head', what);
      assert.not.ok(events.some((e) => e[0] === 'end'), what);
    }
  }
});

test(`request line: ${MAX_REQUEST_LINE_BYTES} bytes are taken, one more is 414 (also before its end arrives)`, () => {
  const line = (n: number) => `GET /${'a'.repeat(n - 'GET / HTTP/1.1'.length)} HTTP/1.1`;
  assert.is(line(MAX_REQUEST_LINE_BYTES).length, MAX_REQUEST_LINE_BYTES);
  const ok = `${line(MAX_REQUEST_LINE_BYTES)}\r\nHost: x\r\n\r\n`;
  assert.equal(request(ok).results, [{ kind: 'paused', consumed: ok.length }]);
  for (const at of [undefined, [3, 100, 8000, 8191, 8193]]) {
    assert.equal(kinds(request(ok, at).results), ['paused']);
    const long = request(`${line(MAX_REQUEST_LINE_BYTES + 1)}\r\nHost: x\r\n\r\n`, at);
    assert.is(long.results[0].kind === 'error' && long.results[0].status, 414);
    assert.equal(long.events, []);
  }
  // no LF yet: refused as soon as the line is too long
  const { results } = request(`GET /${'a'.repeat(MAX_REQUEST_LINE_BYTES)}`);
  assert.is(results[0].kind === 'error' && results[0].status, 414);
  // a smaller limit from the options
  assert.is(request('GET /abcdef HTTP/1.1\r\nHost: x\r\n\r\n', undefined, { maxRequestLineBytes: 20 }).results[0].kind, 'paused');
  const small = request('GET /abcdefg HTTP/1.1\r\nHost: x\r\n\r\n', undefined, { maxRequestLineBytes: 20 }).results[0];
  assert.is(small.kind === 'error' && small.status, 414);
});

test(`head: ${MAX_HEAD_BYTES} bytes (counted raw, CRLFs included) are taken, one more is 431`, () => {
  const make = (total: number) => {
    const start = 'GET / HTTP/1.1\r\nHost: x\r\nX-Fill: ';
    return `${start}${'f'.repeat(total - start.length - 4)}\r\n\r\n`;
  };
  assert.is(make(MAX_HEAD_BYTES).length, MAX_HEAD_BYTES);
  assert.equal(request(make(MAX_HEAD_BYTES)).results, [{ kind: 'paused', consumed: MAX_HEAD_BYTES }]);
  for (const at of [undefined, [10, 5000, 32760, 32767, 32768]]) {
    assert.equal(kinds(request(make(MAX_HEAD_BYTES), at).results), ['paused']);
    const over = request(make(MAX_HEAD_BYTES + 1), at);
    assert.is(over.results[0].kind === 'error' && over.results[0].status, 431);
    assert.equal(over.events, []);
  }
  // many small fields, the same budget
  const many = (n: number) => `GET / HTTP/1.1\r\nHost: x\r\n${'A: b\r\n'.repeat(n)}\r\n`;
  const n = Math.floor((MAX_HEAD_BYTES - many(0).length) / 6);
  assert.is(request(many(n)).results[0].kind, 'paused');
  assert.is(request(many(n + 1)).results[0].kind, 'error');
  // a head that never ends: refused once past the limit
  const endless = request(`GET / HTTP/1.1\r\nHost: x\r\n${'A: b\r\n'.repeat(6000)}`);
  assert.is(endless.results[0].kind === 'error' && endless.results[0].status, 431);
  // a smaller limit from the options
  const small = request(make(1025), undefined, { maxHeadBytes: 1024 }).results[0];
  assert.is(small.kind === 'error' && small.status, 431);
  assert.is(request(make(1024), undefined, { maxHeadBytes: 1024 }).results[0].kind, 'paused');
});

test('maxBodyBytes: a larger Content-Length is 413 before the head; a chunked body is cut with 413', () => {
  const cl = request('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n', undefined, { maxBodyBytes: 10 });
  assert.is(cl.results[0].kind === 'error' && cl.results[0].status, 413);
  assert.equal(cl.events, []);
  assert.is(request('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789', undefined, { maxBodyBytes: 10 }).results[0].kind, 'paused');
  const chunked = request('POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n012345\r\n5\r\n67890\r\n0\r\n\r\n', undefined, { maxBodyBytes: 10 });
  assert.is(chunked.results[0].kind === 'error' && chunked.results[0].status, 413);
  assert.equal(chunked.events.slice(1), [['body', '012345']]);
});

test('chunk extensions past 16 KiB: refused', () => {
  const r = request(`POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;a=${'b'.repeat(20000)}\r\na\r\n0\r\n\r\n`).results[0];
  assert.ok(r.kind === 'error' && (r.status === 413 || r.status === 400));
});

test('data after a request that closes the connection is refused', () => {
  const { results } = request('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n');
  assert.is(results[0].kind, 'paused');
  assert.is(results[1].kind === 'error' && results[1].status, 400);
});

test('finish(): clean between messages, an error inside a head or a body', () => {
  const at = (raw: string) => {
    const { events, sink } = recorder();
    const p = new RequestParser(sink);
    const r = p.execute(Buffer.from(raw));
    if (r.kind === 'paused') p.resume();
    const f = p.finish();
    p.close();
    return { f, events };
  };
  assert.is(at('GET / HTTP/1.1\r\nHost: x\r\n\r\n').f, null);
  assert.is(at('').f, null);
  assert.is(at('\r\n').f, null);
  for (const cut of [
    'GET / HTTP/1.1\r\nHost: x\r\n',
    'G',
    'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabc',
    'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n',
    'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n',
  ]) {
    const { f, events } = at(cut);
    assert.is(f?.kind === 'error' && f.status, 400, cut);
    assert.not.ok(events.some((e) => e[0] === 'end'), cut);
  }
});

test('the sink may close the parser from its callbacks; a throwing sink leaves the parser failed', () => {
  let p: RequestParser;
  const bodies: string[] = [];
  p = new RequestParser({ head() {}, body: (b) => { bodies.push(b.toString()); p.close(); }, end() {} });
  const r = p.execute(Buffer.from('POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n1\r\nb\r\n0\r\n\r\n'));
  assert.is(r.kind, 'error');
  assert.equal(bodies, ['a']);
  p.close();
  const q = new RequestParser({ head() { q.close(); }, body() {}, end() {} });
  assert.is(q.execute(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')).kind, 'error');

  const t = new RequestParser({ head() {}, body() { throw new Error('sink broke'); }, end() {} });
  assert.throws(() => t.execute(Buffer.from('POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n')), /sink broke/);
  assert.is(t.execute(Buffer.from('0\r\n\r\n')).kind, 'error');
  t.close();
  const u = new RequestParser({ head() {}, body() { u.execute(Buffer.from('x')); }, end() {} });
  assert.throws(() => u.execute(Buffer.from('POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n')), /re-entered/);
  u.close();
});

// ---- generated requests -----------------------------------------------------------------------

const TCHAR = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&\'*+-.^_`|~';
const RESERVED = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'upgrade', 'expect', 'keep-alive', 'proxy-connection']);
const token = fc.array(fc.constantFrom(...TCHAR), { minLength: 1, maxLength: 12 }).map((a) => a.join(''))
  .filter((n) => !RESERVED.has(n.toLowerCase()));
const fieldValue = fc.array(fc.constantFrom(...'abcXYZ019 -_.;,="()/\t\x80\xff'), { maxLength: 16 }).map((a) => a.join('').replace(/^[ \t]+|[ \t]+$/g, ''));
const ows = fc.constantFrom('', ' ', '  ', '\t', ' \t ');
const field = fc.record({ name: token, value: fieldValue, before: ows, after: ows });
// bytes that often spell CR, LF and "\r\n\r\n": the segment boundaries
const bodyBytes = (max: number) => fc.array(fc.oneof(fc.constantFrom(13, 10, 48), fc.integer({ min: 0, max: 255 })), { maxLength: max }).map((a) => Buffer.from(a));
const pathChars = fc.array(fc.constantFrom(...'abz019/._~-!$&\'()*+,;=:@'), { maxLength: 20 }).map((a) => a.join(''));

const genRequest = fc.record({
  method: fc.constantFrom('GET', 'POST', 'PUT', 'HEAD', 'DELETE'),
  path: pathChars,
  query: fc.option(fc.array(fc.constantFrom(...'ab09=&/?'), { maxLength: 10 }).map((a) => a.join(''))),
  absolute: fc.boolean(),
  fields: fc.array(field, { maxLength: 6 }),
  body: fc.oneof(
    fc.constant({ kind: 'none' as const }),
    bodyBytes(40).map((data) => ({ kind: 'length' as const, data })),
    fc.record({
      kind: fc.constant('chunked' as const),
      chunks: fc.array(fc.record({ data: bodyBytes(20).filter((b) => b.length > 0), ext: fc.constantFrom('', ';a=b', ';a="q s"', ';x;y=1'), zeros: fc.nat(2), upper: fc.boolean() }), { maxLength: 4 }),
      lastExt: fc.constantFrom('', ';end'),
      trailers: fc.array(field, { maxLength: 3 }),
    }),
  ),
});
type GenRequest = typeof genRequest extends fc.Arbitrary<infer T> ? T : never;

function serialize(r: GenRequest): { raw: Buffer; expected: Ev[] } {
  const target = `/${r.path}${r.query === null ? '' : `?${r.query}`}`;
  const headers: string[] = ['Host', 'h.example'];
  let wire = `Host: h.example\r\n`;
  for (const f of r.fields) {
    wire += `${f.name}:${f.before}${f.value}${f.after}\r\n`;
    headers.push(f.name, f.value);
  }
  const parts: Buffer[] = [];
  let body = '';
  let trailers: string[] = [];
  let chunked = false;
  let contentLength: number | null = null;
  if (r.body.kind === 'length') {
    wire += `Content-Length: ${r.body.data.length}\r\n`;
    headers.push('Content-Length', String(r.body.data.length));
    contentLength = r.body.data.length;
    parts.push(r.body.data);
    body = r.body.data.toString('latin1');
  } else if (r.body.kind === 'chunked') {
    chunked = true;
    wire += 'Transfer-Encoding: chunked\r\n';
    headers.push('Transfer-Encoding', 'chunked');
    for (const c of r.body.chunks) {
      const size = '0'.repeat(c.zeros) + c.data.length.toString(16);
      parts.push(Buffer.from(`${c.upper ? size.toUpperCase() : size}${c.ext}\r\n`), c.data, Buffer.from('\r\n'));
      body += c.data.toString('latin1');
    }
    parts.push(Buffer.from(`0${r.body.lastExt}\r\n${r.body.trailers.map((f) => `${f.name}:${f.before}${f.value}${f.after}\r\n`).join('')}\r\n`, 'latin1'));
    trailers = r.body.trailers.flatMap((f) => [f.name, f.value]);
  }
  const line = `${r.method} ${r.absolute ? `http://Abs.example:81${target}` : target} HTTP/1.1\r\n`;
  const raw = Buffer.concat([Buffer.from(`${line}${wire}\r\n`, 'latin1'), ...parts]);
  const hasBody = chunked || (contentLength ?? 0) > 0;
  const expected: Ev[] = [['head', {
    method: r.method, target, authority: r.absolute ? 'Abs.example:81' : null, versionMinor: 1, headers,
    host: r.absolute ? 'Abs.example:81' : 'h.example', keepAlive: true, upgrade: false, expectContinue: false,
    chunked, contentLength, hasBody,
  }]];
  if (body.length > 0) expected.push(['body', body]);
  expected.push(['end', trailers]);
  return { raw, expected };
}

const cuts = (len: number) => fc.oneof(
  fc.array(fc.integer({ min: 1, max: Math.max(1, len - 1) }), { maxLength: 8 }),
  fc.constant(everyByte(Buffer.alloc(len))),
);

test('property: 1-3 pipelined requests, cut anywhere, give the same events as whole, and the expected ones', () => {
  fc.assert(
    fc.property(fc.array(genRequest, { minLength: 1, maxLength: 3 }).chain((rs) => {
      const ser = rs.map(serialize);
      const raw = Buffer.concat(ser.map((s) => s.raw));
      return fc.tuple(fc.constant(ser), fc.constant(raw), cuts(raw.length));
    }), ([ser, raw, at]) => {
      const whole = request(raw);
      assert.equal(whole.events, ser.flatMap((s) => s.expected));
      assert.equal(whole.results, ser.map((s) => ({ kind: 'paused', consumed: s.raw.length })));
      const cut = request(raw, at);
      assert.equal(cut.events, whole.events);
      assert.equal(cut.results.length, ser.length);
      whole.parser.close();
      cut.parser.close();
    }),
    { seed: 20240611, numRuns: 300 },
  );
});

const VALID_STATUS = new Set([400, 413, 414, 431, 501, 502, 505]);

function checkResults(run: Run, len: number, parserKind: 'req' | 'res'): void {
  for (const r of run.results) {
    if (r.kind === 'error') assert.ok(parserKind === 'res' ? r.status === 502 : VALID_STATUS.has(r.status) && r.status !== 502, JSON.stringify(r));
    else if (r.kind !== 'more') assert.ok(r.consumed > 0 && r.consumed <= len);
  }
}

/** a valid request with a few bytes replaced or inserted */
const mangled = genRequest.chain((r) => {
  const { raw } = serialize(r);
  return fc.array(fc.tuple(fc.nat(raw.length), fc.integer({ min: 0, max: 255 }), fc.boolean()), { minLength: 1, maxLength: 3 }).map((edits) => {
    let b = Buffer.from(raw);
    for (const [at, byte, insert] of edits) {
      if (insert) b = Buffer.concat([b.subarray(0, at), Buffer.from([byte]), b.subarray(at)]);
      else if (at < b.length) b[at] = byte;
    }
    return b;
  });
});
const junk = fc.oneof(fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a)), mangled);

test('property: arbitrary bytes never throw; whole or cut, the same events and verdict', () => {
  fc.assert(
    fc.property(junk.chain((b) => fc.tuple(fc.constant(b), cuts(b.length))), ([bytes, at]) => {
      const whole = request(bytes);
      const cut = request(bytes, at);
      checkResults(whole, bytes.length, 'req');
      assert.equal(cut.events, whole.events);
      const verdict = (r: Run) => r.results.map((x) => (x.kind === 'error' ? `error ${x.status}` : x.kind));
      assert.equal(verdict(cut), verdict(whole));
      // heads and ends pair up: a body never comes without its head
      let open = false;
      for (const [kind] of whole.events) {
        if (kind === 'head') { assert.not.ok(open); open = true; }
        else if (kind === 'body') assert.ok(open);
        else { assert.ok(open); open = false; }
      }
      whole.parser.finish();
      whole.parser.close();
      cut.parser.close();
    }),
    { seed: 7, numRuns: 300 },
  );
});

// ---- responses ----------------------------------------------------------------------------------

function response(bytes: string | Buffer, methods: string[] = ['GET'], upgrade = false, at?: number[]): Run & { parser: ResponseParser } {
  const buf = typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes;
  const { events, sink } = recorder();
  const parser = new ResponseParser(sink);
  let n = 0;
  parser.expect(methods[0], upgrade);
  const run = drive(parser, events, split(buf, at), () => parser.expect(methods[++n] ?? 'GET', false));
  return { ...run, parser };
}

function rhead(over: Partial<ResponseHead>): ResponseHead {
  return { status: 200, reason: 'OK', versionMinor: 1, headers: [], keepAlive: true, upgrade: false, chunked: false, contentLength: null, ...over };
}

test('response: a Content-Length body, paused at its end; what follows is left', () => {
  const a = 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello';
  const { events, sink } = recorder();
  const p = new ResponseParser(sink);
  p.expect('GET', false);
  const r = p.execute(Buffer.from(`${a}HTTP/1.1 204 No Content\r\n\r\n`));
  assert.equal(r, { kind: 'paused', consumed: a.length });
  assert.equal(events, [['head', rhead({ headers: ['Content-Length', '5'], contentLength: 5 })], ['body', 'hello'], ['end', []]]);
  p.close();
});

test('response: HEAD has no body even with Content-Length or chunked; 204 and 304 have none', () => {
  const a = 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n';
  const b = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n';
  const c = 'HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n';
  const d = 'HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n';
  const e = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok';
  const all = a + b + c + d + e;
  for (const at of [undefined, everyByte(all)]) {
    const { events, results } = response(all, ['HEAD', 'HEAD', 'GET', 'GET', 'GET'], false, at);
    if (!at) assert.equal(results, [a, b, c, d, e].map((x) => ({ kind: 'paused', consumed: x.length })));
    assert.equal(kinds(results), ['paused', 'paused', 'paused', 'paused', 'paused']);
    assert.equal(events.map((x) => x[0]), ['head', 'end', 'head', 'end', 'head', 'end', 'head', 'end', 'head', 'body', 'end']);
    assert.equal(events[2][1], rhead({ headers: ['Transfer-Encoding', 'chunked'], chunked: true }));
    assert.is((events[4][1] as ResponseHead).contentLength, 7);
  }
});

test('response: interim 100 and 103 heads come first, then the final response ends the message', () => {
  const raw = 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx';
  for (const at of [undefined, everyByte(raw)]) {
    const { events, results } = response(raw, ['POST'], false, at);
    assert.equal(results, [{ kind: 'paused', consumed: at ? 1 : raw.length }]);
    assert.equal(events, [
      ['head', rhead({ status: 100, reason: 'Continue' })],
      ['head', rhead({ status: 103, reason: 'Early Hints', headers: ['Link', '</s.css>'] })],
      ['head', rhead({ status: 201, reason: 'Created', headers: ['Content-Length', '1'], contentLength: 1 })],
      ['body', 'x'],
      ['end', []],
    ]);
  }
});

test('response: expect() may come while the previous body is still arriving', () => {
  const { events, sink } = recorder();
  const p = new ResponseParser(sink);
  p.expect('GET', false);
  assert.equal(p.execute(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\na')), { kind: 'more' });
  p.expect('HEAD', false);
  assert.equal(p.execute(Buffer.from('b')), { kind: 'paused', consumed: 1 });
  p.resume();
  const h = 'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n';
  assert.equal(p.execute(Buffer.from(h)), { kind: 'paused', consumed: h.length });
  assert.equal(events.map((e) => e[0]), ['head', 'body', 'end', 'head', 'end']);
  p.close();
});

test('response: a close-delimited body (1.0 and 1.1) ends at finish()', () => {
  for (const raw of ['HTTP/1.0 200 OK\r\n\r\nall of it\r\n\r\n', 'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it\r\n\r\n']) {
    const { events, results, parser } = response(raw, ['GET'], false, [20, 30]);
    assert.equal(results, []);
    assert.is(parser.finish(), null);
    assert.equal(events.slice(1), [['body', 'all of it\r\n\r\n'], ['end', []]]);
    assert.is((events[0][1] as ResponseHead).keepAlive, false);
    parser.close();
  }
});

test('response: chunked with trailers', () => {
  const raw = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwiki\r\n6;x=y\r\npedia \r\n0\r\nServer-Timing: db;dur=5\r\n\r\n';
  for (const at of [undefined, everyByte(raw)]) {
    const { events, results } = response(raw, ['GET'], false, at);
    assert.equal(results, [{ kind: 'paused', consumed: at ? 1 : raw.length }]);
    assert.equal(events.slice(1), [['body', 'wikipedia '], ['end', ['Server-Timing', 'db;dur=5']]]);
  }
});

test('response: 101 after an upgrade request is an upgrade; without one it is refused', () => {
  const h = 'HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n';
  const up = response(`${h}\x81\x00`, ['GET'], true);
  assert.equal(up.results, [{ kind: 'upgrade', consumed: h.length }]);
  assert.equal(up.events, [['head', rhead({ status: 101, reason: 'Switching Protocols', headers: ['Connection', 'Upgrade', 'Upgrade', 'websocket'], upgrade: true })], ['end', []]]);
  const no = response(h, ['GET'], false);
  assert.equal(no.results.map((r) => r.kind === 'error' && r.status), [502]);
  assert.equal(no.events, []);
  // a 101 that names no protocol is no upgrade either
  assert.equal(response('HTTP/1.1 101 Switching Protocols\r\n\r\n', ['GET'], true).results[0].kind, 'error');
  // an upgrade request may still get an ordinary response
  const plain = response('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n', ['GET'], true);
  assert.equal(plain.results, [{ kind: 'paused', consumed: 38 }]);
});

const REFUSED_RESPONSES: [string, string][] = [
  ['status 600', 'HTTP/1.1 600 X\r\n\r\n'],
  ['status 099', 'HTTP/1.1 099 X\r\n\r\n'],
  ['status 1000', 'HTTP/1.1 1000 X\r\n\r\n'],
  ['HTTP/2.0', 'HTTP/2.0 200 OK\r\n\r\n'],
  ['RTSP', 'RTSP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n'],
  ['CL with TE', 'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
  ['CL twice', 'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd'],
  ['CL twice, same', 'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc'],
  ['TE gzip', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc'],
  ['TE chunked, gzip', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nabc'],
  ['TE in 1.0', 'HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
  ['NUL in a value', 'HTTP/1.1 200 OK\r\nX: a\x00\r\n\r\n'],
  ['CR in a value', 'HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n'],
  ['LF alone', 'HTTP/1.1 200 OK\nX: a\r\n\r\n'],
  ['obs-fold', 'HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n'],
  ['bad header name', 'HTTP/1.1 200 OK\r\nX Y: a\r\n\r\n'],
  ['bad chunk', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n'],
  ['not HTTP', 'SSH-2.0-OpenSSH_9.6\r\n'],
];

test('response: refusals are 502', () => {
  for (const [what, raw] of REFUSED_RESPONSES) {
    for (const at of [undefined, everyByte(raw)]) {
      const { results } = response(raw, ['GET'], false, at);
      assert.equal(results.map((r) => r.kind === 'error' && r.status), [502], what);
    }
  }
  // only an interim response, then EOF
  const interim = response('HTTP/1.1 100 Continue\r\n\r\n');
  assert.equal(interim.results, []);
  const f = interim.parser.finish();
  assert.is(f?.kind === 'error' && f.status, 502);
  interim.parser.close();
  // head too large
  const big = `HTTP/1.1 200 OK\r\nX: ${'a'.repeat(MAX_HEAD_BYTES)}\r\n\r\n`;
  assert.equal(response(big).results.map((r) => r.kind === 'error' && r.status), [502]);
  // cut short
  for (const cut of ['HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n', 'HTTP/1.1 200 O']) {
    const { parser, events } = response(cut);
    const f = parser.finish();
    assert.is(f?.kind === 'error' && f.status, 502, cut);
    assert.not.ok(events.some((e) => e[0] === 'end'));
    parser.close();
  }
});

const genResponse = fc.record({
  status: fc.constantFrom(200, 201, 204, 304, 404, 500),
  interim: fc.array(fc.constantFrom(100, 103), { maxLength: 2 }),
  method: fc.constantFrom('GET', 'HEAD', 'POST'),
  fields: fc.array(field, { maxLength: 4 }),
  chunked: fc.boolean(),
  data: bodyBytes(30),
});
type GenResponse = typeof genResponse extends fc.Arbitrary<infer T> ? T : never;

function serializeResponse(r: GenResponse): Buffer {
  const interim = r.interim.map((s) => `HTTP/1.1 ${s} Interim\r\n\r\n`).join('');
  const fields = r.fields.map((f) => `${f.name}:${f.before}${f.value}${f.after}\r\n`).join('');
  const noBody = r.method === 'HEAD' || r.status === 204 || r.status === 304;
  if (r.chunked) {
    const body = noBody || r.data.length === 0 ? '' : `${r.data.length.toString(16)}\r\n${r.data.toString('latin1')}\r\n`;
    return Buffer.from(`${interim}HTTP/1.1 ${r.status} R\r\n${fields}Transfer-Encoding: chunked\r\n\r\n${noBody ? '' : `${body}0\r\n\r\n`}`, 'latin1');
  }
  return Buffer.from(`${interim}HTTP/1.1 ${r.status} R\r\n${fields}Content-Length: ${r.data.length}\r\n\r\n${noBody ? '' : r.data.toString('latin1')}`, 'latin1');
}

test('property: 1-3 responses, cut anywhere, give the same events as whole', () => {
  fc.assert(
    fc.property(fc.array(genResponse, { minLength: 1, maxLength: 3 }).chain((rs) => {
      const parts = rs.map(serializeResponse);
      const raw = Buffer.concat(parts);
      return fc.tuple(fc.constant(rs), fc.constant(parts), fc.constant(raw), cuts(raw.length));
    }), ([rs, parts, raw, at]) => {
      const methods = rs.map((r) => r.method);
      const whole = response(raw, methods);
      assert.equal(whole.results, parts.map((p) => ({ kind: 'paused', consumed: p.length })));
      const heads = whole.events.filter((e) => e[0] === 'head').map((e) => (e[1] as ResponseHead).status);
      assert.equal(heads, rs.flatMap((r) => [...r.interim, r.status]));
      const cut = response(raw, methods, false, at);
      assert.equal(cut.events, whole.events);
      whole.parser.close();
      cut.parser.close();
    }),
    { seed: 99, numRuns: 200 },
  );
});

test('property: arbitrary bytes into the response parser never throw; whole or cut, the same', () => {
  const mangledResponse = genResponse.chain((r) => {
    const raw = serializeResponse(r);
    return fc.tuple(fc.nat(raw.length - 1), fc.integer({ min: 0, max: 255 })).map(([at, byte]) => {
      const b = Buffer.from(raw);
      b[at] = byte;
      return b;
    });
  });
  fc.assert(
    fc.property(fc.oneof(fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a)), mangledResponse).chain((b) => fc.tuple(fc.constant(b), cuts(b.length), fc.constantFrom('GET', 'HEAD'), fc.boolean())),
      ([bytes, at, method, upgrade]) => {
        const whole = response(bytes, [method], upgrade);
        const cut = response(bytes, [method], upgrade, at);
        checkResults(whole, bytes.length, 'res');
        assert.equal(cut.events, whole.events);
        assert.equal(cut.results.map((r) => r.kind), whole.results.map((r) => r.kind));
        const f = whole.parser.finish();
        assert.ok(f === null || (f.kind === 'error' && f.status === 502));
        whole.parser.close();
        cut.parser.close();
      }),
    { seed: 3, numRuns: 300 },
  );
});


test('response: a parser reused for another sink after a complete answer reads the next as new; one inside an answer is not reusable', () => {
  const first = recorder();
  const p = new ResponseParser(first.sink);
  p.expect('HEAD', false);
  // HEAD: no body despite the length (an expectation that must not leak into the next use)
  assert.equal(p.execute(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n')), { kind: 'paused', consumed: 38 });
  assert.ok(p.reusable);
  const second = recorder();
  p.reuse(second.sink);
  p.expect('GET', false);
  const a = 'HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc';
  assert.equal(p.execute(Buffer.from(a)), { kind: 'paused', consumed: a.length });
  assert.equal(second.events, [['head', rhead({ headers: ['Content-Length', '3'], contentLength: 3 })], ['body', 'abc'], ['end', []]]);
  assert.is(first.events.length, 2, 'the first sink hears nothing more');
  // half a head: not reusable (its bytes would run into the next user's answer)
  p.reuse(first.sink);
  p.expect('GET', false);
  assert.equal(p.execute(Buffer.from('HTTP/1.1 200 OK\r\nCont')), { kind: 'more' });
  assert.not.ok(p.reusable);
  assert.throws(() => p.reuse(second.sink), /reuse\(\) of a parser inside a message/);
  // a failed parser is not reusable either
  const q = new ResponseParser(recorder().sink);
  q.expect('GET', false);
  assert.is(q.execute(Buffer.from('HTTP/1.1 99 Nope\r\n\r\n')).kind, 'error');
  assert.not.ok(q.reusable);
  p.close();
  q.close();
});
test.run();
