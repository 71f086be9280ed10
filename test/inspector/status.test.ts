// The status the inspector shows (its /status page and header): tunnels, server, connection
// state, latency and versions, followed from a tunnel client's events, served as
// GET /api/status and pushed to live pages as an SSE `status` event when it changes.
import { EventEmitter } from 'node:events';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startInspector, type Inspector } from '../../src/client/inspector/server.js';
import { trackClient, type StatusJson } from '../../src/client/inspector/status.js';
import type { TunnelClientEvents } from '../../src/client/tunnel-client.js';
import { burrowVersion } from '../../src/version.js';
import { call, readEvents } from './http.js';

let insp: Inspector;

test.before(async () => {
  insp = await startInspector({ address: { host: '127.0.0.1', port: 0 } });
});
test.after(async () => {
  await insp?.close();
});

const status = async () => (await call(`${insp.url}/api/status`)).json<StatusJson>();

test('before the CLI hands a source: the version, and nothing else claimed', async () => {
  const s = await status();
  assert.is(s.version, burrowVersion());
  assert.equal(s.tunnels, []);
  assert.is(s.server.latency_ms, null);
});

test('the tunnels, server and state follow the client; latency and server version are read from it', async () => {
  const client = Object.assign(new EventEmitter<TunnelClientEvents>(), { latencyMs: 12.5 as number | null, serverVersion: '0.9.1' as string | null });
  insp.showStatus(
    trackClient(client, 'https://tunnels.example', [
      { name: 'web', type: 'http', local: 'http://localhost:3000' },
      { name: 'db', type: 'tcp', local: 'localhost:5432' },
    ]),
  );
  let s = await status();
  assert.is(s.state, 'connecting');
  assert.equal(s.tunnels.map((t) => [t.name, t.url, t.local]), [['web', null, 'http://localhost:3000'], ['db', null, 'localhost:5432']]);

  // A live page hears of the change without asking.
  let listening!: () => void;
  const ready = new Promise<void>((resolve) => (listening = resolve));
  const pushed = readEvents(`${insp.url}/api/events`, (e) => {
    if (e.some((x) => x.event === 'status')) listening(); // sent on connect too
    return e.some((x) => x.event === 'status' && (JSON.parse(x.data) as StatusJson).state === 'online');
  });
  await ready;
  client.emit('registered', { tunnel: 'web', id: 'web-7', url: 'https://web-7.tunnels.example', tookOver: false });
  client.emit('registered', { tunnel: 'db', id: 'db-2', url: 'tcp://tunnels.example:40001', tookOver: false });
  const online = (await pushed).map((x) => JSON.parse(x.data) as StatusJson).find((x) => x.state === 'online')!;
  assert.is(online.tunnels[0]!.url, 'https://web-7.tunnels.example');

  s = await status();
  assert.equal(s.server, { url: 'https://tunnels.example', version: '0.9.1', latency_ms: 12.5 });
  assert.equal(s.tunnels.map((t) => [t.name, t.id, t.url]), [['web', 'web-7', 'https://web-7.tunnels.example'], ['db', 'db-2', 'tcp://tunnels.example:40001']]);
  client.latencyMs = 30;
  assert.is((await status()).server.latency_ms, 30);

  client.emit('reconnecting', { attempt: 2, delayMs: 500, reason: 'connection lost' });
  s = await status();
  assert.is(s.state, 'reconnecting');
  assert.match(s.state_detail!, /attempt 2: connection lost/);
  client.emit('tunnel-failed', { tunnel: 'db', code: 'deleted', reason: 'deleted on the server' });
  assert.is((await status()).tunnels[1]!.failed, 'deleted on the server');
  client.emit('closed', { permanent: true, code: 'expired', reason: 'expired' });
  assert.is((await status()).state, 'closed');
});

test('a client without latency or server version (an older one): both null, shown as "—"', async () => {
  insp.showStatus(trackClient(new EventEmitter<TunnelClientEvents>(), 'https://tunnels.example', []));
  const s = await status();
  assert.is(s.server.latency_ms, null);
  assert.is(s.server.version, null);
});

test.run();
