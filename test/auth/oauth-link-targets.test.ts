import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createUser } from '../helpers/fixtures.js';
import { startIdp, type TestIdp } from '../browser/fixtures/idp.js';
import { startForwarder, type Forwarder } from '../browser/fixtures/forwarder.js';
import { loginToCli, newPkce, redeem } from '../browser/fixtures/flow.js';
import { isDeliverableEmail } from '../../src/auth/oauth/deliverable.js';

// Who a first browser login may be linked to by its verified email, against a real OpenID
// Connect provider (oidc-provider) that vouches for whatever address the attacker's account has:
// never the seed admin, never a user whose address no mail reaches, an existing admin only with
// --oauth-link-admins. Two burrowd on one database: without the flag (and --signup closed), then
// with it.

let idp: TestIdp;
let fwd: Forwarder;
let closed: TestServer;
let port = 45900;

async function start(args: string[], db?: TestServer): Promise<TestServer> {
  const t = await startServer({
    ...(db ? { db: db.db, dataDir: db.dataDir } : {}),
    args: [
      '--base-url', fwd.url,
      '--oauth-provider-name', 'idp',
      '--oauth-client-id', idp.clientId,
      '--oauth-client-secret', idp.clientSecret,
      '--oauth-authorize-url', idp.authorizeUrl,
      '--oauth-token-url', idp.tokenUrl,
      '--oauth-userinfo-url', idp.userinfoUrl,
      ...args,
    ],
  });
  fwd.setTarget(t.url);
  return t;
}

test.before(async () => {
  fwd = await startForwarder();
  idp = await startIdp({ redirectUri: `${fwd.url}/auth/v1/idp/callback` });
  closed = await start(['--signup', 'closed', '--initial-admin-email', 'boss@example.com']);
});

test.after(async () => {
  await closed?.stop();
  await idp?.close();
  await fwd?.close();
});

/** A whole login as the CLI sees it: the key it redeems, or the error the server sent it. */
async function login(t: TestServer, subject: string): Promise<{ key: string | null; error: string | null; description: string }> {
  const pkce = newPkce();
  const r = await loginToCli(t.url, 'idp', subject, pkce, ++port);
  if (!r.code) return { key: null, error: r.error, description: r.description ?? '' };
  const res = await redeem(t.url, { code: r.code, code_verifier: pkce.verifier, hostname: 'box' });
  assert.is(res.status, 201, res.text);
  return { key: res.body.key as string, error: null, description: '' };
}

async function accountsOf(t: TestServer, userId: string): Promise<number> {
  const [r] = await t.sql<{ n: number }[]>`select count(*)::int as n from accounts where user_id = ${userId}`;
  return r!.n;
}

test('a provider vouching for seed@burrow.local gets nothing: not the seed admin, no key, even under --signup closed', async () => {
  const seed = (await api(closed, 'GET', '/me', { key: closed.adminKey })).body as { id: string; email: string; role: string };
  assert.is(seed.email, 'seed@burrow.local');
  assert.is(seed.role, 'admin');
  idp.users.set('mallory-seed', { email: 'seed@burrow.local', email_verified: true, name: 'Mallory' });
  const r = await login(closed, 'mallory-seed');
  assert.is(r.key, null, 'no key for the attacker');
  assert.is(r.error, 'access_denied');
  assert.match(r.description, /seed admin/);
  // Any case of the address, too.
  idp.users.set('mallory-seed-2', { email: 'SEED@Burrow.Local', email_verified: true });
  assert.is((await login(closed, 'mallory-seed-2')).error, 'access_denied');
  assert.is(await accountsOf(closed, seed.id), 0, 'no account was linked to the seed admin');
  const [n] = await closed.sql<{ n: number }[]>`select count(*)::int as n from users`;
  assert.is(n!.n, 1, 'and no user was made');
});

test('an existing admin is not linked to a login by default; an address no mail reaches is never linked', async () => {
  const admin = await createUser(closed, { email: 'root@ops.example.com', role: 'admin' });
  idp.users.set('mallory-admin', { email: 'Root@Ops.Example.com', email_verified: true });
  const r = await login(closed, 'mallory-admin');
  assert.is(r.key, null);
  assert.is(r.error, 'access_denied');
  assert.match(r.description, /administrator.*--oauth-link-admins/);
  assert.is(await accountsOf(closed, admin.id), 0);

  const internal = await createUser(closed, { email: 'bob@build.internal' });
  idp.users.set('mallory-internal', { email: 'bob@build.internal', email_verified: true });
  const i = await login(closed, 'mallory-internal');
  assert.is(i.error, 'access_denied');
  assert.match(i.description, /no mail can reach/);
  assert.is(await accountsOf(closed, internal.id), 0);

  // The --initial-admin-email address is linked to the admin made for it: its first login
  // would make an admin anyway.
  const boss = await createUser(closed, { email: 'boss@example.com', role: 'admin' });
  idp.users.set('boss', { email: 'boss@example.com', email_verified: true });
  const b = await login(closed, 'boss');
  assert.ok(b.key, b.description);
  assert.is((await api(closed, 'GET', '/me', { key: b.key! })).body.id, boss.id);

  // A member with a real address is still linked (the documented way an admin-made user logs in).
  const member = await createUser(closed, { email: 'carol@example.com' });
  idp.users.set('carol', { email: 'carol@example.com', email_verified: true });
  const c = await login(closed, 'carol');
  assert.ok(c.key, c.description);
  assert.is((await api(closed, 'GET', '/me', { key: c.key! })).body.id, member.id);
});

test('--oauth-link-admins links a first login to the admin with that verified email; the seed admin stays unclaimable', async () => {
  await closed.stop({ keepDatabase: true });
  const linking = await start(['--signup', 'closed', '--oauth-link-admins'], closed);
  closed = linking;
  const [admin] = await linking.sql<{ id: string }[]>`select id from users where email = 'root@ops.example.com'`;
  idp.users.set('root', { email: 'root@ops.example.com', email_verified: true });
  const r = await login(linking, 'root');
  assert.ok(r.key, r.description);
  const me = (await api(linking, 'GET', '/me', { key: r.key! })).body;
  assert.is(me.id, admin!.id);
  assert.is(me.role, 'admin');
  idp.users.set('mallory-seed-3', { email: 'seed@burrow.local', email_verified: true });
  const s = await login(linking, 'mallory-seed-3');
  assert.is(s.key, null);
  assert.match(s.description, /seed admin/);
});

test('deliverable addresses: two labels or more, no special-use name, no address literal', () => {
  for (const ok of ['a@example.com', 'b@mail.example.org', 'c@xn--bcher-kva.de', 'd@EXAMPLE.COM']) assert.ok(isDeliverableEmail(ok), ok);
  for (const no of ['seed@burrow.local', 'a@localhost', 'a@host', 'a@b.test', 'a@x.example', 'a@x.invalid', 'a@corp.internal', 'a@printer.home.arpa', 'a@[127.0.0.1]', 'a@127.0.0.1', 'a@x.onion', 'a@x..com', 'nobody']) {
    assert.not.ok(isDeliverableEmail(no), no);
  }
});

test.run();
