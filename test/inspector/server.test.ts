// The inspector's server on a real loopback socket, fed by a fake tunnel (the observer called
// directly) and replaying to a real local HTTP service: the JSON API, the live list's events,
// replay (plain, edited, refused), the DNS-rebinding and cross-site guards, and port fallback.
import http from 'node:http';
import { createServer, type Server } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { hostAllowed, InspectorListenError, parseInspectAddress, startInspector, type Inspector } from '../../src/client/inspector/server.js';
import type { CaptureJson } from '../../src/client/inspector/store.js';
import type { TunnelObserver } from '../../src/client/observer.js';
import { call, readEvents } from './http.js';
import { waitFor } from '../cli/harness.js';

let insp: Inspector;
let observer: TunnelObserver;
let local: http.Server;
let localPort: number;
const received: { method: string; url: string; headers: http.IncomingHttpHeaders; body: string }[] = [];
const blockers: Server[] = [];

const listen = (s: http.Server | Server, port = 0) => new Promise<number>((resolve, reject) => {
  s.once('error', reject);
  s.listen(port, '127.0.0.1', () => resolve((s.address() as { port: number }).port));
});

test.before(async () => {
  local = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      received.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      // Mixed case, as many frameworks write them: a replay must show them so.
      res.writeHead(200, { 'Content-Type': 'application/json', 'X-Request-ID': 'r-1' });
      res.end(JSON.stringify({ got: `${req.method} ${req.url}`, body }));
    });
  });
  localPort = await listen(local);
  insp = await startInspector({ address: { host: '127.0.0.1', port: 0 } });
  observer = insp.observer('web', { host: '127.0.0.1', port: localPort });
});

test.after(async () => {
  await insp?.close();
  local?.close();
  for (const b of blockers) b.close();
});

/** One exchange through the fake tunnel, as the tunnel client reports it. */
function feed(method: string, path: string, reqBody: string, status: number, resBody: string): void {
  const o = observer.request({ method, target: path, headers: ['Host', 'web.example.test', 'Content-Type', 'text/plain', 'X-Trace', 't1'] })!;
  if (reqBody) o.requestBody(Buffer.from(reqBody));
  o.response(status, ['Content-Type', 'text/plain', 'X-Served-By', 'local']);
  o.responseBody(Buffer.from(resBody));
  o.end();
}

test('address parsing: port alone means 127.0.0.1; host:port and [v6]:port; nonsense is refused', () => {
  assert.equal(parseInspectAddress('4041'), { host: '127.0.0.1', port: 4041 });
  assert.equal(parseInspectAddress('0.0.0.0:5000'), { host: '0.0.0.0', port: 5000 });
  assert.equal(parseInspectAddress('[::1]:4040'), { host: '::1', port: 4040 });
  for (const bad of ['', 'x', '127.0.0.1', '127.0.0.1:0', ':4040', '[zz]:1', 'a:99999']) assert.throws(() => parseInspectAddress(bad), bad);
});

test('Host guard: IP literals and localhost names pass, any other name is refused', () => {
  for (const ok of ['127.0.0.1:4040', 'localhost:4040', 'LOCALHOST', 'app.localhost:4040', '[::1]:4040', '192.168.1.5:4040']) assert.ok(hostAllowed(ok), ok);
  for (const bad of [undefined, '', 'evil.example:4040', 'evil.example', '127.0.0.1.nip.io:4040', '[::1', '[evil]:1', 'localhost.evil.example']) assert.not.ok(hostAllowed(bad), String(bad));
});

