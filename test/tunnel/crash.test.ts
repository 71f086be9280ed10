import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, visit, sleep, type Local } from './helpers.js';

// A shard that crashes takes its control connections with it: the tunnel's session is
// closed with the counters last reported, the client reconnects (to a surviving or the
// restarted shard) under the same id, and traffic flows again.

let server: TestServer;
let local: Local;
let client: TunnelClient;

test.before(async () => {
  server = await startServer({ args: ['--fault-injection'] });
  local = await listen(http.createServer((req, res) => req.resume().on('end', () => res.end('pong'))));
  client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'crashy' });
  await withDeadline(client.start(), 10_000, 'start');
});

test.after(async () => {
  await client?.stop();
  await local?.close();
  await server?.stop();
});

interface Row {
  id: string;
  tunnel_id: string;
  requests: number;
  bytes_in: number;
  disconnected_at: string | null;
}
async function sessions(): Promise<Row[]> {
  const r = await api(server, 'GET', '/sessions?all=true', { key: server.adminKey });
  return (r.body as Row[]).filter((s) => s.tunnel_id === 'crashy');
}

test('shard crash: session closed with its counters, client back on the same id', async () => {
  const host = `crashy.localhost:${server.port}`;
  for (let i = 0; i < 4; i++) assert.is((await visit(server.port, host, { method: 'POST', body: 'abcd' })).status, 200);
  // Let the shard report its deltas (≤ 250 ms) so the crash loses nothing reported.
  await sleep(600);
  let reconnected = false;
  client.once('reconnecting', () => (reconnected = true));
  // The crash endpoint crashes whichever shard the kernel hands the connection to: repeat
  // until it is the one holding the control connection.
  for (let i = 0; i < 12 && !reconnected; i++) {
    await api(server, 'POST', '/__fault/crash-shard', { key: server.adminKey }).catch(() => undefined);
    await sleep(700);
  }
  assert.ok(reconnected, 'the control connection went down with its shard');
  await eventually(async () => (await sessions()).some((s) => s.disconnected_at !== null && s.requests === 4 && s.bytes_in === 16), 10_000, 'old session closed with its counters');
  await eventually(async () => (await visit(server.port, host)).status === 200, 15_000, 'tunnel back');
  await eventually(async () => (await sessions()).filter((s) => s.disconnected_at === null).length === 1, 5_000, 'one live session after the reconnect');
});

test.run();
