// The status block and summary of `burrow start`: every tunnel under Forwarding with its name,
// URL and local target; a failed tunnel in place of its URL; ngrok's figures a row per tunnel
// (before, `burrow start` showed only "total 1 open 0"); versions, server and latency.
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
  const web = new ExposeStats(0);
  const db = new ExposeStats(0);
  const req = { method: 'GET', path: '/', status: 200, durationMs: 5, bytesIn: 1, bytesOut: 2 };
  const conn = { remote: '1.2.3.4:5', durationMs: 50, bytesIn: 3, bytesOut: 4 };
  s.addRequest(req, 1000);
  web.addRequest(req, 1000);
  s.addConnection(conn, 1000);
  db.addConnection(conn, 1000);
  db.openStreams = 1;
  info.tunnels[0]!.stats = web;
  info.tunnels[1]!.stats = db;
  const block = renderBlock(info, s, plain, 1000).join('\n');
  assert.match(block, /Forwarding\s+web  http:\/\/myapp\.localhost:8080 → http:\/\/localhost:3000\n\s+db   \(waiting\) → tcp:\/\/localhost:5432\n\s+api  failed: tunnel id "held" is taken\n/);
  // The table of `burrow http`, a row per tunnel: an http tunnel counts requests, a tcp one connections.
  assert.match(
    block,
    /\nRequests\/Conns {9}ttl {5}opn {5}rt1 {5}rt5 {5}p50 {5}p90\n {18}web  1 {7}0 {7}0\.02 {4}0\.00 {4}5ms {5}5ms\n {18}db   1 {7}1 {7}0\.02 {4}0\.00 {4}50ms {4}50ms\n {18}api  0 {7}0 {7}0\.00 {4}0\.00 {4}- {7}-\n/,
    block,
  );
  assert.match(summaryLine(info, s, 1000), /^burrow: 3 tunnels closed after 1s · 1 request, 1 connection · in 4 B · out 6 B$/);
});

test('all http: the table is headed Requests; narrow: each tunnel\'s figures wrap under its name', () => {
  const info: ScreenInfo = {
    tunnels: [
      { name: 'web', type: 'http', url: 'http://a.localhost:8080', local: 'http://localhost:3000', failed: null, stats: new ExposeStats(0) },
      { name: 'api', type: 'http', url: 'http://b.localhost:8080', local: 'http://localhost:3001', failed: null, stats: new ExposeStats(0) },
    ],
    account: null,
    state: 'online',
    stateDetail: null,
  };
  assert.match(renderBlock(info, new ExposeStats(0), plain, 0).join('\n'), /\nRequests\s+ttl\s+opn\s+rt1\s+rt5\s+p50\s+p90\n\s+web\s+0\s/);
  const narrow = renderBlock(info, new ExposeStats(0), plain, 0, 40);
  for (const l of narrow) assert.ok(l.length <= 40, l);
  assert.match(narrow.join('\n'), /Requests\s+web  ttl 0  opn 0/);
});

test('the versions of both ends, the server and the latency to it; both uptime spans', () => {
  const info: ScreenInfo = {
    tunnels: [{ name: 'http', type: 'http', url: 'http://a.localhost:8080', local: 'http://localhost:3000', failed: null }],
    account: null,
    state: 'online',
    stateDetail: null,
    version: '0.9.0',
    server: { url: 'https://burrow.example.com', version: '0.9.1', latencyMs: 23 },
    connectedAtMs: 60_000,
  };
  const block = renderBlock(info, new ExposeStats(0), plain, 125_000).join('\n');
  assert.match(block, /\nVersion {11}0\.9\.0\nServer {12}https:\/\/burrow\.example\.com \(burrowd 0\.9\.1\)\nLatency {11}23ms\n/);
  assert.match(block, /\nUptime {12}2m 5s since started   this connection 1m 5s\n/);
  // An older server says no version; before the first heartbeat there is no latency.
  const older = renderBlock({ ...info, server: { url: 'http://x:8080', version: null, latencyMs: null } }, new ExposeStats(0), plain, 0).join('\n');
  assert.match(older, /\nServer {12}http:\/\/x:8080\nLatency {11}-\n/);
});

test('one tunnel: the block and summary of burrow http, unnamed', () => {
  const info: ScreenInfo = { tunnels: [{ name: 'http', type: 'http', url: 'http://a.localhost:8080', local: 'http://localhost:3000', failed: null }], account: null, state: 'online', stateDetail: null };
  const block = renderBlock(info, new ExposeStats(0), plain, 0).join('\n');
  assert.match(block, /Forwarding\s+http:\/\/a\.localhost:8080 → http:\/\/localhost:3000\n/);
  assert.match(summaryLine(info, new ExposeStats(0), 0), /^burrow: http:\/\/a\.localhost:8080 closed after 0s · 0 requests · /);
});

test.run();
