import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { randomUUID } from 'node:crypto';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { connect, type Sql } from '../../src/db/sql.js';
import { migrate } from '../../src/db/migrate.js';
import { createUser } from '../../src/db/users.js';
import { createLogger } from '../../src/log.js';
import { FLUSH_INTERVAL_MS, StatsActor } from '../../src/actors/stats.js';

// The StatsActor in-process, on a real database: it writes each session's absolute totals once
// a second, closes sessions with their final counters, and a write that failed (database away)
// or whose reply was lost (committed, but the connection died before the answer) is repeated
// later without counting anything twice. The actor reaches PostgreSQL through a relay the test
// controls; the test reads the rows directly.

const log = createLogger('error', { test: 'stats-actor' });
let db: TestDatabase;
let relay: Relay;
let userId = '';

/** A TCP relay to the database: `refuse` drops every connection and refuses new ones; `swallowReplies` lets
 *  requests through but keeps every answer (a reply lost on the way). */
interface Relay {
  url: string;
  refusing: boolean;
  swallowReplies: boolean;
  dropAll(): void;
  close(): Promise<void>;
}

async function startRelay(target: string): Promise<Relay> {
  const u = new URL(target);
  const sockets = new Set<net.Socket>();
  const relay: Relay = {
    url: '',
    refusing: false,
    swallowReplies: false,
    dropAll: () => {
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    close: () => new Promise((r) => (relay.dropAll(), server.close(() => r()))),
  };
  const server = net.createServer((client) => {
    if (relay.refusing) return void client.destroy();
    const up = net.connect({ host: u.hostname, port: Number(u.port || 5432) });
    sockets.add(client).add(up);
    const drop = (): void => void (client.destroy(), up.destroy());
    client.on('data', (d) => up.write(d));
    up.on('data', (d) => !relay.swallowReplies && client.write(d));
    client.on('error', drop).on('close', drop);
    up.on('error', drop).on('close', drop);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const via = new URL(target);
  via.hostname = '127.0.0.1';
  via.port = String((server.address() as net.AddressInfo).port);
  relay.url = via.toString();
  return relay;
}

interface SessionRow {
  bytes_in: string;
  bytes_out: string;
  requests: string;
  disconnected_at: Date | null;
}
async function row(id: string): Promise<SessionRow | undefined> {
  const [r] = await db.sql<SessionRow[]>`select bytes_in::text, bytes_out::text, requests::text, disconnected_at from sessions where id = ${id}`;
  return r;
}
const totals = (r: SessionRow | undefined) => (r ? [Number(r.bytes_in), Number(r.bytes_out), Number(r.requests)] : null);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function eventually(what: string, ok: () => Promise<boolean>, ms = 8_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(25);
  }
}

/** Each wait on the database has its own deadline: a hang fails the test, not the runner. */
function within<T>(p: Promise<T>, what: string, ms = 15_000): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no end within ${ms} ms: ${what}`)), ms)))]).finally(() => clearTimeout(timer));
}

function actorOn(sql: Sql): StatsActor {
  return new StatsActor(log, sql);
}
function open(stats: StatsActor): string {
  const id = randomUUID();
  stats.open({ id, userId, tunnelId: `t-${id.slice(0, 8)}`, tunnelType: 'http', teamId: null, clientIp: '203.0.113.7' });
  return id;
}

test.before(async () => {
  db = await startDatabase();
  await migrate(db.sql, log);
  const u = await createUser(db.sql, { email: 'stats@example.test', name: 'stats', role: 'member' });
  if (u === 'taken') throw new Error('user exists');
  userId = u.id;
  relay = await startRelay(db.url);
});

test.after(async () => {
  await relay?.close();
  await db?.stop();
});

test('absolute totals are written once a second, not on every delta', async () => {
  const sql = connect(db.url, { max: 2, applicationName: 'stats-test' });
  const stats = actorOn(sql);
  const id = open(stats);
  stats.start();
  const t0 = Date.now();
  for (let i = 0; i < 10; i++) stats.add({ sessionId: id, bytesIn: 100, bytesOut: 10, requests: 1 });
  assert.is(await row(id), undefined, 'registering and counting write nothing by themselves');
  await eventually('the first flush', async () => (await row(id)) !== undefined);
  assert.ok(Date.now() - t0 >= FLUSH_INTERVAL_MS - 50, 'the first write waits for the interval');
  assert.equal(totals(await row(id)), [1000, 100, 10]);
  stats.add({ sessionId: id, bytesIn: 5, bytesOut: 0, requests: 1 });
  await eventually('the next flush', async () => totals(await row(id))?.[0] === 1005);
  // Idle flushes rewrite the same totals (last_flush_at moves): nothing accumulates.
  await sleep(FLUSH_INTERVAL_MS * 2 + 200);
  assert.equal(totals(await row(id)), [1005, 100, 11]);
  assert.is(stats.totals(id).bytes_in, 1005);
  await stats.stop();
  await sql.end({ timeout: 1 });
});

test('a session closes with its final counters, then leaves the actor', async () => {
  const sql = connect(db.url, { max: 2, applicationName: 'stats-test' });
  const stats = actorOn(sql);
  const id = open(stats);
  stats.add({ sessionId: id, bytesIn: 7, bytesOut: 70, requests: 2 });
  await stats.flush();
  assert.is((await row(id))!.disconnected_at, null);
  // tunnel-down: the last delta, then the close; both written by the next flush.
  stats.add({ sessionId: id, bytesIn: 3, bytesOut: 30, requests: 1 });
  stats.close(id);
  assert.is(stats.pending(), 1);
  await stats.flush();
  const r = await row(id);
  assert.equal(totals(r), [10, 100, 3]);
  assert.instance(r!.disconnected_at, Date);
  assert.is(stats.size, 0, 'a closed session written is forgotten');
  // A late delta for it (a lane's last report) changes nothing.
  stats.add({ sessionId: id, bytesIn: 1, bytesOut: 1, requests: 1 });
  await stats.flush();
  assert.equal(totals(await row(id)), [10, 100, 3]);
  await sql.end({ timeout: 1 });
});

test('database away: counters are kept, then written once, exactly', async () => {
  const sql = connect(relay.url, { max: 1, applicationName: 'stats-test' });
  const stats = actorOn(sql);
  const id = open(stats);
  stats.add({ sessionId: id, bytesIn: 100, bytesOut: 1, requests: 1 });
  await within(stats.flush(), 'first flush');
  assert.equal(totals(await row(id)), [100, 1, 1]);

  relay.refusing = true;
  relay.dropAll();
  // Flushes during the outage fail or wait for a connection (the pool retries): either way
  // nothing is written and nothing is forgotten.
  const during: Promise<void>[] = [];
  for (let i = 0; i < 3; i++) {
    stats.add({ sessionId: id, bytesIn: 100, bytesOut: 1, requests: 1 });
    during.push(stats.flush());
    await sleep(150);
  }
  stats.close(id);
  assert.equal(totals(await row(id)), [100, 1, 1], 'nothing written while the database is away');
  assert.is(stats.pending(), 1);

  relay.refusing = false;
  await within(Promise.all(during), 'the flushes of the outage settle');
  await eventually('written again', async () => (await within(stats.flush(), 'flush'), stats.pending() === 0));
  const r = await row(id);
  assert.equal(totals(r), [400, 4, 4]);
  assert.instance(r!.disconnected_at, Date);
  await sql.end({ timeout: 1 });
});

test('a write committed whose reply was lost is repeated without counting twice', async () => {
  const sql = connect(relay.url, { max: 1, applicationName: 'stats-test' });
  const stats = actorOn(sql);
  const id = open(stats);
  stats.add({ sessionId: id, bytesIn: 50, bytesOut: 5, requests: 1 });
  await stats.flush();
  assert.equal(totals(await row(id)), [50, 5, 1]);

  stats.add({ sessionId: id, bytesIn: 50, bytesOut: 5, requests: 1 });
  relay.swallowReplies = true;
  const lost = stats.flush();
  // The upsert reaches PostgreSQL and commits; its answer never comes back …
  await eventually('the write committed', async () => totals(await row(id))?.[0] === 100);
  // … and the connection dies: the actor cannot know the write happened.
  relay.dropAll();
  relay.swallowReplies = false;
  await within(lost, 'the write whose reply was lost');
  assert.is(stats.pending(), 1, 'unconfirmed: still to be written');

  stats.add({ sessionId: id, bytesIn: 50, bytesOut: 5, requests: 1 });
  await eventually('written again', async () => (await within(stats.flush(), 'flush'), stats.pending() === 0));
  assert.equal(totals(await row(id)), [150, 15, 3], 'the repeated write set totals; nothing was added twice');
  await stats.stop();
  await sql.end({ timeout: 1 });
});

test('stop closes every live session and writes it', async () => {
  const sql = connect(db.url, { max: 2, applicationName: 'stats-test' });
  const stats = actorOn(sql);
  const a = open(stats);
  const b = open(stats);
  stats.add({ sessionId: a, bytesIn: 1, bytesOut: 2, requests: 3 });
  await stats.stop(2_000);
  for (const id of [a, b]) assert.instance((await row(id))?.disconnected_at, Date, `session ${id} closed`);
  assert.equal(totals(await row(a)), [1, 2, 3]);
  await sql.end({ timeout: 1 });
});

test.run();