test('GET /api/requests: newest first, with method, path, status, duration, heads and bodies', async () => {
  feed('POST', '/first', 'hello', 201, 'created');
  feed('GET', '/second?q=1', '', 404, 'missing');
  const r = await call(`${insp.url}/api/requests`);
  assert.is(r.status, 200);
  assert.match(String(r.headers['content-type']), /^application\/json/);
  assert.is(r.headers['access-control-allow-origin'], undefined);
  const list = r.json<CaptureJson[]>();
  assert.equal(list.map((c) => [c.method, c.path, c.status, c.tunnel]), [['GET', '/second?q=1', 404, 'web'], ['POST', '/first', 201, 'web']]);
  const first = list[1]!;
  for (const k of ['id', 'tunnel', 'method', 'path', 'status', 'duration_ms', 'started_at', 'request', 'response']) assert.ok(k in first, k);
  assert.is(Buffer.from(first.request.body_base64, 'base64').toString(), 'hello');
  assert.is(Buffer.from(first.response.body_base64, 'base64').toString(), 'created');
  assert.equal(first.request.headers[2], ['X-Trace', 't1']);
  assert.equal(first.response.headers[1], ['X-Served-By', 'local']);
  assert.is(first.request.truncated, false);
  const one = await call(`${insp.url}/api/requests/${first.id}`);
  assert.equal(one.json(), first);
  assert.is((await call(`${insp.url}/api/requests/999999`)).status, 404);
  assert.is((await call(`${insp.url}/api/requests/abc`)).status, 404);
  const wrong = await call(`${insp.url}/api/requests`, { method: 'PUT' });
  assert.is(wrong.status, 405);
  assert.match(wrong.json<{ detail: string }>().detail, /accepts GET or DELETE/);
  assert.is(wrong.headers.allow, 'GET, HEAD, DELETE');
});

test('a foreign Host is refused with 403 (DNS rebinding), on the page and the API', async () => {
  for (const path of ['/', '/api/requests', '/api/events']) {
    const r = await call(`${insp.url}${path}`, { headers: { host: `evil.example:${new URL(insp.url).port}` } });
    assert.is(r.status, 403, path);
    assert.match(r.json<{ detail: string }>().detail, /DNS rebinding/);
    assert.not.match(r.text, /first|second/);
  }
  assert.is((await call(`${insp.url}/api/requests`, { headers: { host: `localhost:${new URL(insp.url).port}` } })).status, 200);
});

test('the page: self-contained HTML with a strict content security policy', async () => {
  const r = await call(`${insp.url}/`);
  assert.is(r.status, 200);
  assert.match(r.text, /<title>burrow inspector<\/title>/);
  assert.match(String(r.headers['content-security-policy']), /default-src 'none'.*connect-src 'self'/);
  assert.is(r.headers['x-frame-options'], 'DENY');
  assert.not.match(r.text, /<script src=|<link [^>]*href="http/); // nothing loaded from elsewhere
});

test('replay: the stored request reaches the local service again and is recorded as a new entry', async () => {
  const list = (await call(`${insp.url}/api/requests`)).json<CaptureJson[]>();
  const orig = list.find((c) => c.path === '/first')!;
  received.length = 0;
  const r = await call(`${insp.url}/api/requests/${orig.id}/replay`, { method: 'POST' });
  assert.is(r.status, 200, r.text);
  const c = r.json<CaptureJson>();
  assert.is(c.replay_of, orig.id);
  assert.is(c.status, 200);
  assert.is(c.state, 'complete');
  assert.equal(received.map((x) => [x.method, x.url, x.body, x.headers['x-trace'], x.headers.host]), [['POST', '/first', 'hello', 't1', 'web.example.test']]);
  assert.equal(JSON.parse(Buffer.from(c.response.body_base64, 'base64').toString()), { got: 'POST /first', body: 'hello' });
  const after = (await call(`${insp.url}/api/requests`)).json<CaptureJson[]>();
  assert.is(after[0]!.id, c.id);
  // The response's header names as the local service wrote them (undici lower-cased them).
  assert.equal(c.response.headers.slice(0, 2), [['Content-Type', 'application/json'], ['X-Request-ID', 'r-1']]);
});

test('edit and replay: method, path, headers and body as edited; bad edits are 400 naming the field', async () => {
  const orig = (await call(`${insp.url}/api/requests`)).json<CaptureJson[]>().find((x) => x.path === '/first')!;
  received.length = 0;
  const edits = { method: 'PUT', path: '/edited?x=1', headers: [['Host', 'web.example.test'], ['X-Edited', 'yes']], body: 'new body ✓' };
  const r = await call(`${insp.url}/api/requests/${orig.id}/replay`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(edits) });
  assert.is(r.status, 200, r.text);
  assert.equal(received.map((x) => [x.method, x.url, x.body, x.headers['x-edited'], x.headers['x-trace']]), [['PUT', '/edited?x=1', 'new body ✓', 'yes', undefined]]);
  assert.is(r.json<CaptureJson>().method, 'PUT');
  for (const [bad, field] of [
    [{ method: 'GET /x' }, /method/],
    [{ path: 'no-slash' }, /path/],
    [{ path: '/a b' }, /path/],
    [{ headers: [['Bad Name', 'v']] }, /header name/],
    [{ headers: [['X-A', 'a\r\nInjected: 1']] }, /line breaks/],
    [{ body: 'a', body_base64: 'YQ==' }, /not both/],
    [{ nope: 1 }, /unknown field "nope"/],
    [[1], /JSON object/],
  ] as const) {
    const b = await call(`${insp.url}/api/requests/${orig.id}/replay`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(bad) });
    assert.is(b.status, 400, JSON.stringify(bad));
    assert.match(b.json<{ detail: string }>().detail, field);
  }
  // A path that looks like a network-path reference stays on the local service.
  const odd = await call(`${insp.url}/api/requests/${orig.id}/replay`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: '//evil.example/x' }) });
  assert.is(odd.status, 200, odd.text);
  assert.is(received.at(-1)!.url, '//evil.example/x');
  received.length = 1;
  const notJson = await call(`${insp.url}/api/requests/${orig.id}/replay`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
  assert.is(notJson.status, 400);
  assert.is(received.length, 1); // none of the refused ones reached the service
});

