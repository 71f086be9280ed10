import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { once } from 'node:events';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { F } from '../../src/protocol/frames.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { rawPeer, refusalIn, type RawPeer } from './raw-peer.js';

// An id stays with the user who last held it (--id-grace), so a dropped
// connection does not hand it to whoever asks first; the owner's client retries a conflict
// after a reconnect; admins reserve ids for a user or a team and release held ones.

let server: TestServer;
const peers: RawPeer[] = [];
const clients: TunnelClient[] = [];

test.before(async () => {
  server = await startServer({ args: ['--id-grace', '1h', '--id-grace-min-lifetime', '0'] });
});

test.after(async () => {
  for (const c of clients) c.stop();
  for (const p of peers) p.ws.destroy();
  await server?.stop();
});

async function peer(key: string): Promise<RawPeer> {
  const p = await rawPeer(server.url, key);
  peers.push(p);
  return p;
}

async function gone(id: string): Promise<void> {
  await eventually(async () => (await api(server, 'GET', `/tunnels/${id}`, { key: server.adminKey })).status === 404, 10_000, `${id} no longer live`);
}

async function twoUsers() {
  const [a, b] = [await createUser(server), await createUser(server)];
  return { a, b, keyA: await createKeyFor(server, a.id), keyB: await createKeyFor(server, b.id) };
}

test('a dropped owner keeps the id: another user is refused, the owner comes back; an admin release frees it', async () => {
  const { keyA, keyB } = await twoUsers();
  const a = await peer(keyA);
  assert.is((await a.open({ type: 'http', id: 'grace-one' }))[0], F.Opened);
  a.ws.destroy(); // the laptop sleeps: the connection is gone
  await gone('grace-one');

  const b = await peer(keyB);
  const refused = await b.open({ type: 'http', id: 'grace-one' });
  assert.is(refused[0], F.Refused);
  assert.is(refusalIn(refused).code, 'conflict');
  assert.match(refusalIn(refused).message, /held for the user who last used it until .*an admin can release it/);

  const back = await peer(keyA);
  assert.is((await back.open({ type: 'http', id: 'grace-one' }))[0], F.Opened, 'the owner gets it back');
  back.ws.destroy();
  await gone('grace-one');

  const released = await api(server, 'DELETE', '/reservations/grace-one', { key: server.adminKey });
  assert.is(released.status, 200, released.text);
  assert.is((await b.open({ type: 'http', id: 'grace-one' }))[0], F.Opened, 'released: anyone may take it');
  const again = await api(server, 'DELETE', '/reservations/no-such-hold', { key: server.adminKey });
  assert.is(again.status, 404);
});

test('admins reserve ids for a user or a team; others get conflict', async () => {
  const { a, b, keyA, keyB } = await twoUsers();
  const member = await api(server, 'POST', '/teams', { key: keyA, body: { name: `res-team-${Date.now()}` } });
  assert.is(member.status, 201, member.text);
  const teamId = (member.body as { id: string }).id;

  const forUser = await api(server, 'PUT', '/reservations/res-user', { key: server.adminKey, body: { user_id: b.id } });
  assert.is(forUser.status, 200, forUser.text);
  assert.equal({ ...(forUser.body as object), created_at: null }, { id: 'res-user', user_id: b.id, team_id: null, created_at: null });
  const forTeam = await api(server, 'PUT', '/reservations/res-team', { key: server.adminKey, body: { team_id: teamId } });
  assert.is(forTeam.status, 200, forTeam.text);
  const both = await api(server, 'PUT', '/reservations/res-x', { key: server.adminKey, body: { user_id: a.id, team_id: teamId } });
  assert.is(both.status, 400);
  const bad = await api(server, 'PUT', '/reservations/xn--bad', { key: server.adminKey, body: { user_id: a.id } });
  assert.is(bad.status, 400);
  const notAdmin = await api(server, 'PUT', '/reservations/res-y', { key: keyA, body: { user_id: a.id } });
  assert.is(notAdmin.status, 403);

  const pa = await peer(keyA);
  const pb = await peer(keyB);
  const r1 = await pa.open({ type: 'http', id: 'res-user' });
  assert.is(refusalIn(r1).code, 'conflict');
  assert.match(refusalIn(r1).message, /reserved for another user/);
  const r2 = await pb.open({ type: 'http', id: 'res-team' });
  assert.is(refusalIn(r2).code, 'conflict');
  assert.match(refusalIn(r2).message, /reserved for a team you are not in/);
  assert.is((await pb.open({ type: 'http', id: 'res-user' }))[0], F.Opened);
  assert.is((await pa.open({ type: 'http', id: 'res-team' }))[0], F.Opened);

  const list = await api(server, 'GET', '/reservations', { key: server.adminKey });
  assert.equal((list.body as { id: string }[]).map((r) => r.id).filter((id) => id.startsWith('res-')), ['res-team', 'res-user']);
});

test("the owner's client retries a conflict after a reconnect, and gets its id back once free", async () => {
  const { keyA, keyB } = await twoUsers();
  const proxy = await TcpProxy.start({ host: '127.0.0.1', port: server.port });
  try {
    const client = new TunnelClient({ server: proxy.urlFor(server.url).replace(/\/$/, ''), token: keyA, type: 'http', local: { host: '127.0.0.1', port: 9 }, id: 'grace-retry', lanes: false });
    clients.push(client);
    await client.start();
    const closed: string[] = [];
    client.on('closed', (c) => closed.push(c.code));
    await proxy.refuse();
    await gone('grace-retry');
    // The admin frees it while the owner is away; another user takes it.
    assert.is((await api(server, 'DELETE', '/reservations/grace-retry', { key: server.adminKey })).status, 200);
    const b = await peer(keyB);
    assert.is((await b.open({ type: 'http', id: 'grace-retry' }))[0], F.Opened);

    const conflicted = withDeadline(
      new Promise<void>((resolve) => client.on('reconnecting', (r) => /in use by another user/.test(r.reason) && resolve())),
      20_000,
      'a retry after the conflict',
    );
    await proxy.restore();
    await conflicted;
    assert.equal(closed, [], 'the owner did not give up');

    // The other user leaves; the id is now held for them, until an admin releases it again.
    b.ws.destroy();
    await gone('grace-retry');
    assert.is((await api(server, 'DELETE', '/reservations/grace-retry', { key: server.adminKey })).status, 200);
    await withDeadline(once(client, 'registered'), 30_000, 'the owner registered again');
    assert.equal(closed, []);
  } finally {
    await proxy.close();
  }
});

test.run();
