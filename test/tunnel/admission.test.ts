import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, withDeadline } from '../helpers/fixtures.js';
import { F, MAX_TUNNELS_PER_CONNECTION, type Frame } from '../../src/protocol/frames.js';
import { rawPeer, refusalIn, type RawPeer } from './raw-peer.js';
import { lanePorts } from '../helpers/ports.js';

// Admission limits hold under concurrency: Opens still being admitted count toward the
// per-connection cap, and a user's TCP ports are bounded across connections and shards.

// A range of our own (outside the default one other test files draw from), so counting
// bound ports means counting ours.
const RANGE = lanePorts(100);
const MAX_PORTS = 4;
let server: TestServer;
const peers: RawPeer[] = [];

test.before(async () => {
  server = await startServer({ workers: 2, args: ['--tcp-port-range', `${RANGE.min}-${RANGE.max}`, '--max-tcp-ports-per-user', String(MAX_PORTS)] });
});

test.after(async () => {
  for (const p of peers) p.ws.destroy();
  await server?.stop();
});

async function peer(key: string): Promise<RawPeer> {
  const p = await rawPeer(server.url, key);
  peers.push(p);
  return p;
}

async function answers(p: RawPeer, n: number): Promise<Frame[]> {
  await p.waitFor(() => p.frames.filter((f) => f[0] === F.Opened || f[0] === F.Refused).length >= n, 60_000, `${n} answers`);
  return p.frames.filter((f) => f[0] === F.Opened || f[0] === F.Refused);
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen({ host: '127.0.0.1', port, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

async function boundInRange(): Promise<number> {
  let n = 0;
  for (let port = RANGE.min; port <= RANGE.max; port++) if (!(await canBind(port))) n++;
  return n;
}

test('250 concurrent Opens on one connection: exactly the cap registered, the rest refused naming the limit', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const p = await peer(key);
  const N = 250;
  for (let i = 1; i <= N; i++) p.send([F.Open, 10_000 + i, { type: 'http', id: `cap-${i}` }]);
  const all = await answers(p, N);
  const opened = all.filter((f) => f[0] === F.Opened);
  const refused = all.filter((f) => f[0] === F.Refused);
  assert.is(opened.length, MAX_TUNNELS_PER_CONNECTION);
  assert.is(refused.length, N - MAX_TUNNELS_PER_CONNECTION);
  for (const f of refused) assert.match(refusalIn(f).message, new RegExp(`at most ${MAX_TUNNELS_PER_CONNECTION} tunnels per connection`));
  const r = await api(server, 'GET', '/tunnels', { key });
  assert.is(r.status, 200, r.text);
  assert.is((r.body as unknown[]).length, MAX_TUNNELS_PER_CONNECTION);
});

test('TCP ports per user are bounded across two connections of the same user', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const [a, b] = [await peer(key), await peer(key)];
  const EACH = 8;
  for (const p of [a, b]) for (let i = 1; i <= EACH; i++) p.send([F.Open, 20_000 + i, { type: 'tcp' }]);
  const all = [...(await answers(a, EACH)), ...(await answers(b, EACH))];
  const opened = all.filter((f) => f[0] === F.Opened);
  const refused = all.filter((f) => f[0] === F.Refused);
  assert.is(opened.length, MAX_PORTS);
  assert.is(refused.length, 2 * EACH - MAX_PORTS);
  for (const f of refused) {
    const why = refusalIn(f);
    assert.is(why.code, 'forbidden');
    assert.match(why.message, new RegExp(`at most ${MAX_PORTS} TCP ports per user`));
  }
  const r = await api(server, 'GET', '/tunnels', { key });
  assert.is((r.body as { tunnel_type: string }[]).filter((t) => t.tunnel_type === 'tcp').length, MAX_PORTS);
  assert.is(await boundInRange(), MAX_PORTS, 'exactly the admitted ports are bound');

  // Closing one gives its port back to the quota.
  const first = opened[0]!;
  const owner = a.frames.includes(first) ? a : b;
  owner.send([F.Close, (first[2] as { id: string }).id]);
  const again = await withDeadline(owner.open({ type: 'tcp' }), 10_000, 'open after close');
  assert.is(again[0], F.Opened, JSON.stringify(again));

  // Another user has a quota of their own.
  const v = await createUser(server);
  const other = await peer(await createKeyFor(server, v.id));
  assert.is((await other.open({ type: 'tcp' }))[0], F.Opened);
});

test.run();
