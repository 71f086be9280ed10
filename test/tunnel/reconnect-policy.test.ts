// The client's reconnect policy against a fake burrowd that refuses every upgrade: without a
// Retry-After each wait is at most 1 s, however many attempts; a 503's Retry-After
// is honoured with jitter (never under half of it). And the shard's handshake gate.
import { createServer, type Server } from 'node:http';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { HandshakeGate } from '../../src/edge/handshake-gate.js';
import { withDeadline } from '../helpers/fixtures.js';

/** A server answering every control handshake 503 (with `retryAfter` when given); the times attempts arrived. */
async function refusing(retryAfter: string | null): Promise<{ url: string; attempts: number[]; close(): void }> {
  const attempts: number[] = [];
  const srv: Server = createServer((_req, res) => res.end());
  srv.on('upgrade', (_req, socket) => {
    attempts.push(Date.now());
    const body = '{"detail":"busy"}';
    socket.end(`HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n${retryAfter === null ? '' : `retry-after: ${retryAfter}\r\n`}content-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(srv.address() as { port: number }).port}`, attempts, close: () => srv.close() };
}

function delays(c: TunnelClient, n: number): Promise<number[]> {
  const seen: number[] = [];
  return withDeadline(
    new Promise((resolve) =>
      c.on('reconnecting', (r) => {
        seen.push(r.delayMs);
        if (seen.length === n) resolve(seen);
      }),
    ),
    30_000,
    `${n} reconnect attempts`,
  );
}

test('no Retry-After: every wait is at most 1 s, attempt after attempt', async () => {
  const srv = await refusing(null);
  const c = new TunnelClient({ server: srv.url, token: 'bk_x', type: 'http', local: { host: '127.0.0.1', port: 9 } });
  c.startAll().catch(() => undefined);
  try {
    const d = await delays(c, 10);
    // (The old backoff doubled to 30 s: its 5th wait was 2 s or more.)
    assert.ok(Math.max(...d) <= 1_000, `waits ${d.join(', ')}`);
  } finally {
    await c.stop();
    srv.close();
  }
});

test('a 503 with Retry-After: 2 is honoured with jitter: waits of 1 to 2 s, and the server sees no attempt sooner', async () => {
  const srv = await refusing('2');
  const c = new TunnelClient({ server: srv.url, token: 'bk_x', type: 'http', local: { host: '127.0.0.1', port: 9 } });
  c.startAll().catch(() => undefined);
  try {
    const d = await delays(c, 3);
    for (const x of d) assert.ok(x >= 1_000 && x <= 2_000, `waits ${d.join(', ')}`);
    const gaps = srv.attempts.slice(1).map((t, i) => t - srv.attempts[i]!);
    for (const g of gaps) assert.ok(g >= 990, `gaps between attempts ${gaps.join(', ')} ms`);
  } finally {
    await c.stop();
    srv.close();
  }
});

test('the handshake gate: at most its bound at once; a finished handshake frees its place', () => {
  const gate = new HandshakeGate(2, 2);
  const a = gate.tryEnter('10.0.0.1');
  assert.ok(a);
  const b = gate.tryEnter('10.0.0.2');
  assert.ok(b);
  assert.is(gate.tryEnter('10.0.0.3'), null);
  a.leave();
  a.leave(); // idempotent: frees one place only
  assert.ok(gate.tryEnter('10.0.0.3'));
  assert.is(gate.tryEnter('10.0.0.4'), null);
});

test('the handshake gate: one address group holds its share only; guesses fill their own class, not a real key\'s', () => {
  const gate = new HandshakeGate(4, 2);
  const mine = [gate.tryEnter('10.0.0.1'), gate.tryEnter('10.0.0.1')];
  assert.ok(mine.every((s) => s !== null));
  assert.is(gate.tryEnter('10.0.0.1'), null, 'a third from one group');
  // Looked up: the four guesses take the unknown class; a fifth guess is shed after its lookup.
  for (const s of mine) assert.ok(s!.verify(false));
  const more = [gate.tryEnter('10.0.0.2'), gate.tryEnter('10.0.0.2')];
  for (const s of more) assert.ok(s!.verify(false));
  const fifth = gate.tryEnter('10.0.0.3')!;
  assert.not.ok(fifth.verify(false), 'the unknown class is full');
  // A real key still looks up and is verified.
  const real = gate.tryEnter('10.0.0.4');
  assert.ok(real);
  assert.ok(real.verify(true));
});

test.run();
