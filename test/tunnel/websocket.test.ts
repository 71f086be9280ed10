import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { loadUws } from '../../src/http/uws-loader.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { WsClient, WsRefused } from '../../src/protocol/ws-client.js';
import { visit } from './helpers.js';
import type { us_listen_socket } from '@trufflesuite/uws-js-unofficial';

// WebSocket upgrades through an HTTP tunnel: the local service (a uWS WebSocket echo server)
// gets the handshake, messages pass both ways unchanged, close codes come back, and an
// upgrade the local service refuses is an ordinary response.

const { uws } = loadUws();
let server: TestServer;
let client: TunnelClient;
let listenSocket: us_listen_socket | null = null;
let localPort = 0;
let seenHeaders: Record<string, string> = {};
const sockets = new Set<{ close(): void }>();

test.before(async () => {
  server = await startServer();
  const app = uws.App();
  app.ws('/echo', {
    maxPayloadLength: 16 * 1024 * 1024,
    upgrade: (res, req, context) => {
      seenHeaders = {};
      req.forEach((k, v) => (seenHeaders[k] = v));
      res.upgrade({}, req.getHeader('sec-websocket-key'), req.getHeader('sec-websocket-protocol'), req.getHeader('sec-websocket-extensions'), context);
    },
    open: (ws) => void sockets.add(ws),
    close: (ws) => void sockets.delete(ws),
    message: (ws, m, isBinary) => {
      if (Buffer.from(m).toString() === 'close-me') ws.end(4001, 'bye');
      else ws.send(m, isBinary);
    },
  });
  app.get('/*', (res) => void res.writeStatus('426 Upgrade Required').end('websocket only'));
  await new Promise<void>((r) =>
    app.listen('127.0.0.1', 0, (s) => {
      listenSocket = s || null;
      localPort = uws.us_socket_local_port(s as us_listen_socket);
      r();
    }),
  );
  client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: localPort }, id: 'sockets' });
  await withDeadline(client.start(), 10_000, 'start');
});

test.after(async () => {
  await client?.stop();
  for (const s of sockets) s.close();
  if (listenSocket) uws.us_listen_socket_close(listenSocket);
  await server?.stop();
});

function connect(path = '/echo'): Promise<WsClient> {
  return WsClient.connect(`${server.url}${path}`, { host: `sockets.localhost:${server.port}` }, 32 * 1024 * 1024, 5_000);
}

function nextMessage(ws: WsClient): Promise<Buffer> {
  return withDeadline(new Promise<Buffer>((r) => ws.once('message', r)), 5_000, 'message');
}

test('messages pass both ways, small and large, on several connections', async () => {
  for (let c = 0; c < 4; c++) {
    const ws = await connect();
    assert.is(seenHeaders['x-forwarded-for'], '127.0.0.1');
    assert.is(seenHeaders['sec-websocket-extensions'], undefined);
    for (const size of [1, 125, 126, 65_535, 65_536, 3 * 1024 * 1024]) {
      const m = Buffer.alloc(size, c + size);
      const back = nextMessage(ws);
      ws.send(m);
      assert.ok((await back).equals(m), `size ${size}`);
    }
    ws.close();
  }
});

test('a close from the local service reaches the visitor with its code', async () => {
  const ws = await connect();
  const closed = withDeadline(new Promise<[number, string]>((r) => ws.once('close', (c, why) => r([c, why]))), 5_000, 'close');
  ws.send(Buffer.from('close-me'));
  const [code, why] = await closed;
  assert.is(code, 4001);
  assert.is(why, 'bye');
});

test('an upgrade the local service refuses is a plain response', async () => {
  const err = await connect('/not-ws').then(() => null, (e: unknown) => e);
  assert.instance(err, WsRefused);
  assert.is((err as WsRefused).status, 426);
  // and the tunnel still serves plain requests
  assert.is((await visit(server.port, `sockets.localhost:${server.port}`, { path: '/plain' })).status, 426);
});

test.run();
