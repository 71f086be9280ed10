// The inspector's capture store and HAR export, fed directly (no server): the ring's bounds,
// body truncation, byte accounting, and the HAR 1.2 document's shape.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { performance } from 'node:perf_hooks';
import { CaptureStore, DEFAULT_LIMITS, type CaptureSummary } from '../../src/client/inspector/store.js';
import { harChunks, visitorUrl } from '../../src/client/inspector/har.js';

const head = (path: string, headers: string[] = ['Host', 'app.example.test']) => ({ method: 'GET', target: path, headers });

test('defaults: 500 captures, 64 KiB per body', () => {
  assert.is(DEFAULT_LIMITS.maxEntries, 500);
  assert.is(DEFAULT_LIMITS.maxBodyBytes, 64 * 1024);
});

test('a ring: the newest captures are kept, newest first; the oldest are gone', () => {
  const store = new CaptureStore({ ...DEFAULT_LIMITS, maxEntries: 3 });
  for (let i = 1; i <= 5; i++) store.begin('web', head(`/r${i}`)).end();
  assert.is(store.size, 3);
  assert.equal(store.list().map((c) => c.path), ['/r5', '/r4', '/r3']);
  assert.is(store.get('1'), undefined);
  assert.is(store.get('2'), undefined);
  assert.is(store.get('5')!.path, '/r5');
});

test('500 by default: the 501st request pushes out the first', () => {
  const store = new CaptureStore();
  for (let i = 1; i <= 501; i++) store.begin('web', head(`/r${i}`)).end();
  assert.is(store.size, 500);
  assert.is(store.get('1'), undefined);
  assert.is(store.list().at(-1)!.path, '/r2');
});

test('bodies: the first maxBodyBytes are kept (copied), the rest counted; truncated is marked', () => {
  const store = new CaptureStore({ ...DEFAULT_LIMITS, maxBodyBytes: 10 });
  const obs = store.begin('web', { method: 'POST', target: '/up', headers: ['Content-Type', 'text/plain'] });
  const a = Buffer.from('abcd');
  obs.requestBody(a);
  obs.requestBody(Buffer.from('efghijkl'));
  a.fill(0x7a); // the caller reuses its buffer: the capture must not change
  obs.response(201, ['Content-Type', 'text/plain']);
  obs.responseBody(Buffer.from('ok'));
  obs.end();
  const json = store.get('1')!.toJSON();
  assert.is(Buffer.from(json.request.body_base64, 'base64').toString(), 'abcdefghij');
  assert.is(json.request.truncated, true);
  assert.is(json.request.size, 12);
  assert.is(Buffer.from(json.response.body_base64, 'base64').toString(), 'ok');
  assert.is(json.response.truncated, false);
  assert.is(json.status, 201);
  assert.is(json.state, 'complete');
  assert.type(json.duration_ms, 'number');
  assert.equal(json.request.headers, [['Content-Type', 'text/plain']]);
});

test('bytes are bounded: over the budget the oldest go, and a dropped capture counts nothing more', () => {
  const limits = { maxEntries: 500, maxBodyBytes: 64 * 1024, maxHeadBytes: 1024, maxTotalBytes: 300 * 1024 };
  const store = new CaptureStore(limits);
  const big = Buffer.alloc(64 * 1024 + 100, 1);
  const first = store.begin('web', head('/first'));
  for (let i = 0; i < 20; i++) {
    const o = store.begin('web', head(`/r${i}`));
    o.requestBody(big);
    o.response(200, []);
    o.responseBody(big);
    o.end();
    assert.ok(store.bytes <= limits.maxTotalBytes, `bytes ${store.bytes} over the budget`);
  }
  // 2 × 64 KiB per capture under a 300 KiB budget: two captures fit.
  assert.is(store.size, 2);
  assert.is(store.get('1'), undefined);
  const before = store.bytes;
  first.requestBody(big); // the evicted capture's stream goes on
  first.end();
  assert.is(store.bytes, before);
  const sum = store.list().reduce((n, c) => n + c.bytes, 0);
  assert.is(store.bytes, sum);
});

test('heads are capped too: later headers are dropped and marked', () => {
  const store = new CaptureStore({ ...DEFAULT_LIMITS, maxHeadBytes: 100 });
  const headers: string[] = [];
  for (let i = 0; i < 20; i++) headers.push(`X-H${i}`, 'v'.repeat(20));
  store.begin('web', { method: 'GET', target: '/', headers }).end();
  const j = store.get('1')!.toJSON();
  assert.ok(j.request.headers.length > 0 && j.request.headers.length < 20);
  assert.is(j.request.headers_truncated, true);
});

