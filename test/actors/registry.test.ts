import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomUUID } from 'node:crypto';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { migrate } from '../../src/db/migrate.js';
import { createUser } from '../../src/db/users.js';
import { addMember, createTeamWithOwner } from '../../src/db/teams.js';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { ApiError } from '../../src/errors.js';
import { RegistryActor, type ShardDirectory } from '../../src/actors/registry.js';
import type { TunnelAdmitted, TunnelMainToShard, TunnelShardToMain } from '../../src/protocol/tunnel-messages.js';

// The RegistryActor in-process, on a real database (users, teams, reservations, sessions);
// only the shards are played by the test (a ShardDirectory that records what reaches each
// shard and answers like one). What users rely on: who may take an id (another user's live
// id, a reservation, a same-user takeover), that a crashed shard's tunnels end with their
// last counters, and that tunnel-down closes the session with its final counters.

const log = createLogger('error', { test: 'registry-actor' });
const WORKERS = 2;
let db: TestDatabase;
const users: Record<'alice' | 'bob' | 'carol', string> = { alice: '', bob: '', carol: '' };
let teamId = '';

/** Two shards played by the test: every message is recorded; tunnel-close answers `closed`. */
class FakeShards implements ShardDirectory {
  readonly seen: { shard: number; msg: TunnelMainToShard; asked: boolean }[] = [];
  /** what a tunnel-close answers (a shard that no longer holds the tunnel says false) */
  closes = true;
  tell(shard: number, msg: TunnelMainToShard): void {
    this.seen.push({ shard, msg, asked: false });
  }
  ask<T extends 'tunnel-close' | 'tunnel-route' | 'tunnel-counts'>(shard: number, msg: TunnelMainToShard & { type: T }): Promise<never> {
    this.seen.push({ shard, msg, asked: true });
    const answer = msg.type === 'tunnel-close' ? { closed: this.closes } : msg.type === 'tunnel-route' ? null : { shard, tunnels: 0 };
    return Promise.resolve(answer as never);
  }
  /** The messages of `type`, each with the shard it went `to`. */
  of<T extends TunnelMainToShard['type']>(type: T): (Extract<TunnelMainToShard, { type: T }> & { to: number })[] {
    return this.seen.filter((s) => s.msg.type === type).map((s) => ({ ...(s.msg as Extract<TunnelMainToShard, { type: T }>), to: s.shard }));
  }
  clear(): void {
    this.seen.length = 0;
  }
}

async function registry(args: string[] = []) {
  const config = parseConfig(['--workers', String(WORKERS), '--domain', 'tunnels.test', '--base-url', 'http://tunnels.test:8080', '--session-retention', 'off', ...args]);
  const shards = new FakeShards();
  const r = new RegistryActor(log, shards, db.sql, config);
  await r.start();
  return { r, shards };
}

type Admit = Extract<TunnelShardToMain, { type: 'tunnel-admit' }>;
function admitMsg(userId: string, id: string | null, more: Partial<Admit> = {}): Admit {
  return { type: 'tunnel-admit', userId, keyId: randomUUID(), tunnelType: 'http', id, teamId: null, remotePort: null, clientIp: '198.51.100.1', access: null, claim: null, local: null, pool: false, member: null, ...more };
}
const admit = (r: RegistryActor, shard: number, m: Admit) => r.handle(shard, m) as Promise<TunnelAdmitted>;

async function refused(p: unknown, code: string, detail: RegExp): Promise<void> {
  try {
    await p;
  } catch (e) {
    assert.instance(e, ApiError);
    assert.is((e as ApiError).code, code, (e as ApiError).detail);
    assert.match((e as ApiError).detail, detail);
    return;
  }
  assert.unreachable(`expected ${code}`);
}

interface SessionRow {
  tunnel_id: string;
  user_id: string;
  bytes_in: string;
  bytes_out: string;
  requests: string;
  disconnected_at: Date | null;
}
async function session(id: string): Promise<SessionRow | undefined> {
  const [row] = await db.sql<SessionRow[]>`select tunnel_id, user_id::text, bytes_in::text, bytes_out::text, requests::text, disconnected_at from sessions where id = ${id}`;
  return row;
}
const counters = (s: SessionRow | undefined) => (s ? [Number(s.bytes_in), Number(s.bytes_out), Number(s.requests)] : null);

test.before(async () => {
  db = await startDatabase();
  await migrate(db.sql, log);
  for (const name of ['alice', 'bob', 'carol'] as const) {
    const u = await createUser(db.sql, { email: `${name}@example.test`, name, role: 'member' });
    if (u === 'taken') throw new Error('taken');
    users[name] = u.id;
  }
  const team = await createTeamWithOwner(db.sql, 'ops', users.alice);
  await addMember(db.sql, team.id, users.carol);
  teamId = team.id;
});

test.after(async () => {
  await db?.stop();
});

