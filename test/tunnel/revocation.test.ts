import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { keyPrefixOf } from '../../src/auth/key-format.js';
import { WsClient, WsRefused } from '../../src/protocol/ws-client.js';
import { F, MAX_FRAME_BYTES } from '../../src/protocol/frames.js';
import { rawPeer, refusalIn, type RawPeer } from './raw-peer.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { once } from './helpers.js';

// Losing the right to tunnel reaches live control connections before the API call that
// caused it answers: revoke, deactivation, key expiry (a timer), team-member removal and team
// deletion. A role change removes no tunnel right: the connection stays.

let server: TestServer;
const peers: RawPeer[] = [];

test.before(async () => {
  server = await startServer({ workers: 2 });
});

test.after(async () => {
  for (const p of peers) p.ws.destroy();
  await server?.stop();
});

async function peer(key: string, events: string[], name: string): Promise<RawPeer> {
  const p = await rawPeer(server.url, key, events, name);
  peers.push(p);
  return p;
}

async function keyId(key: string): Promise<string> {
  const [r] = await server.sql<{ id: string }[]>`select id from api_keys where key_prefix = ${keyPrefixOf(key)!}`;
  return r!.id;
}

async function liveIds(): Promise<string[]> {
  const r = await api(server, 'GET', '/tunnels', { key: server.adminKey });
  assert.is(r.status, 200, r.text);
  return (r.body as { id: string }[]).map((t) => t.id);
}

/** Several connections with the key, so both shards (most likely) hold one. */
async function connectMany(key: string, events: string[], prefix: string, n = 4): Promise<RawPeer[]> {
  const out: RawPeer[] = [];
  for (let i = 0; i < n; i++) {
    const p = await peer(key, events, `${prefix}${i}`);
    const f = await p.open({ type: 'http', id: `${prefix}${i}` });
    assert.is(f[0], F.Opened, JSON.stringify(f));
    out.push(p);
  }
  return out;
}

async function refusedUpgrade(key: string): Promise<number> {
  try {
    const ws = await WsClient.connect(`${server.url}/tunnel/v1/connect`, { authorization: `Bearer ${key}` }, MAX_FRAME_BYTES, 5_000);
    ws.destroy();
  } catch (err) {
    if (err instanceof WsRefused) return err.status;
    throw err;
  }
  throw new Error('the upgrade was accepted');
}

function assertEndedFirst(events: string[], names: string[]): void {
  const apiAt = events.indexOf('api');
  assert.ok(apiAt >= 0, 'the API call answered');
  for (const n of names) {
    const fatal = events.indexOf(`${n}:fatal`);
    const close = events.indexOf(`${n}:close`);
    assert.ok(fatal >= 0 && fatal < apiAt, `${n}: Fatal before the API answer (${events.join(' ')})`);
    assert.ok(close >= 0 && close < apiAt, `${n}: socket closed before the API answer (${events.join(' ')})`);
  }
}

function assertFatal(p: RawPeer, message: RegExp): void {
  const f = p.frames.find((x) => x[0] === F.Fatal);
  assert.ok(f, 'a Fatal frame');
  const why = refusalIn(f!);
  assert.is(why.code, 'unauthorized');
  assert.is(why.permanent, true);
  assert.match(why.message, message);
}

test('revoking a key ends its live control connections before DELETE /keys answers', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const other = await createKeyFor(server, u.id);
  const events: string[] = [];
  const conns = await connectMany(key, events, 'rv');
  const survivor = await peer(other, events, 'rvother');
  assert.is((await survivor.open({ type: 'http', id: 'rv-other' }))[0], F.Opened);

  const r = await api(server, 'DELETE', `/keys/${await keyId(key)}`, { key });
  events.push('api');
  assert.is(r.status, 200, r.text);
  assertEndedFirst(events, conns.map((_, i) => `rv${i}`));
  for (const p of conns) assertFatal(p, /revoked/);
  const ids = await liveIds();
  for (let i = 0; i < conns.length; i++) assert.not.ok(ids.includes(`rv${i}`), `rv${i} gone from /tunnels`);
  // The user's other key is untouched.
  assert.ok(ids.includes('rv-other'));
  assert.not.ok(survivor.isClosed());
  assert.is(await refusedUpgrade(key), 401);
});

test('the tunnel client stops for good when its key is revoked (no reconnect)', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const c = new TunnelClient({ server: server.url, token: key, type: 'http', local: { host: '127.0.0.1', port: 9 }, id: 'rv-client' });
  let reconnects = 0;
  c.on('reconnecting', () => reconnects++);
  await withDeadline(c.start(), 10_000, 'client start');
  const ended = once<[{ permanent: boolean; code: string; reason: string }]>(c, 'closed', 10_000);
  const r = await api(server, 'DELETE', `/keys/${await keyId(key)}`, { key });
  assert.is(r.status, 200, r.text);
  const [why] = await ended;
  assert.is(why.permanent, true);
  assert.is(why.code, 'unauthorized');
  assert.match(why.reason, /revoked/);
  assert.is(reconnects, 0);
  await c.stop();
});