test('events: added on the request head, updated on the response head and at the end; a failure says why', () => {
  const store = new CaptureStore();
  const seen: [string, CaptureSummary][] = [];
  store.on('added', (s) => seen.push(['added', s]));
  store.on('updated', (s) => seen.push(['updated', s]));
  const o = store.begin('web', head('/x'));
  o.response(502, []);
  o.end();
  o.fail('late'); // settled already: ignored
  const f = store.begin('web', head('/y'));
  f.fail('connection refused by localhost:3000');
  assert.equal(seen.map(([e, s]) => [e, s.path, s.state, s.status]), [
    ['added', '/x', 'pending', null],
    ['updated', '/x', 'pending', 502],
    ['updated', '/x', 'complete', 502],
    ['added', '/y', 'pending', null],
    ['updated', '/y', 'failed', null],
  ]);
  assert.is(store.get('2')!.error, 'connection refused by localhost:3000');
});

test('HAR 1.2: entries oldest first, URL from Host and X-Forwarded-Proto, text and base64 bodies, truncation', () => {
  const store = new CaptureStore({ ...DEFAULT_LIMITS, maxBodyBytes: 8 });
  const a = store.begin('web', { method: 'POST', target: '/form?x=1&y=two', headers: ['Host', 'web.example.test', 'X-Forwarded-Proto', 'https', 'Content-Type', 'application/json', 'Cookie', 'a=1; b=2'] });
  a.requestBody(Buffer.from('{"k":"v"}')); // 9 bytes: truncated to 8
  a.response(200, ['Content-Type', 'image/png', 'Set-Cookie', 's=3; Path=/']);
  a.responseBody(Buffer.from([0x89, 0x50, 0x4e, 0x47]));
  a.end();
  const b = store.begin('web', head('/plain'));
  b.response(404, ['Content-Type', 'text/plain; charset=utf-8']);
  b.responseBody(Buffer.from('nope'));
  b.end();
  assert.is(visitorUrl(store.get('1')!), 'https://web.example.test/form?x=1&y=two');
  const har = JSON.parse([...harChunks(store.list().reverse(), '9.9.9')].join(''));
  assert.is(har.log.version, '1.2');
  assert.equal(har.log.creator, { name: 'burrow', version: '9.9.9' });
  assert.is(har.log.entries.length, 2);
  const [e1, e2] = har.log.entries;
  assert.is(e1.request.method, 'POST');
  assert.is(e1.request.url, 'https://web.example.test/form?x=1&y=two');
  assert.equal(e1.request.queryString, [{ name: 'x', value: '1' }, { name: 'y', value: 'two' }]);
  assert.equal(e1.request.cookies, [{ name: 'a', value: '1' }, { name: 'b', value: '2' }]);
  assert.is(e1.request.postData.mimeType, 'application/json');
  assert.is(e1.request.postData.text, '{"k":"v"');
  assert.is(e1.request.postData._truncated, true);
  assert.is(e1.request.bodySize, 9);
  assert.is(e1.response.status, 200);
  assert.is(e1.response.content.encoding, 'base64');
  assert.equal([...Buffer.from(e1.response.content.text, 'base64')], [0x89, 0x50, 0x4e, 0x47]);
  assert.equal(e1.response.cookies, [{ name: 's', value: '3' }]);
  assert.ok(!Number.isNaN(Date.parse(e1.startedDateTime)));
  assert.type(e1.time, 'number');
  assert.equal(Object.keys(e1.timings).sort(), ['receive', 'send', 'wait']);
  assert.is(e2.request.url, 'http://app.example.test/plain');
  assert.is(e2.response.status, 404);
  assert.is(e2.response.content.text, 'nope');
  assert.is(e2.response.content.encoding, undefined);
  for (const e of har.log.entries) for (const k of ['startedDateTime', 'time', 'request', 'response', 'cache', 'timings']) assert.ok(k in e, `entry lacks ${k}`);
});

/** Runs `f` with both clocks the store reads set by the test: `wall` (Date.now) and `mono` (performance.now). */
function withClocks<T>(clocks: { wall: number; mono: number }, f: () => T): T {
  const now = Date.now;
  const perfNow = performance.now;
  Date.now = () => clocks.wall;
  performance.now = () => clocks.mono;
  try {
    return f();
  } finally {
    Date.now = now;
    performance.now = perfNow;
  }
}