test('admission: the route reaches every shard before the answer; another user gets conflict', async () => {
  const { r, shards } = await registry();
  const a = await admit(r, 0, admitMsg(users.alice, 'web'));
  assert.is(a.id, 'web');
  assert.is(a.url, 'http://web.tunnels.test:8080');
  assert.is(a.tookOver, false);
  assert.ok(a.laneKey, 'several shards: the tunnel takes lanes');
  const routes = shards.of('tunnel-route');
  assert.equal(routes.map((m) => [m.to, m.id, m.shard, m.sessionId]), [
    [0, 'web', 0, a.sessionId],
    [1, 'web', 0, a.sessionId],
  ]);
  assert.ok(shards.seen.every((s) => s.asked), 'asked: every shard confirms before the client hears Opened');

  await refused(admit(r, 1, admitMsg(users.bob, 'web')), 'conflict', /in use by another user/);
  // A random id when none is asked for, never one that is taken.
  const random = await admit(r, 1, admitMsg(users.bob, null));
  assert.match(random.id, /^[a-z0-9-]+$/);
  assert.is.not(random.id, 'web');
  await refused(admit(r, 0, admitMsg(users.bob, 'Not_A_Label!')), 'bad-request', /./);
  await r.stop();
});

test('same user: the new registration takes the id over, the old one is closed on its shard', async () => {
  const { r, shards } = await registry();
  const first = await admit(r, 0, admitMsg(users.alice, 'takeover'));
  shards.clear();
  const second = await admit(r, 1, admitMsg(users.alice, 'takeover'));
  assert.is(second.tookOver, true);
  assert.is.not(second.sessionId, first.sessionId);
  const closes = shards.of('tunnel-close');
  assert.is(closes.length, 1);
  assert.is(closes[0]!.to, 0, 'closed where it lived');
  assert.is(closes[0]!.sessionId, first.sessionId, 'only the old registration (a same-shard takeover must not close the new one)');
  assert.is(closes[0]!.code, 'taken-over');
  assert.ok(closes[0]!.permanent);
  assert.equal(shards.of('tunnel-route').map((m) => [m.to, m.shard, m.sessionId]), [
    [0, 1, second.sessionId],
    [1, 1, second.sessionId],
  ]);
  // The old shard's tunnel-down (with its last counters) closes the old session only.
  r.handle(0, { type: 'tunnel-down', id: 'takeover', sessionId: first.sessionId, last: { sessionId: first.sessionId, bytesIn: 9, bytesOut: 8, requests: 1 } });
  assert.ok(r.handle(0, { type: 'tunnels-get', id: 'takeover' }), 'the new registration stays live');
  await r.stats.flush();
  const old = await session(first.sessionId);
  assert.instance(old?.disconnected_at, Date);
  assert.equal(counters(old), [9, 8, 1]);
  assert.is((await session(second.sessionId))?.disconnected_at, null);
  await r.stop();
});

test('a takeover whose old shard no longer holds the tunnel closes the old session itself', async () => {
  const { r, shards } = await registry();
  const first = await admit(r, 0, admitMsg(users.alice, 'orphan'));
  shards.closes = false;
  await admit(r, 1, admitMsg(users.alice, 'orphan'));
  await new Promise((res) => setImmediate(res));
  await r.stats.flush();
  assert.instance((await session(first.sessionId))?.disconnected_at, Date);
  await r.stop();
});

test('reserved ids: for a user, or for a team’s members; release frees them', async () => {
  const { r } = await registry();
  await r.handle(0, { type: 'tunnel-reserve', id: 'alice-only', userId: users.alice, teamId: null });
  await r.handle(0, { type: 'tunnel-reserve', id: 'ops-only', userId: null, teamId });
  await refused(admit(r, 0, admitMsg(users.bob, 'alice-only')), 'conflict', /reserved for another user/);
  await refused(admit(r, 0, admitMsg(users.bob, 'ops-only')), 'conflict', /reserved for a team you are not in/);
  assert.is((await admit(r, 0, admitMsg(users.alice, 'alice-only'))).id, 'alice-only');
  assert.is((await admit(r, 1, admitMsg(users.carol, 'ops-only'))).id, 'ops-only', 'a team member (not the owner) may take it');
  // Reservations survive a restart (read back from the database).
  const again = await registry();
  const listed = (await again.r.handle(0, { type: 'tunnel-reservations' })) as { id: string }[];
  assert.ok(listed.some((x) => x.id === 'alice-only') && listed.some((x) => x.id === 'ops-only'));
  await again.r.handle(0, { type: 'tunnel-release', id: 'alice-only' });
  await refused(again.r.handle(0, { type: 'tunnel-release', id: 'never-reserved' }), 'not-found', /neither reserved nor held/);
  assert.is((await admit(again.r, 0, admitMsg(users.bob, 'alice-only'))).id, 'alice-only', 'released: anyone');
  await again.r.stop();
  await r.stop();
});

test('id grace: an ended tunnel’s id stays its user’s; another user gets conflict', async () => {
  const { r } = await registry(['--id-grace', '1h', '--id-grace-min-lifetime', '0']);
  const a = await admit(r, 0, admitMsg(users.alice, 'graced'));
  r.handle(0, { type: 'tunnel-down', id: 'graced', sessionId: a.sessionId, last: null });
  await refused(admit(r, 0, admitMsg(users.bob, 'graced')), 'conflict', /held for the user who last used it/);
  assert.is((await admit(r, 1, admitMsg(users.alice, 'graced'))).id, 'graced');
  await r.stop();
});

