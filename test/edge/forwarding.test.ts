import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { encodeProxyV2 } from '../../src/protocol/proxy-header.js';
import { parseResponses, rawOrigin, type RawOrigin } from '../tunnel/raw-http.js';

// What the edge believes of a load balancer in front, and what it lets a tunnel tell a browser:
//  - every X-Forwarded-For line is one list read from the right (HAProxy's `option forwardfor`
//    adds a line of its own rather than appending to the client's), the last
//    X-Forwarded-Proto line wins;
//  - --proxy-protocol-from: a PROXY header from any other peer closes the connection;
//  - a tunnel's Set-Cookie loses a Domain naming the base domain (cookie tossing).

const BALANCER = '127.0.0.2';
let server: TestServer;
let origin: RawOrigin;
const clients: TunnelClient[] = [];
let host = '';
let guarded = '';

test.before(async () => {
  server = await startServer({ args: ['--trust-proxy', BALANCER] });
  origin = await rawOrigin((req) => {
    const cookies = req.target === '/cookies' ? `Set-Cookie: a=1; Domain=localhost; Path=/\r\nSet-Cookie: b=2; domain=.LOCALHOST\r\nSet-Cookie: c=3; Path=/; Domain=${host.split(':')[0]}\r\n` : '';
    return `HTTP/1.1 200 OK\r\n${cookies}Content-Length: 2\r\n\r\nok`;
  });
  const start = async (access?: { allowIp: string[] }): Promise<string> => {
    const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: origin.port }, ...(access ? { access } : {}) });
    clients.push(c);
    const r = await withDeadline(c.start(), 10_000, 'tunnel start');
    return `${r.id}.localhost:${server.port}`;
  };
  host = await start();
  guarded = await start({ allowIp: ['10.0.0.0/8'] });
});

test.after(async () => {
  for (const c of clients) await c.stop();
  await origin?.close();
  await server?.stop();
});

/** One request from `from` (127.0.0.2 is the trusted balancer), answered or closed. */
function send(port: number, bytes: string | Buffer, from = BALANCER): Promise<{ text: string; closed: boolean }> {
  return withDeadline(
    new Promise((resolve) => {
      let text = '';
      const s = net.connect({ host: '127.0.0.1', port, localAddress: from }, () => s.write(bytes));
      s.on('data', (d: Buffer) => {
        text += d.toString('latin1');
        if (parseResponses(Buffer.from(text, 'latin1')).length > 0) {
          s.destroy();
          resolve({ text, closed: false });
        }
      });
      s.on('error', () => undefined);
      s.on('close', () => resolve({ text, closed: true }));
    }),
    5_000,
    'request',
  );
}

test('X-Forwarded-For on two lines is one list: the client is the right-most untrusted hop, whatever the first line says', async () => {
  const spoofed = await send(server.port, `GET /xff HTTP/1.1\r\nHost: ${guarded}\r\nX-Forwarded-For: 10.1.2.3\r\nX-Forwarded-For: 8.8.8.8\r\n\r\n`);
  assert.match(spoofed.text, /^HTTP\/1\.1 403 /, spoofed.text);
  const allowed = await send(server.port, `GET /xff-ok HTTP/1.1\r\nHost: ${guarded}\r\nX-Forwarded-For: 8.8.8.8, 10.1.2.3\r\n\r\n`);
  assert.match(allowed.text, /^HTTP\/1\.1 200 /, allowed.text);
  const head = origin.seen.find((r) => r.target === '/xff-ok')!.head;
  assert.match(head, /\r\nx-forwarded-for: 8\.8\.8\.8, 10\.1\.2\.3, 127\.0\.0\.2\r\n/i);
  assert.match(head, /\r\nx-real-ip: 10\.1\.2\.3\r\n/i);
});

test('the last X-Forwarded-Proto line is the nearest proxy\'s', async () => {
  await send(server.port, `GET /proto HTTP/1.1\r\nHost: ${host}\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: http\r\n\r\n`);
  assert.match(origin.seen.find((r) => r.target === '/proto')!.head, /\r\nx-forwarded-proto: http\r\n/i);
});

test('a visitor that is not the trusted balancer has its forwarding headers replaced', async () => {
  const r = await send(server.port, `GET /direct HTTP/1.1\r\nHost: ${guarded}\r\nX-Forwarded-For: 10.1.2.3\r\n\r\n`, '127.0.0.1');
  assert.match(r.text, /^HTTP\/1\.1 403 /, r.text);
});

test('Set-Cookie: a Domain of the base domain is dropped (host-only), the tunnel\'s own host is kept', async () => {
  const r = await send(server.port, `GET /cookies HTTP/1.1\r\nHost: ${host}\r\n\r\n`, '127.0.0.1');
  const cookies = parseResponses(Buffer.from(r.text, 'latin1'))[0]!.header('set-cookie');
  assert.equal(cookies, ['a=1; Path=/', 'b=2', `c=3; Path=/; Domain=${host.split(':')[0]}`]);
});

test('--proxy-protocol-from: a PROXY header from any other peer closes the connection unanswered', async () => {
  const lb = await startServer({ args: ['--proxy-protocol', '--proxy-protocol-from', BALANCER], workers: 1 });
  try {
    const header = encodeProxyV2({ ip: '203.0.113.7', port: 4000 }, { ip: '127.0.0.1', port: lb.port });
    const bytes = Buffer.concat([header, Buffer.from('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')]);
    const refused = await send(lb.port, bytes, '127.0.0.1');
    assert.ok(refused.closed && refused.text === '', refused.text);
    const served = await send(lb.port, bytes, BALANCER);
    assert.match(served.text, /^HTTP\/1\.1 200 /, served.text);
  } finally {
    await lb.stop();
  }
});

test.run();
