import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RouteTable, type RoutedTunnel } from '../../src/edge/shard-routes.js';
import { ExpiryTimers } from '../../src/edge/shard-expiry.js';
import { StatsReporter, type CountedTunnel } from '../../src/edge/shard-stats.js';
import { AccessGate, admitHttpVisitor } from '../../src/edge/access.js';
import type { AccessWire } from '../../src/protocol/access.js';
import type { StatsDelta, TunnelShardToMain } from '../../src/protocol/tunnel-messages.js';

// The parts installTunnels (src/edge/shard.ts) wires, in-process: the route table (routes,
// their sessions and access gates, this shard's tunnels), the expiry timers and the stats
// reporter. The whole shard is exercised over real sockets by test/tunnel/.

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const deny = (cidr: string): AccessWire => ({ key: null, digests: [], allowIp: [], denyIp: [cidr], expiresAt: null });
const tunnel = (id: string, sessionId: string, lane = false): RoutedTunnel => ({ id, spec: { lane, sessionId } });
const verdict = (gate: AccessGate | null, ip: string) => admitHttpVisitor(gate, ip, '').verdict;

test('routes: a broadcast sets shard, session and gate; shard null forgets all three', () => {
  const t = new RouteTable<RoutedTunnel>();
  t.route({ id: 'web', shard: 2, sessionId: 's1', access: deny('203.0.113.0/24') });
  assert.is(t.shardOf('web'), 2);
  assert.is(t.sessionOf('web'), 's1');
  assert.is(verdict(t.gateFor('web'), '203.0.113.9'), 'refused', 'the route carries the gate: checked where the visitor lands');
  assert.is(verdict(t.gateFor('web'), '198.51.100.1'), 'admitted');
  // A later route without a session keeps the known one; its gate replaces the old.
  t.route({ id: 'web', shard: 3 });
  assert.is(t.shardOf('web'), 3);
  assert.is(t.sessionOf('web'), 's1');
  assert.is(t.gateFor('web'), null);
  t.route({ id: 'web', shard: null });
  assert.is(t.shardOf('web'), undefined);
  assert.is(t.sessionOf('web'), undefined);
  assert.is(t.routeCount, 0);
});

test('routes: the start-up list fills only ids no broadcast named first', () => {
  const t = new RouteTable<RoutedTunnel>();
  t.route({ id: 'fresh', shard: 1, sessionId: 'new' });
  t.load([
    { id: 'fresh', shard: 0, sessionId: 'old', access: null },
    { id: 'other', shard: 0, sessionId: 'o', access: deny('10.0.0.0/8') },
  ]);
  assert.is(t.shardOf('fresh'), 1);
  assert.is(t.sessionOf('fresh'), 'new');
  assert.is(t.shardOf('other'), 0);
  assert.is(verdict(t.gateFor('other'), '10.1.2.3'), 'refused');
  assert.is(t.routeCount, 2);
});

test('gateFor: this shard’s tunnel (owned or lane) first, else the route', () => {
  const t = new RouteTable<RoutedTunnel>();
  t.route({ id: 'api', shard: 1, sessionId: 's', access: deny('203.0.113.0/24') });
  const lane = tunnel('api', 's', true);
  t.add(lane, AccessGate.of(deny('198.51.100.0/24')));
  assert.is(t.local('api'), lane);
  assert.is(verdict(t.gateFor('api'), '198.51.100.7'), 'refused', 'the local gate decides');
  assert.is(verdict(t.gateFor('api'), '203.0.113.7'), 'admitted');
  t.remove(lane);
  assert.is(t.local('api'), undefined);
  assert.is(verdict(t.gateFor('api'), '203.0.113.7'), 'refused', 'back to the route’s gate');
  assert.is(t.gateFor('unknown'), null);
});

test('remove: a tunnel replaced under its id (same-shard takeover) does not remove the new one', () => {
  const t = new RouteTable<RoutedTunnel>();
  const old = tunnel('x', 'a');
  const fresh = tunnel('x', 'b');
  t.add(old, null);
  t.add(fresh, AccessGate.of(deny('10.0.0.0/8')));
  t.remove(old);
  assert.is(t.local('x'), fresh);
  assert.is(verdict(t.gateFor('x'), '10.0.0.1'), 'refused');
  assert.is(t.localCount, 1);
});

test('staleLane: a lane lives while the route names its session', () => {
  const t = new RouteTable<RoutedTunnel>();
  t.route({ id: 'web', shard: 0, sessionId: 's1' });
  const lane = tunnel('web', 's1', true);
  const owned = tunnel('own', 'o1');
  t.add(lane, null);
  t.add(owned, null);
  assert.is(t.laneCount, 1);
  assert.is(t.staleLane('web'), null);
  t.route({ id: 'web', shard: 1, sessionId: 's2' }); // taken over: another session
  assert.is(t.staleLane('web'), lane);
  t.route({ id: 'web', shard: null }); // or gone
  assert.is(t.staleLane('web'), lane);
  assert.is(t.staleLane('own'), null, 'an owned tunnel is never a stale lane');
  assert.is(t.staleLane('nothing'), null);
});