test('id grace after a restart: per user only the most recent --id-grace-max-per-user holds come back, and none of a short-lived tunnel', async () => {
  const ended = [50, 40, 30, 20].map((minsAgo, i) => ({ id: `restore-${i + 1}`, minsAgo }));
  for (const e of ended) {
    await db.sql`insert into sessions (user_id, tunnel_id, tunnel_type, connected_at, disconnected_at)
      values (${users.carol}, ${e.id}, 'http', now() - interval '2 hours', now() - make_interval(mins => ${e.minsAgo}))`;
  }
  // The most recent of all, but it lived 5 s: no hold.
  await db.sql`insert into sessions (user_id, tunnel_id, tunnel_type, connected_at, disconnected_at)
    values (${users.carol}, 'restore-brief', 'http', now() - interval '10 seconds', now() - interval '5 seconds')`;
  const { r } = await registry(['--id-grace', '1h', '--id-grace-max-per-user', '2']);
  for (const id of ['restore-1', 'restore-2', 'restore-brief']) assert.is((await admit(r, 0, admitMsg(users.bob, id))).id, id, `${id} is free`);
  for (const id of ['restore-3', 'restore-4']) await refused(admit(r, 0, admitMsg(users.bob, id)), 'conflict', /held for the user who last used it/);
  await r.stop();
});

test('shardDown: that shard’s tunnels end, routes go everywhere, sessions close with the last counters', async () => {
  const { r, shards } = await registry();
  const lost = await admit(r, 0, admitMsg(users.alice, 'on-zero'));
  const kept = await admit(r, 1, admitMsg(users.bob, 'on-one'));
  r.handle(0, { type: 'tunnel-stats', deltas: [{ sessionId: lost.sessionId, bytesIn: 100, bytesOut: 200, requests: 3 }] });
  r.handle(1, { type: 'tunnel-stats', deltas: [{ sessionId: kept.sessionId, bytesIn: 1, bytesOut: 1, requests: 1 }] });
  r.handle(0, { type: 'tunnel-stats', deltas: [{ sessionId: lost.sessionId, bytesIn: 5, bytesOut: 0, requests: 1 }] });
  shards.clear();

  r.shardDown(0);
  // Only the dead shard's tunnels, routed to nobody on every shard (a restarted shard 0 asks anew).
  assert.equal(shards.of('tunnel-route').map((m) => [m.to, m.id, m.shard]), [
    [0, 'on-zero', null],
    [1, 'on-zero', null],
  ]);
  assert.is(await r.handle(1, { type: 'tunnels-get', id: 'on-zero' }), null);
  assert.ok(await r.handle(1, { type: 'tunnels-get', id: 'on-one' }));
  const { routes } = (await r.handle(1, { type: 'tunnel-routes' })) as { routes: { id: string }[] };
  assert.equal(routes.map((x) => x.id), ['on-one']);
  await r.stats.flush();
  const s = await session(lost.sessionId);
  assert.instance(s?.disconnected_at, Date);
  assert.equal(counters(s), [105, 200, 4]);
  assert.is((await session(kept.sessionId))?.disconnected_at, null);
  // The id is free again for a new registration of its user (on a live shard).
  assert.is((await admit(r, 1, admitMsg(users.alice, 'on-zero'))).id, 'on-zero');
  await r.stop();
});

test('tunnel-down closes the session with its final counters and routes the id to nobody', async () => {
  const { r, shards } = await registry();
  const a = await admit(r, 1, admitMsg(users.bob, 'ending', { tunnelType: 'tcp', remotePort: 40000 }));
  assert.is(a.url, 'tcp://tunnels.test:40000');
  r.handle(1, { type: 'tunnel-stats', deltas: [{ sessionId: a.sessionId, bytesIn: 10, bytesOut: 20, requests: 0 }] });
  shards.clear();
  r.handle(1, { type: 'tunnel-down', id: 'ending', sessionId: a.sessionId, last: { sessionId: a.sessionId, bytesIn: 1, bytesOut: 2, requests: 0 } });
  assert.equal(shards.of('tunnel-route').map((m) => [m.to, m.id, m.shard]), [
    [0, 'ending', null],
    [1, 'ending', null],
  ]);
  await r.stats.flush();
  const s = await session(a.sessionId);
  assert.instance(s?.disconnected_at, Date);
  assert.equal(counters(s), [11, 22, 0]);
  // A stale tunnel-down (an older session of the id) ends nothing live.
  const b = await admit(r, 0, admitMsg(users.bob, 'ending'));
  r.handle(1, { type: 'tunnel-down', id: 'ending', sessionId: a.sessionId, last: null });
  assert.is(((await r.handle(0, { type: 'tunnels-get', id: 'ending' })) as { id: string } | null)?.id, 'ending');
  assert.is.not(b.sessionId, a.sessionId);
  await r.stop();
});

test.run();
