import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/deadline.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { listen, streamLargeAnswer, visit, type Local } from './helpers.js';

// Visitors that ask for a large tunnelled answer and never read it. Each one held its stream's
// whole window in burrowd with no timer running (the idle timer is off while an answer is due),
// and nothing bounded how many did: a few hundred from two addresses held hundreds of MiB.

const BIG = 24 * 1024 * 1024;
const MiB = 1024 * 1024;
let local: Local;
/** Answers of the local service cut off before their end (the stream was reset). */
let cut = 0;

test.before(async () => {
  local = await listen(
    http.createServer((req, res) => {
      if (req.url !== '/big') return void res.end('ok');
      streamLargeAnswer(res, BIG, () => cut++);
    }),
  );
});

test.after(async () => {
  await local?.close();
});

interface NonReader {
  sock: net.Socket;
  /** The first bytes of the answer (its status line), then the socket reads nothing more. */
  first: Promise<string>;
}

/** GET /big, read the first chunk, then never read again. */
function nonReader(port: number, host: string, localAddress: string): NonReader {
  const sock = net.connect({ host: '127.0.0.1', port, localAddress });
  sock.on('error', () => undefined);
  sock.write(`GET /big HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
  const first = new Promise<string>((resolve) => {
    sock.once('data', (b: Buffer) => {
      sock.pause();
      resolve(b.toString('latin1', 0, Math.min(b.byteLength, 400)));
    });
    sock.once('close', () => resolve(''));
  });
  return { sock, first };
}

async function bufferedBytes(server: TestServer): Promise<number> {
  const r = await withDeadline(fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${server.adminKey}` } }), 10_000, 'GET /metrics');
  const m = /^burrow_visitor_buffered_bytes (\d+)/m.exec(await r.text());
  assert.ok(m, 'burrow_visitor_buffered_bytes is exported');
  return Number(m[1]);
}

async function withTunnel(args: string[], body: (server: TestServer, host: string) => Promise<void>): Promise<void> {
  const server = await startServer({ workers: 1, args });
  const client = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port } });
  try {
    const { id } = await withDeadline(client.start(), 10_000, 'tunnel start');
    await body(server, `${id}.localhost`);
  } finally {
    await client.stop();
    await server.stop();
  }
}

test('a visitor that never reads a large answer is closed within --send-timeout; its stream is reset and its bytes released; the tunnel and other visitors go on', async () => {
  const SEND_TIMEOUT_S = 2;
  await withTunnel(['--send-timeout', String(SEND_TIMEOUT_S)], async (server, host) => {
    cut = 0;
    const t0 = Date.now();
    const v = nonReader(server.port, host, '127.0.0.1');
    assert.match(await withDeadline(v.first, 5_000, 'answer starts'), /^HTTP\/1\.1 200 /);
    // While it stalls, burrowd holds part of the answer for it, and others are served.
    await eventually(async () => (await bufferedBytes(server)) > 0, 5_000, 'bytes held for the non-reader');
    assert.is((await visit(server.port, host)).status, 200);
    await eventually(() => cut === 1, (SEND_TIMEOUT_S + 6) * 1000, 'the local service sees its answer cut off');
    const elapsed = Date.now() - t0;
    assert.ok(elapsed >= SEND_TIMEOUT_S * 1000 - 200, `cut after ${elapsed} ms: by the send timeout`);
    await eventually(async () => (await bufferedBytes(server)) === 0, 5_000, 'the held bytes are released');
    // What reaches the visitor now is what the kernels held, then the end: not the whole answer.
    let got = 0;
    v.sock.on('data', (b: Buffer) => (got += b.byteLength));
    v.sock.resume();
    await withDeadline(new Promise((r) => v.sock.once('close', r)), 10_000, 'the visitor sees its connection end');
    assert.ok(got < BIG, `${got} of ${BIG} bytes: the answer was cut`);
    // The tunnel is intact.
    assert.is((await visit(server.port, host)).status, 200);
    assert.is((await visit(server.port, host, { path: '/big' }, 20_000)).body.byteLength, BIG);
  });
});