test('a connection whose authentication raced the revoke does not outlive it', async () => {
  // The upgrade's verification (a cache miss: row read, then argon2 on main) overlaps the
  // revoke, done with another key of the user. Whichever finishes first, once the revoke has
  // answered the connection must be refused or ended. Several rounds: the overlap varies.
  const u = await createUser(server);
  const manager = await createKeyFor(server, u.id);
  for (let round = 0; round < 12; round++) {
    const key = await createKeyFor(server, u.id);
    const id = await keyId(key);
    const connecting = WsClient.connect(`${server.url}/tunnel/v1/connect`, { authorization: `Bearer ${key}` }, MAX_FRAME_BYTES, 5_000).then(
      (ws) => ws,
      (err: unknown) => {
        if (err instanceof WsRefused && err.status === 401) return null;
        throw err;
      },
    );
    const r = await api(server, 'DELETE', `/keys/${id}`, { key: manager });
    assert.is(r.status, 200, r.text);
    const ws = await withDeadline(connecting, 10_000, 'upgrade');
    if (!ws) continue;
    // It may have ended already, while the DELETE was being answered.
    if (ws.isClosed) continue;
    const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
    await withDeadline(closed, 5_000, `round ${round}: the connection opened with a revoked key stays open`);
  }
});

test('deactivating a user ends their control connections before the API answers', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const events: string[] = [];
  const conns = await connectMany(key, events, 'dv');
  const r = await api(server, 'POST', `/users/${u.id}/deactivate`, { key: server.adminKey });
  events.push('api');
  assert.is(r.status, 200, r.text);
  assertEndedFirst(events, conns.map((_, i) => `dv${i}`));
  for (const p of conns) assertFatal(p, /deactivated/);
  const ids = await liveIds();
  assert.not.ok(ids.some((id) => id.startsWith('dv')), ids.join(','));
  assert.is(await refusedUpgrade(key), 401);
});

test('a key that expires ends its control connection at expires_at', async () => {
  const u = await createUser(server);
  const expiresAt = new Date(Date.now() + 2_500);
  const key = await createKeyFor(server, u.id, { expiresAt });
  const events: string[] = [];
  const p = await peer(key, events, 'ex');
  assert.is((await p.open({ type: 'http', id: 'ex-one' }))[0], F.Opened);
  await withDeadline(p.closed, 15_000, 'connection end at key expiry');
  assert.ok(Date.now() >= expiresAt.getTime() - 50, 'not before the expiry');
  assertFatal(p, /expired/);
  await eventually(async () => !(await liveIds()).includes('ex-one'), 5_000, 'ex-one gone');
});

test('a role change keeps the connection: no role grants or removes the tunnel right', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const events: string[] = [];
  const p = await peer(key, events, 'rc');
  assert.is((await p.open({ type: 'http', id: 'rc-one' }))[0], F.Opened);
  for (const role of ['admin', 'member']) {
    const r = await api(server, 'PUT', `/users/${u.id}/role`, { key: server.adminKey, body: { role } });
    assert.is(r.status, 200, r.text);
  }
  assert.is((await p.open({ type: 'http', id: 'rc-two' }))[0], F.Opened);
  assert.not.ok(p.isClosed());
  const ids = await liveIds();
  assert.ok(ids.includes('rc-one') && ids.includes('rc-two'), ids.join(','));
});

async function teamWith(userId: string): Promise<string> {
  const t = await api(server, 'POST', '/teams', { key: server.adminKey, body: { name: `team-${Date.now()}-${Math.random()}` } });
  assert.is(t.status, 201, t.text);
  const m = await api(server, 'POST', `/teams/${t.body.id}/members`, { key: server.adminKey, body: { user_id: userId } });
  assert.is(m.status, 201, m.text);
  return t.body.id as string;
}

test('a member removed from a team loses its tunnels bound to the team before the API answers', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const team = await teamWith(u.id);
  const events: string[] = [];
  const p = await peer(key, events, 'tm');
  assert.is((await p.open({ type: 'http', id: 'tm-team', teamId: team }))[0], F.Opened);
  assert.is((await p.open({ type: 'http', id: 'tm-own' }))[0], F.Opened);
  const r = await api(server, 'DELETE', `/teams/${team}/members/${u.id}`, { key: server.adminKey });
  events.push('api');
  assert.is(r.status, 200, r.text);
  const closedAt = events.indexOf('tm:closed:tm-team');
  assert.ok(closedAt >= 0 && closedAt < events.indexOf('api'), `Closed before the API answer (${events.join(' ')})`);
  const why = refusalIn(p.frames.find((f) => f[0] === F.Closed && f[1] === 'tm-team')!);
  assert.is(why.code, 'forbidden');
  assert.is(why.permanent, true);
  assert.match(why.message, /removed from team/);
  const ids = await liveIds();
  assert.not.ok(ids.includes('tm-team'));
  assert.ok(ids.includes('tm-own'), 'the unbound tunnel stays');
  assert.not.ok(p.isClosed(), 'the connection stays');
  const again = await p.open({ type: 'http', id: 'tm-team', teamId: team });
  assert.is(again[0], F.Refused);
  assert.is(refusalIn(again).code, 'forbidden');
});

test('deleting a team closes its tunnels before the API answers', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const team = await teamWith(u.id);
  const events: string[] = [];
  const p = await peer(key, events, 'td');
  assert.is((await p.open({ type: 'http', id: 'td-team', teamId: team }))[0], F.Opened);
  const r = await api(server, 'DELETE', `/teams/${team}`, { key: server.adminKey });
  events.push('api');
  assert.is(r.status, 200, r.text);
  const closedAt = events.indexOf('td:closed:td-team');
  assert.ok(closedAt >= 0 && closedAt < events.indexOf('api'), `Closed before the API answer (${events.join(' ')})`);
  assert.not.ok((await liveIds()).includes('td-team'));
});

test.run();