test('recorded as numbers and references, shown exactly as before: the JSON of a capture read mid-way and at its end', () => {
  const store = new CaptureStore({ ...DEFAULT_LIMITS, maxBodyBytes: 10, maxHeadBytes: 60 });
  const seen: CaptureSummary[] = [];
  store.on('updated', (s) => seen.push(s));
  const clocks = { wall: Date.UTC(2027, 2, 4, 5, 6, 7, 89), mono: 1000 };
  const c = withClocks(clocks, () => {
    const requestHeaders = ['Host', 'web.example.test', 'Content-Type', 'application/json'];
    const o = store.begin('web', { method: 'POST', target: '/orders?x=1', headers: requestHeaders });
    const chunk = Buffer.from('{"a":');
    o.requestBody(chunk);
    chunk.fill(0x7a); // the client reuses its buffer
    const mid = store.get('1')!.toJSON();
    assert.is(mid.state, 'pending');
    assert.is(mid.duration_ms, null);
    assert.is(Buffer.from(mid.request.body_base64, 'base64').toString(), '{"a":');
    o.requestBody(Buffer.from('1,"b":'));
    o.requestBody(Buffer.from('2}'));
    // 32 + 19 bytes of header fields fit in 60; X-Extra's 18 more do not.
    o.response(201, ['Content-Type', 'application/json', 'X-Request-ID', 'r-1', 'X-Extra', 'dropped'], { version: 'HTTP/1.0', reason: 'Made' });
    o.responseBody(Buffer.from('{"id":'));
    o.responseBody(Buffer.from('7}'));
    clocks.mono = 1012.34;
    clocks.wall += 12;
    o.end();
    return store.get('1')!;
  });
  const expected = {
    id: '1',
    tunnel: 'web',
    method: 'POST',
    path: '/orders?x=1',
    status: 201,
    status_text: 'Made',
    http_version: 'HTTP/1.0',
    protocol: 'HTTP/1.1',
    grpc_status: null,
    grpc_message: null,
    duration_ms: 12.3,
    started_at: '2027-03-04T05:06:07.089Z',
    state: 'complete',
    error: null,
    visitor_status: null,
    replay_of: null,
    basic_auth: false,
    request: {
      headers: [['Host', 'web.example.test'], ['Content-Type', 'application/json']],
      body_base64: Buffer.from('{"a":1,"b"').toString('base64'),
      truncated: true,
      size: 13,
      headers_truncated: false,
      grpc: null,
    },
    response: {
      headers: [['Content-Type', 'application/json'], ['X-Request-ID', 'r-1']],
      body_base64: Buffer.from('{"id":7}').toString('base64'),
      truncated: false,
      size: 8,
      headers_truncated: true,
      grpc: null,
    },
  };
  // The API's text, key order included, and the live list's summary.
  assert.is(JSON.stringify(c), JSON.stringify(expected));
  const { request: _request, response: _response, ...summary } = expected;
  assert.is(JSON.stringify(c.summary()), JSON.stringify(summary));
  assert.is(JSON.stringify(seen.at(-1)), JSON.stringify(summary));
  assert.is(c.startedAt.toISOString(), '2027-03-04T05:06:07.089Z');
  // Read twice: the same.
  assert.is(JSON.stringify(c), JSON.stringify(expected));
});

/** One gRPC message on the wire: flag, big-endian length, bytes. */
function grpcFrame(data: string, flag = 0): Buffer {
  const prefix = Buffer.alloc(5);
  prefix[0] = flag;
  prefix.writeUInt32BE(data.length, 1);
  return Buffer.concat([prefix, Buffer.from(data, 'latin1')]);
}

test('a gRPC call: its protocol, grpc-status and grpc-message from the trailers, and each body as its messages', () => {
  const store = new CaptureStore({ ...DEFAULT_LIMITS, maxBodyBytes: 24 });
  const o = store.begin('rpc', { method: 'POST', target: '/pkg.Svc/Call', headers: ['content-type', 'application/grpc+proto', 'te', 'trailers'], protocol: 'grpc' });
  const request = Buffer.concat([grpcFrame('ping'), grpcFrame('')]);
  o.requestBody(request.subarray(0, 3)); // a prefix split across chunks
  o.requestBody(request.subarray(3));
  o.response(200, ['content-type', 'application/grpc'], { version: 'HTTP/2', reason: '' });
  // 9 + 9 bytes, then a message that the 24-byte capture cuts after its first byte.
  o.responseBody(Buffer.concat([grpcFrame('a\x00\xffb'), grpcFrame('pong'), grpcFrame('longer', 1)]));
  o.trailers!(['grpc-status', '5', 'grpc-message', 'no%20such%20thing%3A%20%C3%BCn%C3%AFcode']);
  o.end();
  const c = store.get('1')!.toJSON();
  assert.is(c.protocol, 'gRPC');
  assert.is(c.grpc_status, 5);
  assert.is(c.grpc_message, 'no such thing: ünïcode');
  assert.equal(c.request.grpc, {
    messages: [
      { offset: 0, compressed: false, length: 4, data_hex: '70696e67', preview: 'ping', truncated: false },
      { offset: 9, compressed: false, length: 0, data_hex: '', preview: '', truncated: false },
    ],
    more: 0,
    cut: false,
    error: null,
  });
  assert.equal(c.response.grpc, {
    messages: [
      { offset: 0, compressed: false, length: 4, data_hex: '6100ff62', preview: 'a..b', truncated: false },
      { offset: 9, compressed: false, length: 4, data_hex: '706f6e67', preview: 'pong', truncated: false },
      { offset: 18, compressed: true, length: 6, data_hex: '6c', preview: 'l', truncated: true },
    ],
    more: 0,
    cut: true,
    error: null,
  });
  // The summary (the live list) says the same, without the bodies.
  const summary = store.get('1')!.summary();
  assert.equal([summary.protocol, summary.grpc_status, summary.grpc_message], ['gRPC', 5, 'no such thing: ünïcode']);
});

