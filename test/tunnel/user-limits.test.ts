import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser, eventually } from '../helpers/fixtures.js';
import { F, type Frame } from '../../src/protocol/frames.js';
import { rawPeer, refusalIn, type RawPeer } from './raw-peer.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { withDeadline } from '../helpers/deadline.js';

// One tunnels key registered 19,200 tunnels in 2 s and left 48,685 session
// rows that nothing pruned. Per-user cap on live tunnels, a registration rate, and a retention
// for closed sessions.

const MAX_TUNNELS = 5;
const MAX_RATE = 12;
let server: TestServer;
let second: TestServer | null = null;
const peers: RawPeer[] = [];

test.before(async () => {
  server = await startServer({ args: ['--max-tunnels-per-user', String(MAX_TUNNELS), '--max-registrations-per-minute', String(MAX_RATE)] });
});

test.after(async () => {
  for (const p of peers) p.ws.destroy();
  await second?.stop();
  await server?.stop().catch(() => null);
});

async function peer(key: string): Promise<RawPeer> {
  const p = await rawPeer(server.url, key);
  peers.push(p);
  return p;
}

async function answers(p: RawPeer, n: number): Promise<Frame[]> {
  await p.waitFor(() => p.frames.filter((f) => f[0] === F.Opened || f[0] === F.Refused).length >= n, 20_000, `${n} answers`);
  return p.frames.filter((f) => f[0] === F.Opened || f[0] === F.Refused);
}

test('live tunnels per user are capped over every connection; a takeover does not count twice', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const [a, b] = [await peer(key), await peer(key)];
  for (let i = 1; i <= 4; i++) a.send([F.Open, i, { type: 'http', id: `cap-a-${i}` }]);
  await answers(a, 4);
  for (let i = 1; i <= 3; i++) b.send([F.Open, i, { type: 'http', id: `cap-b-${i}` }]);
  const all = [...(await answers(a, 4)), ...(await answers(b, 3))];
  assert.is(all.filter((f) => f[0] === F.Opened).length, MAX_TUNNELS);
  const refused = all.filter((f) => f[0] === F.Refused);
  assert.is(refused.length, 2);
  for (const f of refused) {
    assert.is(refusalIn(f).code, 'forbidden');
    assert.match(refusalIn(f).message, /at most 5 live tunnels per user \(max-tunnels-per-user\)/);
  }
  // At the cap, the same id again (a reconnect) still takes over.
  const again = await b.open({ type: 'http', id: 'cap-a-1' });
  assert.is(again[0], F.Opened);
});

test('registrations per user per minute are limited: past it a transient refusal that says so', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const p = await peer(key);
  // The same id over and over (register, take over): churn, not a growing set of tunnels.
  for (let i = 1; i <= MAX_RATE + 3; i++) p.send([F.Open, 100 + i, { type: 'http', id: 'churn-me' }]);
  const all = await answers(p, MAX_RATE + 3);
  const limited = all.filter((f) => f[0] === F.Refused && /rate-limited/.test(refusalIn(f).message));
  assert.is(limited.length, 3);
  for (const f of limited) {
    assert.is(refusalIn(f).permanent, false, 'the client backs off and retries');
    assert.match(refusalIn(f).message, /at most 12 tunnel registrations per user per minute/);
    // When asking again can succeed: the oldest registration leaves the minute's window.
    const wait = refusalIn(f).retryAfterMs;
    assert.ok(wait !== undefined && wait > 0 && wait <= 60_000, `retryAfterMs ${wait}`);
  }
  // A real client waits that out (at least its first half) instead of its usual second.
  const client = new TunnelClient({ server: server.url, token: key, type: 'http', local: { host: '127.0.0.1', port: 9 } });
  const reconnecting = new Promise<{ delayMs: number; reason: string }>((resolve) => client.once('reconnecting', resolve));
  void client.start().catch(() => undefined);
  const r = await withDeadline(reconnecting, 10_000, 'the rate-limited client schedules its retry');
  await client.stop();
  assert.match(r.reason, /rate-limited/);
  assert.ok(r.delayMs >= 25_000, `waited ${r.delayMs} ms`);
  const other = await peer(await createKeyFor(server, (await createUser(server)).id));
  assert.is((await other.open({ type: 'http', id: 'not-limited' }))[0], F.Opened, 'another user is not limited');
});

test('--session-retention: closed sessions older than it are deleted at start-up, newer and open ones kept', async () => {
  const u = await createUser(server);
  const day = 86_400_000;
  const at = (daysAgo: number) => new Date(Date.now() - daysAgo * day);
  await server.sql`insert into sessions (user_id, tunnel_id, tunnel_type, connected_at, disconnected_at, last_flush_at) values
    (${u.id}, 'old-one', 'http', ${at(41)}, ${at(40)}, ${at(40)}),
    (${u.id}, 'old-two', 'http', ${at(41)}, ${at(31)}, ${at(31)}),
    (${u.id}, 'recent', 'http', ${at(21)}, ${at(20)}, ${at(20)})`;
  for (const p of peers) p.ws.destroy();
  await server.stop({ keepDatabase: true });
  second = await startServer({ db: server.db, args: ['--session-retention', '30d'] });
  const left = await eventually(async () => {
    const rows = await second!.sql<{ tunnel_id: string }[]>`select tunnel_id from sessions where user_id = ${u.id} order by tunnel_id`;
    return rows.length === 1 ? rows.map((r) => r.tunnel_id) : null;
  }, 10_000, 'old sessions pruned');
  assert.equal(left, ['recent']);
});

test.run();