test('replay is refused to other sites: a foreign Origin, a cross-site fetch, a form post', async () => {
  const orig = (await call(`${insp.url}/api/requests`)).json<CaptureJson[]>().find((x) => x.path === '/first')!;
  received.length = 0;
  const url = `${insp.url}/api/requests/${orig.id}/replay`;
  const a = await call(url, { method: 'POST', headers: { origin: 'http://evil.example' } });
  assert.is(a.status, 403);
  assert.match(a.json<{ detail: string }>().detail, /other sites/);
  assert.is((await call(url, { method: 'POST', headers: { 'sec-fetch-site': 'cross-site' } })).status, 403);
  assert.is((await call(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=1' })).status, 415);
  assert.is(received.length, 0);
  // The page's own origin may.
  assert.is((await call(url, { method: 'POST', headers: { origin: insp.url, 'sec-fetch-site': 'same-origin' } })).status, 200);
});

test('a request whose body was truncated is replayed only with an edited body (409 otherwise)', async () => {
  const o = observer.request({ method: 'POST', target: '/big', headers: ['Host', 'web.example.test'] })!;
  o.requestBody(Buffer.alloc(64 * 1024 + 1, 0x61));
  o.response(200, []);
  o.end();
  const big = (await call(`${insp.url}/api/requests`)).json<CaptureJson[]>()[0]!;
  assert.is(big.request.truncated, true);
  const r = await call(`${insp.url}/api/requests/${big.id}/replay`, { method: 'POST' });
  assert.is(r.status, 409);
  assert.match(r.json<{ detail: string }>().detail, /65537 bytes.*65536 were kept/);
  const ok = await call(`${insp.url}/api/requests/${big.id}/replay`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"body":"small"}' });
  assert.is(ok.status, 200);
});

test('a replay whose local service is down is recorded as failed, saying why', async () => {
  // A port that was free a moment ago: nothing listens there.
  const probe = createServer();
  const dead = await listen(probe);
  await new Promise<void>((r) => probe.close(() => r()));
  const ex = insp.observer('down', { host: '127.0.0.1', port: dead }).request({ method: 'GET', target: '/gone', headers: ['Host', 'down.example.test'] })!;
  ex.fail('local-unreachable');
  const id = (await call(`${insp.url}/api/requests`)).json<CaptureJson[]>()[0]!.id;
  const r = await call(`${insp.url}/api/requests/${id}/replay`, { method: 'POST' });
  assert.is(r.status, 200);
  const c = r.json<CaptureJson>();
  assert.is(c.state, 'failed');
  assert.is(c.status, null);
  assert.is(c.replay_of, id);
  assert.is(c.error, `connection refused by 127.0.0.1:${dead}`);
});

test('live list: a snapshot on connect, then added and updated as requests happen', async () => {
  const evs = readEvents(`${insp.url}/api/events`, (e) => e.some((x) => x.event === 'updated' && JSON.parse(x.data).path === '/live' && JSON.parse(x.data).state === 'complete'));
  await new Promise((r) => setTimeout(r, 200));
  feed('GET', '/live', '', 200, 'ok');
  const events = await evs;
  assert.is(events[0]!.event, 'snapshot');
  assert.ok(Array.isArray(JSON.parse(events[0]!.data)));
  const live = events.filter((e) => e.data.includes('"/live"')).map((e) => [e.event, JSON.parse(e.data).state]);
  assert.equal(live[0], ['added', 'pending']);
  assert.equal(live.at(-1), ['updated', 'complete']);
});

test('no page open, no summaries: the server follows the store only while a live list is open', async () => {
  const following = () => insp.store.listenerCount('added') + insp.store.listenerCount('updated');
  await waitFor(() => (following() === 0 ? true : undefined), 5000, 'the server stops following the store once no page is open');
  const evs = readEvents(`${insp.url}/api/events`, (e) => e.some((x) => x.event === 'updated' && JSON.parse(x.data).path === '/followed'));
  await waitFor(() => (following() === 2 ? true : undefined), 5000, 'the server follows the store while a page is open');
  feed('GET', '/followed', '', 200, 'ok');
  await evs; // the reader hangs up
  await waitFor(() => (following() === 0 ? true : undefined), 5000, 'the server stops following the store when the page goes');
  feed('GET', '/unfollowed', '', 200, 'ok'); // recorded all the same
  const r = await call(`${insp.url}/api/requests?view=summary&path=/unfollowed`);
  assert.equal(r.json<{ path: string; state: string }[]>().map((c) => [c.path, c.state]), [['/unfollowed', 'complete']]);
});

test('filter: method, status class, path and text in headers or bodies; the page asks for summaries', async () => {
  feed('POST', '/filter/orders', '{"sku":"needle-in-body"}', 201, 'made');
  feed('GET', '/filter/missing', '', 404, 'no such thing');
  feed('GET', '/filter/boom', '', 503, 'down for maintenance');
  const paths = async (q: string) => {
    const r = await call(`${insp.url}/api/requests?path=/filter/&${q}`);
    assert.is(r.status, 200, r.text);
    return r.json<CaptureJson[]>().map((c) => c.path);
  };
  assert.equal(await paths('method=post'), ['/filter/orders']);
  assert.equal(await paths('status=4xx'), ['/filter/missing']);
  assert.equal(await paths('status=5xx'), ['/filter/boom']);
  // A request the local service gave no answer: under what the visitor got (502), and under failed.
  const down = insp.store.begin('web', { method: 'GET', target: '/filter/unanswered', headers: ['Host', 'x'] });
  down.fail('no connection to localhost:3000: refused (the visitor got 502)', 502);
  assert.equal(await paths('status=5xx'), ['/filter/unanswered', '/filter/boom']);
  assert.equal(await paths('status=failed'), ['/filter/unanswered']);
  assert.equal(await paths('status=2xx&method=GET'), []);
  assert.equal(await paths('text=NEEDLE-in'), ['/filter/orders']); // request body, any case
  assert.equal(await paths('text=maintenance'), ['/filter/boom']); // response body
  assert.equal(await paths('text=x-served-by'), ['/filter/boom', '/filter/missing', '/filter/orders']); // a header name
  const summaries = (await call(`${insp.url}/api/requests?status=4xx&path=/filter/&view=summary`)).json<Record<string, unknown>[]>();
  assert.equal(summaries.map((x) => [x.path, x.status, x.status_text, 'request' in x]), [['/filter/missing', 404, 'Not Found', false]]);
  // ids: only those captures are asked about (the page's check of new rows).
  const all = (await call(`${insp.url}/api/requests?path=/filter/`)).json<CaptureJson[]>();
  const ids = all.map((c) => c.id).join(',');
  assert.equal((await call(`${insp.url}/api/requests?ids=${ids},nope,999999&status=4xx`)).json<CaptureJson[]>().map((c) => c.path), ['/filter/missing']);
  assert.equal((await call(`${insp.url}/api/requests?ids=${all[0]!.id}`)).json<CaptureJson[]>().map((c) => c.path), [all[0]!.path]);
  const bad = await call(`${insp.url}/api/requests?status=2zz`);
  assert.is(bad.status, 400);
  assert.match(bad.json<{ detail: string }>().detail, /status must be 2xx/);
});

test('GET /api/requests/{id}/curl: the command, as text', async () => {
  const id = (await call(`${insp.url}/api/requests?path=/filter/orders`)).json<CaptureJson[]>()[0]!.id;
  const r = await call(`${insp.url}/api/requests/${id}/curl`);
  assert.is(r.status, 200);
  assert.match(String(r.headers['content-type']), /^text\/plain/);
  assert.is(r.text, `curl 'http://web.example.test/filter/orders' \\\n  -H 'Content-Type: text/plain' \\\n  -H 'X-Trace: t1' \\\n  --data-raw '{"sku":"needle-in-body"}'\n`);
  assert.is((await call(`${insp.url}/api/requests/999999/curl`)).status, 404);
});

test('Clear (DELETE /api/requests): refused to other sites; empties the store and tells live pages', async () => {
  assert.ok(insp.store.size > 0);
  const url = `${insp.url}/api/requests`;
  const foreign = await call(url, { method: 'DELETE', headers: { origin: 'http://evil.example' } });
  assert.is(foreign.status, 403);
  assert.match(foreign.json<{ detail: string }>().detail, /refused to other sites/);
  assert.is((await call(url, { method: 'DELETE', headers: { 'sec-fetch-site': 'cross-site' } })).status, 403);
  assert.is((await call(url, { method: 'DELETE', headers: { host: `evil.example:${new URL(insp.url).port}` } })).status, 403);
  assert.ok(insp.store.size > 0, 'nothing was cleared by the refused ones');
  // An exchange still under way when the page clears fills nothing afterwards.
  const inFlight = observer.request({ method: 'GET', target: '/in-flight', headers: ['Host', 'web.example.test'] })!;
  let listening!: () => void;
  const ready = new Promise<void>((resolve) => (listening = resolve));
  const evs = readEvents(`${insp.url}/api/events`, (e) => {
    if (e.length > 0) listening(); // its snapshot came: a live page is listening
    return e.some((x) => x.event === 'cleared');
  });
  await ready;
  const r = await call(url, { method: 'DELETE', headers: { origin: insp.url, 'sec-fetch-site': 'same-origin' } });
  assert.is(r.status, 204);
  assert.ok((await evs).some((x) => x.event === 'cleared'));
  inFlight.response(200, ['Content-Type', 'text/plain']);
  inFlight.responseBody(Buffer.from('late'));
  inFlight.end();
  assert.equal((await call(url)).json(), []);
  assert.is(insp.store.bytes, 0);
  feed('GET', '/after-clear', '', 200, 'ok');
  assert.equal((await call(url)).json<CaptureJson[]>().map((c) => c.path), ['/after-clear']);
});

test('port fallback: with the base port taken the next free one is used; an explicit address taken is an error', async () => {
  const blocker = createServer();
  blockers.push(blocker);
  const base = await listen(blocker);
  const other = await startInspector({ basePort: base });
  try {
    const port = Number(new URL(other.url).port);
    assert.ok(port > base && port < base + 10, `${port} after ${base}`);
    assert.is(new URL(other.url).hostname, '127.0.0.1');
    assert.is((await call(`${other.url}/api/requests`)).status, 200);
  } finally {
    await other.close();
  }
  try {
    await startInspector({ address: { host: '127.0.0.1', port: base } });
    assert.unreachable('an explicit address in use must fail');
  } catch (err) {
    assert.instance(err, InspectorListenError);
    assert.match((err as Error).message, /address in use/);
  }
});

test.run();
