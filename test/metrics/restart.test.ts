import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';
import { parseExposition, valueOf, type Family } from './exposition.js';

// A shard's counters live on the shard until it reports them; when it crashes, main keeps its
// last totals, so no counter goes backwards and traffic after the restart adds to them. One
// shard: every count is on the shard that crashes.

let server: TestServer;
let local: Local;
let client: TunnelClient;
let metricsPort: number;

async function scrape(): Promise<Map<string, Family>> {
  const r = await withDeadline(fetch(`http://127.0.0.1:${metricsPort}/metrics`), 10_000, 'scrape');
  assert.is(r.status, 200);
  return parseExposition(await r.text());
}

/** Every counter series (and histogram count) as name{labels} → value. */
function counters(m: Map<string, Family>): Map<string, number> {
  const out = new Map<string, number>();
  for (const f of m.values()) {
    if (f.type !== 'counter' && f.type !== 'histogram') continue;
    for (const s of f.samples) if (f.type === 'counter' || s.name.endsWith('_count')) out.set(`${s.name}${JSON.stringify(s.labels)}`, s.value);
  }
  return out;
}

test.before(async () => {
  server = await startServer({ workers: 1, args: ['--fault-injection', '--metrics-addr', '127.0.0.1:0'] });
  metricsPort = Number(/metrics on http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(server.stdout())![1]);
  local = await listen(http.createServer((req, res) => req.resume().on('end', () => res.end('pong'))));
  client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'survivor' });
  await withDeadline(client.start(), 10_000, 'start');
});

test.after(async () => {
  await client?.stop();
  await local?.close();
  await server?.stop();
});

test('a shard restart keeps every counter: nothing goes backwards, new traffic adds on', async () => {
  const host = `survivor.localhost:${server.port}`;
  for (let i = 0; i < 3; i++) assert.is((await visit(server.port, host)).status, 200);
  assert.is((await visit(server.port, `nobody.localhost:${server.port}`)).status, 404);
  // Wait until main has the shard's report: that much must survive the crash.
  await eventually(
    async () => {
      const m = await scrape();
      return valueOf(m, 'burrow_visitor_requests_total', { code_class: '2xx' }) === 3 && valueOf(m, 'burrow_visitor_requests_total', { code_class: '4xx' }) === 1 && valueOf(m, 'burrow_tunnel_bytes_total', { direction: 'out' }) === 12;
    },
    10_000,
    'traffic reported',
  );
  const before = counters(await scrape());
  assert.is(before.get('burrow_shard_restarts_total{}'), 0);

  let reconnected = false;
  client.once('reconnecting', () => (reconnected = true));
  await api(server, 'POST', '/__fault/crash-shard', { key: server.adminKey }).catch(() => undefined);
  // The only shard restarts; the client comes back on the same id.
  await eventually(async () => valueOf(await scrape(), 'burrow_shard_restarts_total') === 1, 30_000, 'restart counted');
  assert.ok(reconnected || (await eventually(() => reconnected, 10_000, 'client reconnecting')));
  const after = counters(await scrape());
  for (const [series, v] of before) assert.ok((after.get(series) ?? -1) >= v, `${series}: ${v} before the restart, ${after.get(series)} after`);
  assert.is(valueOf(await scrape(), 'burrow_visitor_requests_total', { code_class: '2xx' }), 3, 'the dead shard\'s requests are still counted');

  await eventually(async () => (await visit(server.port, host)).status === 200, 30_000, 'tunnel back');
  // The new shard's 200s add to the old shard's 3. At least one: a probe that gave up on a slow
  // answer (a loaded machine) may still have been answered 200 and counted.
  await eventually(async () => valueOf(await scrape(), 'burrow_visitor_requests_total', { code_class: '2xx' }) >= 4, 10_000, 'new traffic adds on');
  // Bytes come with the tunnel's counters (tunnel-stats, every 250 ms), not with the edge's: later.
  await eventually(async () => valueOf(await scrape(), 'burrow_tunnel_bytes_total', { direction: 'out' }) >= 16, 5_000, 'new bytes add on');
});

test.run();
