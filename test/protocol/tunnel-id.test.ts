import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { tunnelIdProblem } from '../../src/protocol/tunnel-id.js';

// Look-alike and official-sounding ids are refused at registration.

test('R-LDH labels ("??--") are refused: punycode xn-- and other IDNA-reserved prefixes', () => {
  for (const id of ['xn--pple-43d', 'xn--80ak6aa92e', 'ab--cd', 'a1--b']) {
    assert.match(tunnelIdProblem(id, 'example.com') ?? '', /reserved for internationalised names/, id);
  }
  for (const ok of ['a-b--c', 'my-app', 'abc--d', 'a-x-y']) assert.is(tunnelIdProblem(ok, 'example.com'), null, ok);
});

test('official-sounding ids are reserved', () => {
  for (const id of ['login', 'oauth', 'metrics', 'healthz', 'tunnel', 'docs', 'api', 'auth']) {
    assert.match(tunnelIdProblem(id, 'example.com') ?? '', /is reserved/, id);
  }
});

test.run();