test('the budget of bytes held for visitors that do not read holds: past it that address gets 503, another address is still served', async () => {
  const BUDGET_MIB = 3;
  const NON_READERS = 16;
  await withTunnel(['--visitor-buffer-budget', String(BUDGET_MIB), '--send-timeout', '60'], async (server, host) => {
    const readers: NonReader[] = [];
    const statuses: string[] = [];
    try {
      // How many fill the budget depends on how much each one's socket buffers (Node 22 raised
      // the default high-water mark fourfold): 16 leave room for three past it on Node 20 to 24.
      for (let i = 0; i < NON_READERS; i++) {
        const v = nonReader(server.port, host, '127.0.0.1');
        readers.push(v);
        statuses.push((await withDeadline(v.first, 10_000, `answer ${i}`)).split('\r\n')[0]!);
        // Let its answer fill the kernels' buffers and stall.
        await new Promise((r) => setTimeout(r, 400));
      }
      const held = await bufferedBytes(server);
      console.log(`${NON_READERS} non-reading visitors, budget ${BUDGET_MIB} MiB: ${(held / MiB).toFixed(2)} MiB held; ${statuses.join(' | ')}`);
      assert.ok(held <= (BUDGET_MIB + 1) * MiB, `${held} bytes held, budget ${BUDGET_MIB} MiB (and a smaller window's overshoot)`);
      assert.ok(statuses.filter((s) => s.startsWith('HTTP/1.1 503')).length >= 3, 'past the budget this address is told to wait');
      assert.ok(statuses.filter((s) => s.startsWith('HTTP/1.1 200')).length >= 2, 'the first ones were served');
      // Another address is served meanwhile, and so is a reader's large download.
      const other = http.request({ host: '127.0.0.1', port: server.port, localAddress: '127.0.0.2', path: '/', headers: { host }, agent: false });
      const status = await withDeadline(
        new Promise<number>((resolve, reject) => {
          other.on('error', reject);
          other.on('response', (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          });
          other.end();
        }),
        5_000,
        'GET from another address',
      );
      assert.is(status, 200);
    } finally {
      for (const v of readers) v.sock.destroy();
    }
    await eventually(async () => (await bufferedBytes(server)) === 0, 5_000, 'all released once they went');
    assert.is((await visit(server.port, host)).status, 200);
  });
});

test('a burst of non-readers that arrive at once (each admitted before any byte was held): the ceiling, twice the budget, holds', async () => {
  const BUDGET_MIB = 2;
  await withTunnel(['--visitor-buffer-budget', String(BUDGET_MIB), '--send-timeout', '60'], async (server, host) => {
    const readers = Array.from({ length: 16 }, (_, i) => nonReader(server.port, host, i % 2 ? '127.0.0.1' : '127.0.0.2'));
    try {
      await withDeadline(Promise.all(readers.map((v) => v.first)), 10_000, 'every answer starts (or the connection ends)');
      let peak = 0;
      for (let i = 0; i < 10; i++) {
        peak = Math.max(peak, await bufferedBytes(server));
        await new Promise((r) => setTimeout(r, 200));
      }
      console.log(`16 non-readers at once, budget ${BUDGET_MIB} MiB: at most ${(peak / MiB).toFixed(2)} MiB held`);
      assert.ok(peak > 0, 'some bytes were held');
      // Past the ceiling, a visitor is cut at its next chunk: what is over it is one chunk each at most.
      assert.ok(peak <= (2 * BUDGET_MIB + 1) * MiB, `${peak} bytes held, ceiling ${2 * BUDGET_MIB} MiB`);
    } finally {
      for (const v of readers) v.sock.destroy();
    }
    await eventually(async () => (await bufferedBytes(server)) === 0, 5_000, 'all released once they went');
    assert.is((await visit(server.port, host)).status, 200);
  });
});

test.run();
