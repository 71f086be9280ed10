import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient, TunnelRefused } from '../../src/client/tunnel-client.js';
import type { AccessRules } from '../../src/protocol/access.js';
import { listen, visit, type Local } from './helpers.js';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI } from '../helpers/server.js';

// Pooled tunnels: several clients of one user (or team) serve one id (`burrow http --pool`).
// Visitors are spread over the members, a member whose local service refuses is skipped until
// it answers again, and a member that leaves gracefully cuts no visitor's request.

let server: TestServer;
const clients: TunnelClient[] = [];
const locals: Local[] = [];

test.before(async () => {
  server = await startServer({ workers: 2 });
});

test.after(async () => {
  for (const c of clients) await c.stop().catch(() => undefined);
  for (const l of locals) await l.close().catch(() => undefined);
  await server?.stop();
});

/** A local service answering with its name, each request held `delayMs`; `seen` gets each request's method and path. */
async function named(name: string, delayMs = 0, seen: string[] = []): Promise<Local> {
  const l = await listen(
    http.createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      setTimeout(() => res.end(name), delayMs);
    }),
  );
  locals.push(l);
  return l;
}

async function member(key: string, id: string, local: Local, pool = true): Promise<TunnelClient> {
  const c = new TunnelClient({ server: server.url, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id, pool });
  clients.push(c);
  await withDeadline(c.start(), 10_000, 'pool member start');
  return c;
}

async function userKey(): Promise<{ id: string; key: string }> {
  const u = await createUser(server);
  return { id: u.id, key: await createKeyFor(server, u.id) };
}

test('three members of one user share an id: visitors are spread over all of them', async () => {
  const { key } = await userKey();
  for (const n of ['a', 'b', 'c']) await member(key, 'pool-spread', await named(n, 20));
  const seen = new Map<string, number>();
  // Concurrent visitors: each picks the member with the fewest streams in flight.
  for (let round = 0; round < 4; round++) {
    const replies = await Promise.all(Array.from({ length: 12 }, () => visit(server.port, 'pool-spread.localhost')));
    for (const r of replies) {
      assert.is(r.status, 200);
      seen.set(r.body.toString(), (seen.get(r.body.toString()) ?? 0) + 1);
    }
  }
  assert.equal([...seen.keys()].sort(), ['a', 'b', 'c'], `every member served (${JSON.stringify([...seen])})`);
  const listed = await api(server, 'GET', '/tunnels/pool-spread', { key });
  assert.is(listed.status, 200, listed.text);
  assert.is(listed.body.pool, true);
  assert.is(listed.body.connections, 3);
  // The counters of every member, summed (shards report them within 250 ms).
  await eventually(async () => (await api(server, 'GET', '/tunnels/pool-spread', { key })).body.stats.requests === 48, 3_000, 'requests of all members counted');
});

test('without --pool the id is refused while a pool holds it; another user cannot join', async () => {
  const { key } = await userKey();
  await member(key, 'pool-rules', await named('a'));
  const local = await named('x');
  const plain = new TunnelClient({ server: server.url, token: key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'pool-rules' });
  clients.push(plain);
  const refused = await plain.start().then(
    () => null,
    (e: unknown) => e as TunnelRefused,
  );
  assert.ok(refused, 'a plain Open of a pooled id is refused');
  assert.match(refused!.message, /is a pool: open it with --pool/);
  const other = await userKey();
  const stranger = new TunnelClient({ server: server.url, token: other.key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'pool-rules', pool: true });
  clients.push(stranger);
  const denied = await stranger.start().then(
    () => null,
    (e: unknown) => e as TunnelRefused,
  );
  assert.ok(denied);
  assert.match(denied!.message, /in use by another user/);
});

test('a member whose local service refuses connections is skipped until it answers again', async () => {
  const { key } = await userKey();
  const good = await named('good');
  const bad = await named('bad');
  const badPort = bad.port;
  await member(key, 'pool-skip', good);
  await member(key, 'pool-skip', bad);
  await bad.close();
  const got: string[] = [];
  const started = Date.now();
  for (let i = 0; i < 40; i++) {
    const r = await visit(server.port, 'pool-skip.localhost');
    got.push(r.status === 200 ? r.body.toString() : String(r.status));
  }
  // Each shard learns of the refusal from one visitor, then skips the member (1 s, doubling):
  // at most one refusal per shard and second of the run.
  const refusals = got.filter((g) => g !== 'good').length;
  const bound = 2 * Math.ceil((Date.now() - started) / 1000 + 1);
  assert.ok(refusals <= bound, `${refusals} refusals (bound ${bound}): ${got.join(' ')}`);
  assert.ok(got.every((g) => g === 'good' || g === '502'), got.join(' '));
  // It answers again: after its skip it gets visitors again.
  const back = http.createServer((_req, res) => res.end('bad'));
  await new Promise<void>((resolve) => back.listen(badPort, '127.0.0.1', resolve));
  locals.push({ port: badPort, server: back, close: () => new Promise<void>((r) => (back.closeAllConnections(), back.close(() => r()))) });
  await eventually(async () => (await visit(server.port, 'pool-skip.localhost')).body.toString() === 'bad', 15_000, 'the member serves again once its service is back');
});

