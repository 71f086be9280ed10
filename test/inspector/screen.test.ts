// The status block of `burrow http` and `burrow start` names the inspector's address ("Web
// Interface") once for the run, and only when one runs.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { renderBlock, type ScreenInfo, type TunnelRow } from '../../src/cli/expose-screen.js';
import { ExposeStats } from '../../src/cli/expose-stats.js';
import { painter } from '../../src/cli/output.js';

const plain = painter({ isTTY: false } as unknown as NodeJS.WriteStream);
const row = (name: string, type: 'http' | 'tcp', port: number): TunnelRow => ({ name, type, url: `http://${name}.localhost:8080`, local: `${type}://localhost:${port}`, failed: null });
const info = (tunnels: TunnelRow[], webInterface: string | null): ScreenInfo => ({ tunnels, account: null, state: 'online', stateDetail: null, webInterface });
const block = (i: ScreenInfo) => renderBlock(i, new ExposeStats(), plain).join('\n');

test('the Web Interface line shows the inspector address', () => {
  const text = block(info([row('http', 'http', 3000)], 'http://127.0.0.1:4041'));
  assert.match(text, /^Web Interface\s+http:\/\/127\.0\.0\.1:4041$/m);
  assert.match(text, /^Forwarding\s+http:\/\/http\.localhost:8080/m);
});

test('several tunnels (burrow start): one Web Interface line for all of them', () => {
  const text = block(info([row('web', 'http', 3000), row('api', 'http', 3001), row('db', 'tcp', 5432)], 'http://127.0.0.1:4040'));
  assert.is(text.match(/Web Interface/g)?.length, 1, text);
  assert.match(text, /^Web Interface\s+http:\/\/127\.0\.0\.1:4040$/m);
});

test('no inspector (--no-inspect, or only tcp tunnels): no Web Interface line', () => {
  assert.not.match(block(info([row('http', 'http', 3000)], null)), /Web Interface/);
  assert.not.match(block({ tunnels: [row('tcp', 'tcp', 22)], account: null, state: 'online', stateDetail: null }), /Web Interface/);
});

test.run();