test('protocols as the edge says them; a trailers-only answer\'s grpc-message; a body that is not gRPC is not read as one', () => {
  const store = new CaptureStore();
  const h1 = store.begin('web', { method: 'POST', target: '/', headers: ['Content-Type', 'application/grpc'] });
  h1.requestBody(Buffer.from('HTTP/1.1 is not framing'));
  const h2 = store.begin('web', { method: 'GET', target: '/', headers: [], protocol: 'h2' });
  h2.response(404, ['content-type', 'application/grpc', 'grpc-status', '12', 'grpc-message', 'bad %zz escape'], { version: 'HTTP/2', reason: '' });
  h2.responseBody(Buffer.from([0]));
  const plain = store.begin('web', { method: 'POST', target: '/', headers: ['content-type', 'application/octet-stream'], protocol: 'h2' });
  plain.requestBody(grpcFrame('looks like one'));
  const [p, two, one] = store.list().map((c) => c.toJSON());
  assert.is(one!.protocol, 'HTTP/1.1');
  // Its content-type says gRPC, so its body is read as framing, and said not to be.
  assert.match(one!.request.grpc!.error ?? '', /compressed flag is 0 or 1, not 72/);
  assert.is(two!.protocol, 'h2');
  assert.equal([two!.grpc_status, two!.grpc_message], [12, 'bad %zz escape']);
  assert.match(two!.response.grpc!.error ?? '', /1 byte left, short of a 5-byte message prefix/);
  assert.is(p!.request.grpc, null);
});

test('a capture still being filled is never the one dropped: the next oldest goes, and the order holds', () => {
  const limits = { maxEntries: 3, maxBodyBytes: 64 * 1024, maxHeadBytes: 1024, maxTotalBytes: 40 * 1024 };
  const store = new CaptureStore(limits);
  const oldest = store.begin('web', head('/a'));
  for (const p of ['/b', '/c']) store.begin('web', head(p)).end();
  const small = store.get('2')!.bytes;
  // One byte over the budget: the oldest but the one growing (/b) goes.
  oldest.responseBody(Buffer.alloc(limits.maxTotalBytes - store.bytes + 1));
  assert.equal(store.list().map((c) => c.path), ['/c', '/a']);
  assert.ok(store.bytes <= limits.maxTotalBytes);
  oldest.responseBody(Buffer.alloc(small));
  assert.equal(store.list().map((c) => c.path), ['/a']);
  assert.ok(store.bytes <= limits.maxTotalBytes);
  assert.is(store.get('2'), undefined);
  assert.is(store.get('3'), undefined);
  oldest.end();
  store.begin('web', head('/d')).end(); // over again: now /a is just the oldest
  assert.equal(store.list().map((c) => c.path), ['/d']);
  assert.is(store.get('1'), undefined);
  assert.is(store.bytes, store.list().reduce((n, c) => n + c.bytes, 0));
  // Many more: the ring stays 3, newest first, and its bytes add up.
  for (let i = 0; i < 2000; i++) store.begin('web', head(`/n${i}`)).end();
  assert.equal(store.list().map((c) => c.path), ['/n1999', '/n1998', '/n1997']);
  assert.is(store.get('2004')!.path, '/n1999');
  assert.is(store.get('2001'), undefined);
  assert.is(store.bytes, store.list().reduce((n, c) => n + c.bytes, 0));
  store.clear();
  assert.equal(store.list(), []);
  store.begin('web', head('/after-clear')).end();
  assert.equal(store.list().map((c) => c.path), ['/after-clear']);
});

test.run();
