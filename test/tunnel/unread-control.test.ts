import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';
import { F } from '../../src/protocol/frames.js';
import { rawPeer } from './raw-peer.js';

// A tunnel client that stops reading its control connection must not make the edge hold what
// visitors keep sending for it: each stream may put one window (2 MiB) of request bytes in
// flight; past 4 MiB unread that the socket does not drain within 2 s (or past 24 MiB at once)
// the connection is closed, long before the heartbeat (30 s here) would notice, and its tunnel
// is gone.

let server: TestServer;

test.before(async () => {
  server = await startServer({ args: ['--heartbeat-interval', '10000'], workers: 1 });
});

test.after(async () => {
  await server?.stop();
});

test('a control connection that stops reading is closed once 4 MiB wait for it over 2 s, and its tunnel ends', async () => {
  const peer = await rawPeer(server.url, server.adminKey);
  const opened = await peer.open({ type: 'http', id: 'unread' });
  assert.is(opened[0], F.Opened);
  // The client reads nothing more (its kernel buffers fill, then the edge's).
  peer.ws.socket.pause();
  const visitors: net.Socket[] = [];
  const body = Buffer.alloc(3 * 1024 * 1024, 0x61);
  for (let i = 0; i < 10; i++) {
    const s = net.connect(server.port, '127.0.0.1', () => {
      s.write(`POST /up${i} HTTP/1.1\r\nHost: unread.localhost:${server.port}\r\nContent-Length: ${body.length}\r\n\r\n`);
      s.write(body);
    });
    s.on('error', () => undefined);
    visitors.push(s);
  }
  try {
    // The peer reads nothing, so it learns of the close only later: the edge's log and the
    // registry say it at once.
    await eventually(() => /does not read its control connection/.test(server.stderr()), 15_000, 'the edge closes the unread connection');
    await eventually(async () => {
      const list = await api(server, 'GET', '/tunnels', { key: server.adminKey });
      return !(list.body as { id: string }[]).some((t) => t.id === 'unread');
    }, 5_000, 'the tunnel is gone');
    peer.ws.socket.resume();
    await withDeadline(peer.closed, 5_000, 'the peer sees the close once it reads');
  } finally {
    for (const s of visitors) s.destroy();
  }
});

test.run();