test('expiry: fires at its time, not before; cancel stops it', async () => {
  const timers = new ExpiryTimers<string>();
  const fired: string[] = [];
  const t0 = Date.now();
  timers.arm('a', t0 + 60, () => fired.push('a'));
  timers.arm('b', t0 + 30, () => fired.push('b'));
  timers.arm('c', t0 + 30, () => fired.push('c'));
  timers.cancel('c');
  assert.is(timers.size, 2);
  await sleep(45);
  assert.equal(fired, ['b']);
  await sleep(40);
  assert.equal(fired, ['b', 'a']);
  assert.ok(Date.now() - t0 >= 60);
  assert.is(timers.size, 0, 'a fired timer is forgotten');
  // One in the past fires at once.
  timers.arm('late', Date.now() - 1000, () => fired.push('late'));
  await sleep(5);
  assert.equal(fired, ['b', 'a', 'late']);
});

test('expiry: past the longest setTimeout wait it re-arms instead of firing early', async () => {
  // setTimeout fires at once for waits over 2^31-1 ms: 30 days away must not fire now.
  const far = new ExpiryTimers<string>();
  let fired = false;
  far.arm('month', Date.now() + 30 * 86_400_000, () => (fired = true));
  await sleep(30);
  assert.is(fired, false);
  far.cancel('month');
  assert.is(far.size, 0);
  // The same with a short longest wait: several wake-ups, one expiry, at its time.
  let wakeups = 0;
  const clock = () => (wakeups++, Date.now());
  const short = new ExpiryTimers<string>(10, clock);
  const at = Date.now() + 55;
  let firedAt = 0;
  short.arm('k', at, () => (firedAt = Date.now()));
  await sleep(90);
  assert.ok(firedAt >= at, 'not before its time');
  assert.ok(wakeups >= 4, `re-armed on the way (${wakeups} clock reads)`);
});

class Counted implements CountedTunnel {
  delta: StatsDelta | null = null;
  constructor(
    readonly id: string,
    readonly spec: { lane: boolean; sessionId: string },
  ) {}
  count(n: number): void {
    this.delta = { sessionId: this.spec.sessionId, bytesIn: (this.delta?.bytesIn ?? 0) + n, bytesOut: 0, requests: 1 };
  }
  takeDelta(): StatsDelta | null {
    const d = this.delta;
    this.delta = null;
    return d;
  }
}

test('stats reporter: one tunnel-stats per period with the dirty tunnels’ deltas', async () => {
  const sent: TunnelShardToMain[] = [];
  const stats = new StatsReporter<Counted>((m) => sent.push(m), 20);
  const a = new Counted('a', { lane: false, sessionId: 'sa' });
  const b = new Counted('b', { lane: false, sessionId: 'sb' });
  a.count(10);
  stats.markDirty(a);
  b.count(5);
  stats.markDirty(b);
  stats.markDirty(b);
  assert.equal(sent, [], 'nothing before the period ends');
  await sleep(35);
  assert.equal(sent, [
    {
      type: 'tunnel-stats',
      deltas: [
        { sessionId: 'sa', bytesIn: 10, bytesOut: 0, requests: 1 },
        { sessionId: 'sb', bytesIn: 5, bytesOut: 0, requests: 1 },
      ],
    },
  ]);
  await sleep(45);
  assert.is(sent.length, 1, 'an idle period sends nothing');
  stats.stop();
});

test('stats reporter: an ended tunnel reports tunnel-down; a lane only its counters', () => {
  const sent: TunnelShardToMain[] = [];
  const stats = new StatsReporter<Counted>((m) => sent.push(m), 60_000);
  const owned = new Counted('web', { lane: false, sessionId: 's1' });
  const lane = new Counted('web', { lane: true, sessionId: 's1' });
  stats.markDirty(owned);
  stats.ended(owned, { sessionId: 's1', bytesIn: 1, bytesOut: 2, requests: 3 });
  stats.ended(lane, { sessionId: 's1', bytesIn: 4, bytesOut: 0, requests: 1 });
  stats.ended(lane, null);
  assert.equal(sent, [
    { type: 'tunnel-down', id: 'web', sessionId: 's1', last: { sessionId: 's1', bytesIn: 1, bytesOut: 2, requests: 3 } },
    { type: 'tunnel-stats', deltas: [{ sessionId: 's1', bytesIn: 4, bytesOut: 0, requests: 1 }] },
  ]);
  owned.count(9);
  stats.flush();
  assert.is(sent.length, 2, 'an ended tunnel is no longer collected');
  stats.stop();
});

test.run();
