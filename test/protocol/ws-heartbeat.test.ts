import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { WsConnection } from '../../src/protocol/ws-connection.js';
import { eventually } from '../helpers/fixtures.js';

// The heartbeat a cluster link runs on (src/cluster/node-links.ts): a Ping is answered with a
// Pong, and whatever the peer sends refreshes lastSeenMs; a peer that stops answering leaves it
// where it was.

/** Both ends of a WebSocket over a loopback socket. */
async function pair(): Promise<{ client: WsConnection; server: WsConnection; close(): void }> {
  let resolveServer!: (ws: WsConnection) => void;
  const accepted = new Promise<WsConnection>((r) => (resolveServer = r));
  const srv = net.createServer((s) => resolveServer(new WsConnection(s, Buffer.alloc(0), 1024, 'server')));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const sock = net.connect((srv.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise<void>((r) => sock.once('connect', () => r()));
  const client = new WsConnection(sock, Buffer.alloc(0), 1024, 'client');
  const server = await accepted;
  return { client, server, close: () => (client.destroy(), server.destroy(), srv.close()) };
}

test('a ping is answered, and the answer refreshes lastSeenMs', async () => {
  const { client, server, close } = await pair();
  try {
    const before = client.lastSeenMs;
    await new Promise((r) => setTimeout(r, 30));
    client.ping();
    await eventually(() => client.lastSeenMs > before, 2_000, 'pong heard');
    // The other way round too: either end of a link pings.
    const serverBefore = server.lastSeenMs;
    await new Promise((r) => setTimeout(r, 30));
    server.ping();
    await eventually(() => server.lastSeenMs > serverBefore, 2_000, 'pong heard by the server end');
  } finally {
    close();
  }
});

test('a peer that stops reading answers no ping: lastSeenMs stays', async () => {
  const { client, server, close } = await pair();
  try {
    server.socket.pause();
    const before = client.lastSeenMs;
    await new Promise((r) => setTimeout(r, 30));
    client.ping();
    await new Promise((r) => setTimeout(r, 200));
    assert.is(client.lastSeenMs, before);
  } finally {
    close();
  }
});

test.run();
