import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import '../helpers/property.js';
import { NameSet, isName, requestHeaders, tunnelResponseHeaders } from '../../src/protocol/http-headers.js';

test('a NameSet matches its names in any case, and nothing else', () => {
  const s = new NameSet(['connection', 'te']);
  for (const n of ['connection', 'Connection', 'CONNECTION', 'cOnNeCtIoN', 'te', 'TE', 'Te']) assert.ok(s.has(n), n);
  for (const n of ['', 'connectio', 'connections', 'Date', 'tee', 'x'.repeat(70), 'conneCtiön']) assert.not.ok(s.has(n), n);
  assert.throws(() => new NameSet(['Connection']), /lower-case/);
});

test('isName is an ASCII lower-casing comparison without the copy, for token characters and others', () => {
  const tchar = fc.constantFrom(...'!#$%&\'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@[]{}\r\n\0 ÄäÖ'.split(''));
  fc.assert(
    fc.property(fc.string({ unit: tchar, maxLength: 16 }), fc.string({ unit: tchar, maxLength: 16 }), (name, other) => {
      // ASCII case only: a header name is a token; Unicode folding (K-sign to k) is not HTTP's.
      const asciiLower = (t: string) => t.replace(/[A-Z]/g, (c) => c.toLowerCase());
      const lower = asciiLower(other);
      assert.is(isName(name, lower), asciiLower(name) === lower);
      assert.ok(isName(name, asciiLower(name)));
      assert.is(isName('\u212Aeep-alive', 'keep-alive'), false);
    }),
    { numRuns: 2000 },
  );
  // A control character one bit away from a letter or '-' is not that letter.
  assert.not.ok(isName('\rontent-length', 'content-length'));
  assert.not.ok(isName('content\rlength', 'content-length'));
});

test('tunnel answers: Connection: close drops a header named close; keep-alive drops only hop-by-hop fields', () => {
  const closed = tunnelResponseHeaders(['Connection', 'close', 'Close', 'x', 'Date', 'd'], 'a.localhost');
  assert.equal(closed, { headers: ['Date', 'd'], contentLength: null });
  const kept = tunnelResponseHeaders(['Server', 'nginx', 'Connection', 'keep-alive', 'Keep-Alive', 'timeout=5', 'Content-Length', '14', 'ETag', '"e"'], 'a.localhost');
  assert.equal(kept, { headers: ['Server', 'nginx', 'ETag', '"e"'], contentLength: 14 });
});

test('request headers: hop-by-hop, Connection-listed and forged client headers go in any case; the edge adds its own', () => {
  const out = requestHeaders(
    ['HOST', 'a.example', 'CONNECTION', 'keep-alive, X-Drop-Me, Content-Length', 'X-DROP-ME', '1', 'Keep-Alive', 'timeout=5', 'X-Forwarded-For', '6.6.6.6', 'TRUE-CLIENT-IP', '6.6.6.6', 'Content-Length', '3', 'Accept', '*/*', 'TE', 'trailers'],
    { ip: '10.0.0.1', forwardedFor: '10.0.0.1', proto: 'http' },
    false,
    'a.example',
  );
  assert.equal(out, ['HOST', 'a.example', 'Content-Length', '3', 'Accept', '*/*', 'x-forwarded-for', '10.0.0.1', 'x-forwarded-proto', 'http', 'x-forwarded-host', 'a.example', 'x-real-ip', '10.0.0.1']);
  const up = requestHeaders(['Host', 'a', 'CONNECTION', 'Upgrade', 'UPGRADE', 'websocket, h2c'], { ip: '1.1.1.1', forwardedFor: '1.1.1.1', proto: 'http' }, true, 'a');
  assert.equal(up.slice(0, 6), ['Host', 'a', 'CONNECTION', 'Upgrade', 'UPGRADE', 'websocket']);
});

test('tunnel answers: framing and Connection-listed names go in any case, lengths fold, a second length is refused', () => {
  const r = tunnelResponseHeaders(['Content-Type', 'text/plain', 'CONNECTION', 'X-Secret', 'x-secret', 'a', 'CONTENT-LENGTH', '5', 'content-length', '5', 'Transfer-Encoding', 'chunked', 'Set-Cookie', 'a=b; Domain=example.com'], 'app.example.com');
  assert.equal(r, { headers: ['Content-Type', 'text/plain', 'Set-Cookie', 'a=b'], contentLength: 5 });
  assert.type(tunnelResponseHeaders(['Content-Length', '5', 'CONTENT-LENGTH', '6'], 'h'), 'string');
});

test.run();
