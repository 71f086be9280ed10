// The status block and summary of `burrow start`: every tunnel under Forwarding with its name,
// URL and local target; a failed tunnel in place of its URL; mixed http+tcp counts.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { renderBlock, summaryLine, type ScreenInfo } from '../../src/cli/expose-screen.js';
import { ExposeStats } from '../../src/cli/expose-stats.js';
import { painter } from '../../src/cli/output.js';

const plain = painter({ isTTY: false } as NodeJS.WriteStream);

test('every tunnel on its own Forwarding row; a failed one says why', () => {
  const info: ScreenInfo = {
    tunnels: [
      { name: 'web', type: 'http', url: 'http://myapp.localhost:8080', local: 'http://localhost:3000', failed: null },
      { name: 'db', type: 'tcp', url: null, local: 'tcp://localhost:5432', failed: null },
      { name: 'api', type: 'http', url: null, local: 'https://localhost:8443', failed: 'tunnel id "held" is taken' },
    ],
    account: null,
    state: 'online',
    stateDetail: null,
  };
  const s = new ExposeStats(0);
  s.addRequest({ method: 'GET', path: '/', status: 200, durationMs: 5, bytesIn: 1, bytesOut: 2 });
  s.addConnection({ remote: '1.2.3.4:5', durationMs: 50, bytesIn: 3, bytesOut: 4 });
  const block = renderBlock(info, s, plain, 1000).join('\n');
  assert.match(block, /Forwarding\s+web  http:\/\/myapp\.localhost:8080 → http:\/\/localhost:3000\n\s+db   \(waiting\) → tcp:\/\/localhost:5432\n\s+api  failed: tunnel id "held" is taken\n/);
  assert.match(block, /Connections\s+total 1\s+open 0\n\s*Requests\s+total 1\n/);
  assert.match(summaryLine(info, s, 1000), /^burrow: 3 tunnels closed after 1s · 1 request, 1 connection · in 4 B · out 6 B$/);
});

test('one tunnel: the block and summary of burrow http, unnamed', () => {
  const info: ScreenInfo = { tunnels: [{ name: 'http', type: 'http', url: 'http://a.localhost:8080', local: 'http://localhost:3000', failed: null }], account: null, state: 'online', stateDetail: null };
  const block = renderBlock(info, new ExposeStats(0), plain, 0).join('\n');
  assert.match(block, /Forwarding\s+http:\/\/a\.localhost:8080 → http:\/\/localhost:3000\n/);
  assert.match(summaryLine(info, new ExposeStats(0), 0), /^burrow: http:\/\/a\.localhost:8080 closed after 0s · 0 requests · /);
});

test.run();
