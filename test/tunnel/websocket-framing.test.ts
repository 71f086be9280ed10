import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { createHash } from 'node:crypto';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { WS_OP, encodeClosePayload, encodeWsFrame } from '../../src/protocol/ws-frames.js';

// After a 101 the edge is a byte relay: whatever the local service sends, even framing that
// breaks RFC 6455, reaches the visitor byte for byte, and it is the visitor's WebSocket that
// fails with the matching close code. The edge never re-frames (and so never holds a message).

let server: TestServer;
let client: TunnelClient;
let local: net.Server;
const localSockets = new Set<net.Socket>();

/** What the local service sends after its 101, by request path. */
const CASES: Record<string, { bytes: Buffer; code: number }> = {
  '/rsv': { bytes: Buffer.from([0xc2, 0x01, 0x78]), code: 1002 },
  '/masked': { bytes: encodeWsFrame(WS_OP.Binary, Buffer.from('x'), true), code: 1002 },
  '/close-1004': { bytes: encodeWsFrame(WS_OP.Close, encodeClosePayload(1004, 'reserved'), false), code: 1002 },
  // Only the header of a 16 MiB + 1 frame: the limit is enforced before the payload arrives.
  '/too-big': { bytes: Buffer.from([0x82, 127, 0, 0, 0, 0, 0x01, 0, 0, 0x01]), code: 1009 },
};

test.before(async () => {
  server = await startServer();
  local = net.createServer((s) => {
    localSockets.add(s);
    s.on('close', () => localSockets.delete(s));
    s.on('error', () => undefined);
    let head = '';
    const onData = (d: Buffer): void => {
      head += d.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      s.off('data', onData);
      const path = head.split(' ')[1] ?? '';
      const key = /sec-websocket-key: *(\S+)/i.exec(head)?.[1] ?? '';
      const accept = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
      s.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ${accept}\r\n\r\n`);
      const c = CASES[path];
      if (c) s.write(c.bytes);
    };
    s.on('data', onData);
  });
  await new Promise<void>((r) => local.listen(0, '127.0.0.1', r));
  const port = (local.address() as net.AddressInfo).port;
  client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port }, id: 'framing' });
  await withDeadline(client.start(), 10_000, 'start');
});

test.after(async () => {
  await client?.stop();
  for (const s of localSockets) s.destroy();
  local?.close();
  await server?.stop();
});

for (const [path, { bytes }] of Object.entries(CASES)) {
  test(`a local service's bad frame (${path.slice(1)}) reaches the visitor byte for byte after the 101`, async () => {
    const got = await withDeadline(
      new Promise<Buffer>((resolve, reject) => {
        let buf = Buffer.alloc(0);
        const s = net.connect(server.port, '127.0.0.1', () =>
          s.write(`GET ${path} HTTP/1.1\r\nHost: framing.localhost:${server.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`),
        );
        s.on('data', (d: Buffer) => {
          buf = Buffer.concat([buf, d]);
          const end = buf.indexOf('\r\n\r\n');
          if (end >= 0 && buf.length >= end + 4 + bytes.length) {
            s.destroy();
            resolve(buf);
          }
        });
        s.on('error', reject);
      }),
      10_000,
      'relayed bytes',
    );
    const end = got.indexOf('\r\n\r\n');
    assert.match(got.subarray(0, end).toString('latin1'), /^HTTP\/1\.1 101 /);
    assert.equal([...got.subarray(end + 4)], [...bytes]);
  });
}

for (const [path, { code }] of Object.entries(CASES).filter(([p]) => p !== '/too-big')) {
  test(`a local service's bad frame (${path.slice(1)}): the visitor's own WebSocket fails with ${code}`, async () => {
    const ws = await WsClient.connect(`${server.url}${path}`, { host: `framing.localhost:${server.port}` }, 32 * 1024 * 1024, 5_000);
    const messages: Buffer[] = [];
    ws.on('message', (m) => messages.push(m));
    const [got, reason] = await withDeadline(new Promise<[number, string]>((r) => ws.once('close', (c, why) => r([c, why]))), 10_000, 'close');
    assert.is(got, code, `close ${got} ${reason}`);
    assert.ok(reason.length > 0, 'the close says why');
    assert.is(messages.length, 0, 'nothing relayed');
  });
}

test.run();
