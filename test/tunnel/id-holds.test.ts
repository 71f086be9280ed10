import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually } from '../helpers/fixtures.js';
import { F } from '../../src/protocol/frames.js';
import { rawPeer, refusalIn, type RawPeer } from './raw-peer.js';
import { sleep } from './helpers.js';

// The --id-grace holds are bounded: a user cannot hoard ids by opening and closing them. Only an
// id used --id-grace-min-lifetime is held, a user holds at most --id-grace-max-per-user (the
// oldest hold ends first), and a reconnect keeps counting from the first connection.

const MIN_LIFETIME_S = 2;
const MAX_PER_USER = 3;
let server: TestServer;
const peers: RawPeer[] = [];

test.before(async () => {
  server = await startServer({ args: ['--id-grace', '1h', '--id-grace-min-lifetime', String(MIN_LIFETIME_S), '--id-grace-max-per-user', String(MAX_PER_USER)] });
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

async function gone(id: string): Promise<void> {
  await eventually(async () => (await api(server, 'GET', `/tunnels/${id}`, { key: server.adminKey })).status === 404, 10_000, `${id} no longer live`);
}

async function twoUsers() {
  const [a, b] = [await createUser(server), await createUser(server)];
  return { keyA: await createKeyFor(server, a.id), keyB: await createKeyFor(server, b.id) };
}

/** User `key` holds `id` for a tunnel that lives `ms`, then drops. */
async function useFor(key: string, id: string, ms: number): Promise<void> {
  const p = await peer(key);
  assert.is((await p.open({ type: 'http', id }))[0], F.Opened, `${id} opened`);
  if (ms > 0) await sleep(ms);
  p.ws.destroy();
  await gone(id);
}

test('a tunnel that lived less than --id-grace-min-lifetime leaves no hold: another user takes its id at once', async () => {
  const { keyA, keyB } = await twoUsers();
  await useFor(keyA, 'brief-one', 0);
  const b = await peer(keyB);
  assert.is((await b.open({ type: 'http', id: 'brief-one' }))[0], F.Opened, 'not held');
});

test('one user holds at most --id-grace-max-per-user ids: the oldest holds end, another user takes those ids', async () => {
  const { keyA, keyB } = await twoUsers();
  const ids = ['hoard-1', 'hoard-2', 'hoard-3', 'hoard-4', 'hoard-5'];
  const owners: RawPeer[] = [];
  for (const id of ids) {
    const p = await peer(keyA);
    assert.is((await p.open({ type: 'http', id }))[0], F.Opened, `${id} opened`);
    owners.push(p);
  }
  await sleep(MIN_LIFETIME_S * 1000 + 200);
  // They end one after another: hoard-1 first, so its hold is the oldest.
  for (const [i, id] of ids.entries()) {
    owners[i]!.ws.destroy();
    await gone(id);
  }
  const b = await peer(keyB);
  for (const id of ids.slice(0, ids.length - MAX_PER_USER)) assert.is((await b.open({ type: 'http', id }))[0], F.Opened, `${id}: its hold ended`);
  for (const id of ids.slice(ids.length - MAX_PER_USER)) {
    const r = await b.open({ type: 'http', id });
    assert.is(r[0], F.Refused, `${id} still held`);
    assert.match(refusalIn(r).message, /held for the user who last used it/);
  }
});

test('a brief reconnect keeps the hold of an id used long enough before it', async () => {
  const { keyA, keyB } = await twoUsers();
  await useFor(keyA, 'steady-one', MIN_LIFETIME_S * 1000 + 200);
  await useFor(keyA, 'steady-one', 0);
  const b = await peer(keyB);
  const r = await b.open({ type: 'http', id: 'steady-one' });
  assert.is(r[0], F.Refused, 'still held for its user');
  assert.is(refusalIn(r).code, 'conflict');
});

test.run();
