import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { F, type Frame, type HttpHead } from '../../src/protocol/frames.js';
import { headersOfRaw, requestHeadBytes } from '../../src/protocol/raw-head.js';
import { rawPeer } from './raw-peer.js';
import { visit } from './helpers.js';

// A request head reaches a client as its fields (every client), or as the bytes the local
// service gets when the client said rawHeads in Hello: the same head either way, X-Forwarded-*
// included, so old and new clients both work with this server.

let server: TestServer;

test.before(async () => {
  server = await startServer({ workers: 1 });
});

test.after(async () => {
  await server?.stop();
});

async function headOf(hello: { rawHeads?: boolean }, id: string, req: { method?: string; body?: string; headers?: Record<string, string> }): Promise<HttpHead> {
  const p = await rawPeer(server.url, server.adminKey, [], id, hello);
  const opened = await p.open({ type: 'http', id });
  assert.is(opened[0], F.Opened);
  void visit(server.port, `${id}.localhost`, { method: req.method, path: '/a?b=1', body: req.body, headers: { 'x-custom': 'yes', ...req.headers } }, 5_000).catch(() => undefined);
  const open = (await p.waitFor((f) => f[0] === F.StreamOpen, 5_000, 'StreamOpen')) as Extract<Frame, [typeof F.StreamOpen, ...unknown[]]>;
  p.ws.close();
  return open[3] as HttpHead;
}

test('a client that did not ask gets the fields; one that did gets the same head as bytes', async () => {
  const fields = await headOf({}, 'heads-old', {});
  assert.is(fields.raw, undefined);
  assert.is(fields.method, 'GET');
  assert.is(fields.target, '/a?b=1');
  const names = fields.headers.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
  for (const n of ['host', 'x-custom', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-real-ip']) assert.ok(names.includes(n), n);

  const raw = await headOf({ rawHeads: true }, 'heads-new', {});
  assert.equal(raw.headers, []);
  assert.ok(raw.raw instanceof Uint8Array);
  const text = Buffer.from(raw.raw).toString('latin1');
  assert.ok(text.startsWith('GET /a?b=1 HTTP/1.1\r\n'), text);
  assert.ok(text.endsWith('\r\n\r\n'));
  // the same fields as the old client's head (the visitors differ only in their port)
  const got = headersOfRaw(raw.raw);
  assert.equal(got.filter((_, i) => i % 2 === 0), fields.headers.filter((_, i) => i % 2 === 0));
  assert.is(raw.chunked, false);
});

test('a body of unknown length: the bytes say Transfer-Encoding: chunked and the head says chunked', async () => {
  const raw = await headOf({ rawHeads: true }, 'heads-chunked', { method: 'POST', body: 'abc', headers: { 'transfer-encoding': 'chunked' } });
  assert.is(raw.chunked, true);
  const text = Buffer.from(raw.raw!).toString('latin1');
  assert.match(text, /\r\nTransfer-Encoding: chunked\r\n\r\n$/);
  assert.not.match(text, /transfer-encoding: chunked/, "the visitor's own framing field is not passed on");
  // what a client without raw heads would have written: the same text
  assert.is(requestHeadBytes({ ...raw, raw: undefined, headers: headersOfRaw(raw.raw!) }, true).toString('latin1'), text);
});

test.run();
