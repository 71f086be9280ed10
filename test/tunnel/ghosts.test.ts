import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, eventually } from '../helpers/fixtures.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, encodeFrame, type OpenRequest } from '../../src/protocol/frames.js';
import { visit } from './helpers.js';
import { lanePorts } from '../helpers/ports.js';

// An admission that completes after its control connection is gone is undone: no id left
// routed to nobody, no port left bound, no session left open.

const RANGE = lanePorts(100);
const N = 20;
let server: TestServer;

test.before(async () => {
  server = await startServer({ workers: 2, args: ['--tcp-port-range', `${RANGE.min}-${RANGE.max}`, '--max-tcp-ports-per-user', '100'] });
});

test.after(async () => {
  await server?.stop();
});

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen({ host: '127.0.0.1', port, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

/** Hello + Open, then the socket is destroyed at once (before any answer). */
async function openAndVanish(req: OpenRequest): Promise<void> {
  const ws = await WsClient.connect(`${server.url}/tunnel/v1/connect`, { authorization: `Bearer ${server.adminKey}` }, MAX_FRAME_BYTES, 5_000);
  ws.send(encodeFrame([F.Hello, { v: PROTOCOL_VERSION, agent: 'ghost' }]));
  ws.send(encodeFrame([F.Open, 1, req]));
  // WsClient corks for the loop turn: put both frames on the wire now, then vanish.
  ws.socket.uncork();
  ws.socket.destroy();
}

test(`open and destroy the socket at once, ${N} times (HTTP and TCP): nothing stays behind`, async () => {
  await Promise.all(Array.from({ length: N }, (_, i) => openAndVanish({ type: 'http', id: `ghost-h-${i}` })));
  await Promise.all(Array.from({ length: N }, (_, i) => openAndVanish({ type: 'tcp', id: `ghost-t-${i}` })));

  await eventually(
    async () => {
      const r = await api(server, 'GET', '/tunnels', { key: server.adminKey });
      return r.status === 200 && (r.body as unknown[]).length === 0;
    },
    15_000,
    '/tunnels empty',
  );
  for (let i = 0; i < N; i++) assert.is((await visit(server.port, `ghost-h-${i}.localhost`)).status, 404, `ghost-h-${i}`);
  const bound: number[] = [];
  for (let port = RANGE.min; port <= RANGE.max; port++) if (!(await canBind(port))) bound.push(port);
  assert.equal(bound, [], 'no port of the range stays bound');
  await eventually(
    async () => {
      const [r] = await server.sql<{ open: number }[]>`select count(*)::int as open from sessions where disconnected_at is null`;
      return r!.open === 0;
    },
    15_000,
    'every session closed',
  );
});

test.run();
