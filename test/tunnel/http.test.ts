import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { TunnelClient } from '../../src/tunnel/client.js';
import { listen, visit, type Local } from './helpers.js';

let server: TestServer;
let local: Local;
let client: TunnelClient;
let id = '';

test.before(async () => {
  server = await startServer();
  local = await listen(
    http.createServer((req, res) => {
      if (req.url === '/echo') {
        res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'X-Seen-Headers': JSON.stringify(req.rawHeaders) });
        req.pipe(res);
        return;
      }
      res.writeHead(200, { 'Content-Type': 'text/plain', 'X-Mixed-Case': 'yes' });
      res.end(`hello ${req.method} ${req.url}`);
    }),
  );
  client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port } });
  ({ id } = await client.start());
});

test.after(async () => {
  await client?.stop();
  await local?.close();
  await server?.stop();
});

test('GET through the tunnel', async () => {
  for (let i = 0; i < 6; i++) {
    const r = await visit(server.port, `${id}.localhost`, { path: `/x?i=${i}` });
    assert.is(r.status, 200);
    assert.is(r.body.toString(), `hello GET /x?i=${i}`);
    assert.ok(r.rawHeaders.includes('X-Mixed-Case'), 'response header case kept');
  }
});

test('POST echo', async () => {
  const body = Buffer.alloc(300_000, 7);
  const r = await visit(server.port, `${id}.localhost`, { method: 'POST', path: '/echo', body });
  assert.is(r.status, 200);
  assert.ok(r.body.equals(body));
});

test('unknown tunnel answers 404 problem+json', async () => {
  const r = await visit(server.port, 'nosuchtunnel.localhost');
  assert.is(r.status, 404);
  assert.is(r.headers['content-type'], 'application/problem+json');
});

test.run();