test('a member that leaves gracefully cuts no visitor request; the id keeps serving', async () => {
  const { key } = await userKey();
  await member(key, 'pool-leave', await named('stay', 5));
  const leaving = await member(key, 'pool-leave', await named('leave', 200));
  let ok = 0;
  let failed = 0;
  let stop = false;
  const load = Promise.all(
    Array.from({ length: 4 }, async () => {
      while (!stop) {
        const r = await visit(server.port, 'pool-leave.localhost').catch(() => null);
        if (r?.status === 200) ok++;
        else failed++;
      }
    }),
  );
  await eventually(() => ok > 10, 5_000, 'load under way');
  // Requests to the leaving member are in flight (its service holds each 200 ms) when it stops.
  await leaving.stop();
  const after = ok;
  await eventually(() => ok > after + 20, 5_000, 'still served after the member left');
  stop = true;
  await load;
  assert.is(failed, 0, `no visitor request failed (${ok} served)`);
  const listed = await api(server, 'GET', '/tunnels/pool-leave', { key });
  assert.is(listed.body.connections, 1);
});

test('a member killed with requests in flight: those requests are asked again of another member', async () => {
  const { key } = await userKey();
  const stayed: string[] = [];
  const died: string[] = [];
  await member(key, 'pool-kill', await named('stay', 0, stayed));
  // The other member is a real `burrow http --pool` process, killed while its service holds requests.
  const slow = await named('dying', 2_000, died);
  const cli = spawn(process.execPath, [CLI, 'http', `127.0.0.1:${slow.port}`, '--id', 'pool-kill', '--pool', '--quiet', '--no-inspect', '--server', server.url, '--token', key], {
    env: { ...process.env, HOME: mkdtempSync(join(tmpdir(), 'burrow-pool-home-')), BURROW_SERVER: '', BURROW_TOKEN: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    await eventually(async () => (await api(server, 'GET', '/tunnels/pool-kill', { key })).body?.connections === 2, 10_000, 'two members');
    const requests = Array.from({ length: 12 }, (_, i) => visit(server.port, 'pool-kill.localhost', { path: `/get${i}` }));
    // A POST without a body is not idempotent: it may have reached the dying member's service, so it is never sent twice.
    const posts = Array.from({ length: 6 }, (_, i) => visit(server.port, 'pool-kill.localhost', { method: 'POST', path: `/post${i}` }));
    // Some of them now wait on the dying member's service.
    await eventually(() => died.length >= 3, 5_000, 'requests held by the dying member');
    cli.kill('SIGKILL');
    const replies = await Promise.all(requests);
    assert.equal(replies.map((r) => `${r.status} ${r.body}`), replies.map(() => '200 stay'), 'every GET answered by the member that stays');
    assert.ok(died.some((d) => d.startsWith('GET ')), `GETs were in flight at the dying member: ${died.join(', ')}`);
    const postReplies = await Promise.all(posts);
    for (const [i, r] of postReplies.entries()) {
      const there = died.includes(`POST /post${i}`);
      const here = stayed.includes(`POST /post${i}`);
      // Never sent twice. One the dying member took may have died in its client before its
      // service read it (a loaded machine shows that window): 502 too, and not sent again.
      assert.not.ok(there && here, `POST /post${i} reached both members`);
      assert.is(r.status, here ? 200 : 502, `POST /post${i} (${here ? 'served by the member that stays' : there ? 'held by the dying member' : 'taken by the dying member, not yet at its service'})`);
    }
  } finally {
    cli.kill('SIGKILL');
  }
});

test('members of a team pool may be different users of the team', async () => {
  const a = await userKey();
  const b = await userKey();
  const t = await api(server, 'POST', '/teams', { key: server.adminKey, body: { name: `pool-team-${Date.now()}` } });
  assert.is(t.status, 201, t.text);
  for (const u of [a, b]) assert.is((await api(server, 'POST', `/teams/${t.body.id}/members`, { key: server.adminKey, body: { user_id: u.id } })).status, 201);
  for (const [u, name] of [[a, 'ua'], [b, 'ub']] as const) {
    const local = await named(name);
    const c = new TunnelClient({ server: server.url, token: u.key, type: 'http', local: { host: '127.0.0.1', port: local.port }, id: 'pool-team', teamId: t.body.id, pool: true });
    clients.push(c);
    await withDeadline(c.start(), 10_000, 'team member start');
  }
  const seen = new Set<string>();
  for (let i = 0; i < 10; i++) {
    const replies = await Promise.all(Array.from({ length: 4 }, () => visit(server.port, 'pool-team.localhost')));
    for (const r of replies) seen.add(r.body.toString());
  }
  assert.equal([...seen].sort(), ['ua', 'ub']);
});

test('a client asking for other rules cannot join a pool: basic auth, allow-ip and expiry are the pool\'s or the join is refused', async () => {
  const { key } = await userKey();
  await member(key, 'pool-strict', await named('open'));
  const seen: string[] = [];
  const guarded = await named('guarded', 0, seen);
  const refusal = async (access: AccessRules): Promise<TunnelRefused | null> => {
    const c = new TunnelClient({ server: server.url, token: key, type: 'http', local: { host: '127.0.0.1', port: guarded.port }, id: 'pool-strict', pool: true, access });
    clients.push(c);
    return c.start().then(
      () => null,
      (e: unknown) => e as TunnelRefused,
    );
  };
  // The attack: a member asking for basic auth and an address list joined a pool with none,
  // served under the pool's rules, and visitors without a password reached its service.
  const joined = await refusal({ basicAuth: ['ops:s3cret-pass'], allowIp: ['10.9.0.0/16'] });
  assert.ok(joined, 'a member asking for rules the pool lacks is refused');
  assert.is(joined!.code, 'conflict');
  assert.ok(joined!.permanent);
  assert.match(joined!.message, /basic auth differs \(the pool has none\)/);
  assert.match(joined!.message, /allow-ip differs \(the pool's: none\)/);
  assert.not.match(joined!.message, /s3cret/, 'no credential in the answer');
  for (let i = 0; i < 10; i++) assert.is((await visit(server.port, 'pool-strict.localhost')).body.toString(), 'open');
  assert.equal(seen, [], 'no visitor reached the refused member\'s service');
  const expiring = await refusal({ expiresAt: Date.now() + 3_600_000 });
  assert.match(expiring?.message ?? '', /expiry differs \(the pool's: none\)/, '--expires is not dropped either');

  // A pool with rules: only a client asking for the same credentials and list joins it.
  const second = await userKey();
  const rules: AccessRules = { basicAuth: ['ops:one', 'dev:two'], allowIp: ['127.0.0.1'], expiresAt: Date.now() + 3_600_000 };
  const first = new TunnelClient({ server: server.url, token: second.key, type: 'http', local: { host: '127.0.0.1', port: (await named('first')).port }, id: 'pool-guarded', pool: true, access: rules });
  clients.push(first);
  await withDeadline(first.start(), 10_000, 'guarded pool start');
  const join = async (access: AccessRules): Promise<TunnelRefused | null> => {
    const c = new TunnelClient({ server: server.url, token: second.key, type: 'http', local: { host: '127.0.0.1', port: (await named('joiner')).port }, id: 'pool-guarded', pool: true, access });
    clients.push(c);
    return c.start().then(
      () => null,
      (e: unknown) => e as TunnelRefused,
    );
  };
  const otherPassword = await join({ ...rules, basicAuth: ['ops:one', 'dev:three'] });
  assert.match(otherPassword?.message ?? '', /basic auth differs \(the pool has basic auth\)/);
  assert.not.match(otherPassword!.message, /allow-ip differs|expiry differs|ops|dev|one|two|three/, 'only what differs, and never a credential');
  assert.match((await join({ ...rules, allowIp: ['127.0.0.2'] }))?.message ?? '', /allow-ip differs \(the pool's: 127\.0\.0\.1\)/);
  assert.match((await join({ ...rules, expiresAt: rules.expiresAt! + 5 * 60_000 }))?.message ?? '', /expiry differs/);
  // The same rules (credentials in any order, an expiry a few seconds apart) join.
  assert.is(await join({ ...rules, basicAuth: ['dev:two', 'ops:one'], expiresAt: rules.expiresAt! + 5_000 }), null);
  assert.is((await api(server, 'GET', '/tunnels/pool-guarded', { key: second.key })).body.connections, 2);
});

test('a member whose --expires is a few seconds before the pool\'s ends at its own; the pool serves on', async () => {
  const { key } = await userKey();
  const poolEnds = Date.now() + 50_000;
  const first = new TunnelClient({ server: server.url, token: key, type: 'http', local: { host: '127.0.0.1', port: (await named('first')).port }, id: 'pool-expiry', pool: true, access: { expiresAt: poolEnds } });
  clients.push(first);
  await withDeadline(first.start(), 10_000, 'pool start');
  const early = new TunnelClient({ server: server.url, token: key, type: 'http', local: { host: '127.0.0.1', port: (await named('early')).port }, id: 'pool-expiry', pool: true, access: { expiresAt: Date.now() + 2_000 } });
  clients.push(early);
  const closed = new Promise<{ code: string }>((r) => early.once('closed', r));
  await withDeadline(early.start(), 10_000, 'early member start');
  assert.is((await api(server, 'GET', '/tunnels/pool-expiry', { key })).body.connections, 2);
  assert.is((await withDeadline(closed, 6_000, 'the early member expires')).code, 'expired');
  await eventually(async () => (await api(server, 'GET', '/tunnels/pool-expiry', { key })).body.connections === 1, 3_000, 'one member left');
  for (let i = 0; i < 4; i++) assert.is((await visit(server.port, 'pool-expiry.localhost')).body.toString(), 'first');
});

test.run();
