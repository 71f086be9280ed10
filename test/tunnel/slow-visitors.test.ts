import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, visit, type Local } from './helpers.js';

// Slow visitors slow only themselves: hundreds of uploads that send their headers and part of
// the body, then nothing, beside normal requests on the same tunnel; and the per-visitor-IP
// bound at the edge (--visitor-concurrency) answers 429 past it, other addresses unaffected.

const STALLED = 300;
/** Generous: a normal request takes milliseconds; this only separates "served" from "queued". */
const PROMPT_MS = 5_000;
let local: Local;
let uploadsSeen = 0;

test.before(async () => {
  local = await listen(
    http.createServer((req, res) => {
      if (req.url === '/upload') {
        uploadsSeen++;
        req.resume();
        req.on('end', () => res.end('stored'));
      } else res.end('ok');
    }),
  );
  (local.server as http.Server).maxConnections = 10_000;
});

test.after(async () => {
  await local?.close();
});

/** A visitor that sends the head and 1 KB of a 1 MB body, then stalls. Resolves with what it reads first. */
function stalledUpload(port: number, host: string, localAddress = '127.0.0.1'): { sock: net.Socket; first: Promise<string> } {
  const sock = net.connect({ host: '127.0.0.1', port, localAddress });
  sock.on('error', () => undefined);
  sock.write(`POST /upload HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 1048576\r\nContent-Type: application/octet-stream\r\n\r\n`);
  sock.write(Buffer.alloc(1024, 0x61));
  const first = new Promise<string>((resolve) => {
    sock.once('data', (b: Buffer) => resolve(b.toString('latin1')));
    sock.once('close', () => resolve(''));
  });
  return { sock, first };
}

async function withTunnel(args: string[], body: (server: TestServer, host: string) => Promise<void>): Promise<void> {
  const server = await startServer({ args });
  const client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port } });
  try {
    const { id } = await withDeadline(client.start(), 10_000, 'tunnel start');
    await body(server, `${id}.localhost`);
  } finally {
    await client.stop();
    await server.stop();
  }
}

test(`${STALLED} stalled uploads do not hold up normal requests on the same tunnel`, async () => {
  await withTunnel(['--visitor-concurrency', '10000'], async (server, host) => {
    uploadsSeen = 0;
    const stalled = Array.from({ length: STALLED }, () => stalledUpload(server.port, host));
    try {
      // As many uploads as the client's pool of local connections holds (256) are in.
      await eventually(() => uploadsSeen >= 256, 30_000, '256 uploads reach the local service');
      const t0 = Date.now();
      const normal = await Promise.all(Array.from({ length: 20 }, (_, i) => visit(server.port, host, { path: `/n${i}` }, PROMPT_MS)));
      assert.equal(normal.map((r) => r.status), Array(20).fill(200));
      const small = await visit(server.port, host, { method: 'POST', path: '/upload', body: 'x'.repeat(10_000) }, PROMPT_MS);
      assert.is(small.body.toString(), 'stored');
      console.log(`20 GETs and one complete upload beside ${STALLED} stalled ones: ${Date.now() - t0} ms`);
      // And the stalled ones are not queued behind each other either.
      await eventually(() => uploadsSeen >= STALLED + 1, 30_000, `all ${STALLED} uploads reach the local service`);
    } finally {
      for (const s of stalled) s.sock.destroy();
    }
  });
});

test('over --visitor-concurrency: 429 problem+json for that address only, released when its requests end', async () => {
  const LIMIT = 5;
  await withTunnel(['--visitor-concurrency', String(LIMIT)], async (server, host) => {
    // Two shards, each with its own count: 2 × LIMIT + 1 requests put LIMIT + 1 on one of them.
    const stalled = Array.from({ length: 2 * LIMIT + 1 }, () => stalledUpload(server.port, host));
    try {
      const firsts = await Promise.all(stalled.map((s) => withDeadline(Promise.race([s.first, new Promise<string>((r) => setTimeout(() => r('(stalled)'), 3_000))]), 10_000, 'first bytes')));
      const refused = firsts.filter((f) => f.startsWith('HTTP/1.1 429'));
      assert.ok(refused.length >= 1, firsts.map((f) => f.split('\r\n')[0]).join(' | '));
      assert.ok(refused.length <= LIMIT + 1, `${refused.length} refused`);
      assert.match(refused[0]!, /content-type: application\/problem\+json/i);
      assert.match(refused[0]!, /retry-after: 1/i);
      assert.match(refused[0]!, /concurrent requests from 127\.0\.0\.1/);
      // Another address is not affected.
      const other = await visit2(server.port, host, '127.0.0.2');
      assert.is(other, 200);
    } finally {
      for (const s of stalled) s.sock.destroy();
    }
    // The aborted uploads released their counts.
    await eventually(async () => (await visit(server.port, host)).status === 200, 10_000, 'same address served again');
    const again = await Promise.all(Array.from({ length: LIMIT }, () => visit(server.port, host, {}, PROMPT_MS)));
    assert.equal(again.map((r) => r.status), Array(LIMIT).fill(200));
  });
});

/** One GET from a given loopback source address; resolves with the status. */
function visit2(port: number, host: string, localAddress: string): Promise<number> {
  return withDeadline(
    new Promise<number>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, localAddress, path: '/', headers: { host }, agent: false });
      req.on('error', reject);
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.end();
    }),
    PROMPT_MS,
    `GET from ${localAddress}`,
  );
}

test.run();
