import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, type ApiResponse } from '../helpers/fixtures.js';

// The /tunnels operations with no tunnel connected: they read the live registry, which is
// empty here. (Live tunnels are the data plane's suites; this one stops at the API.)

const IDS = ['nosuchtunnel', 'abc', 'my-app-1', 'x'.repeat(63), '00000000-0000-4000-8000-000000000000'];

let t: TestServer;
const callers: Record<string, string> = {};

function assertNotFound(res: ApiResponse, id: string, what: string) {
  assert.is(res.status, 404, `${what}: ${res.text}`);
  assert.is(res.headers.get('content-type'), 'application/problem+json');
  assert.equal(Object.keys(res.body).sort(), ['detail', 'status', 'title', 'type']);
  assert.is(res.body.type, '/problems/not-found');
  assert.is(res.body.status, 404);
  assert.ok(res.body.detail.includes(id), `${what}: detail names ${id}`);
}

test.before(async () => {
  t = await startServer();
  callers.admin = t.adminKey;
  const member = await createUser(t);
  callers.member = await createKeyFor(t, member.id);
  callers.tunnelsOnly = await createKeyFor(t, member.id, { scopes: ['tunnels'] });
  callers.managementOnly = await createKeyFor(t, member.id, { scopes: ['management'] });
});

test.after(async () => {
  await t?.stop();
});

test('List_tunnels: 200 with an empty JSON array for every kind of key', async () => {
  for (const [who, key] of Object.entries(callers)) {
    const res = await api(t, 'GET', '/tunnels', { key });
    assert.is(res.status, 200, `${who}: ${res.text}`);
    assert.is(res.headers.get('content-type'), 'application/json');
    assert.is(res.text, '[]', who);
  }
});

test('Get_tunnel: 404 problem+json naming the id, for admins too', async () => {
  for (const id of IDS) {
    for (const [who, key] of Object.entries(callers)) assertNotFound(await api(t, 'GET', `/tunnels/${id}`, { key }), id, `${who} GET ${id}`);
  }
});

test('Delete_tunnel: 404 problem+json naming the id, for admins too; nothing else changes', async () => {
  for (const id of IDS) {
    for (const [who, key] of Object.entries(callers)) assertNotFound(await api(t, 'DELETE', `/tunnels/${id}`, { key }), id, `${who} DELETE ${id}`);
  }
  assert.is((await api(t, 'GET', '/tunnels', { key: t.adminKey })).text, '[]');
});

test('a tunnel id with an escaped character reaches the handler decoded', async () => {
  const res = await api(t, 'GET', '/tunnels/a%20b', { key: t.adminKey });
  assertNotFound(res, 'a b', 'escaped space');
});

test.run();
