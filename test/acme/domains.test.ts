import { test } from 'uvu';
import * as assert from 'uvu/assert';
import https from 'node:https';
import tls from 'node:tls';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/deadline.js';
import { createKeyFor, createUser } from '../helpers/fixtures.js';
import { addMember, createTeamWithOwner } from '../../src/db/teams.js';
import { startPebble, type Pebble } from '../helpers/pebble.js';
import { peerCertificate } from '../helpers/https-visit.js';
import { DomainRoutes } from '../../src/acme/domain-routes.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { burrow, tempDir } from '../cli/harness.js';

// Custom domains through the API of a burrowd that gets its certificates from Pebble: bad names
// refused with a clear problem, a failing ownership check refused and nothing issued, then the
// TXT record in place: verified, routed to its tunnel, and issued by HTTP-01 on --http-port.

const DOMAIN = 'tunnel.example.com';
let pebble: Pebble;
let server: TestServer;
let root: string;
let alice: string;
let bob: string;

interface Reply {
  status: number;
  type: string;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** An API call over HTTPS as the tunnel domain, verified against Pebble's root. */
function call(method: string, path: string, key: string, body?: unknown, host = DOMAIN, servername = host): Promise<Reply> {
  return withDeadline(
    new Promise<Reply>((resolve, reject) => {
      const req = https.request({ host: '127.0.0.1', port: server.port, servername, path, method, ca: root, agent: false, headers: { host, authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) } });
      req.on('error', reject);
      req.on('response', (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString('utf8')));
        res.on('end', () => {
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            /* a page, not JSON */
          }
          resolve({ status: res.statusCode!, type: String(res.headers['content-type'] ?? ''), body: parsed });
        });
      });
      req.end(body ? JSON.stringify(body) : undefined);
    }),
    20_000,
    `${method} ${path}`,
  );
}

/** The certificate a fresh handshake as `servername` gets; `verify` false: whatever it is. */
const certificateFor = (servername: string, verify = true): Promise<tls.PeerCertificate> => peerCertificate(server.port, servername, verify ? root : null);

test.before(async () => {
  pebble = await startPebble();
  server = await startServer({
    args: [
      '--domain', DOMAIN, '--acme-email', 'ops@example.com', '--acme-ca', pebble.directoryUrl, '--acme-dns-hook', pebble.hook,
      '--dns-resolver', pebble.dnsServer, '--http-port', String(pebble.httpPort),
    ],
    env: { NODE_EXTRA_CA_CERTS: pebble.caFile },
  });
  root = await pebble.root();
  alice = await createKeyFor(server, (await createUser(server)).id);
  bob = await createKeyFor(server, (await createUser(server)).id);
});

test.after(async () => {
  if (process.env.ACME_DEBUG) console.log(server.stderr().split('\n').filter((l) => /acme|ACME|domain/.test(l)).join('\n'));
  await server?.stop();
  await pebble?.stop();
});

test('bad names: an IP, a wildcard, a name under the tunnel domain, a public suffix, a name of another user: problem+json, nothing stored', async () => {
  const cases: [string, RegExp][] = [
    ['192.0.2.7', /IP address/],
    ['*.customer.org', /wildcard/],
    [`app.${DOMAIN}`, /under the tunnel domain/],
    ['co.uk', /public suffix/],
    ['not a name', /not a DNS name/],
  ];
  for (const [name, why] of cases) {
    const r = await call('POST', '/api/v1/domains', alice, { name, tunnel: 'web' });
    assert.is(r.status, 400, name);
    assert.match(r.type, /application\/problem\+json/);
    assert.match(r.body.detail, why, name);
  }
  const bad = await call('POST', '/api/v1/domains', alice, { name: 'ok.customer.org', tunnel: 'API' });
  assert.is(bad.status, 400);
  assert.match(bad.body.detail, /tunnel id/);
  const first = await call('POST', '/api/v1/domains', bob, { name: 'taken.customer.org', tunnel: 'bobs' });
  assert.is(first.status, 201);
  const taken = await call('POST', '/api/v1/domains', alice, { name: 'Taken.Customer.org.', tunnel: 'web' });
  assert.is(taken.status, 409);
  assert.match(taken.body.detail, /taken by another user/);
  // Bob's domain is not Alice's to see or remove.
  assert.is((await call('GET', '/api/v1/domains/taken.customer.org', alice)).status, 404);
  assert.is((await call('DELETE', '/api/v1/domains/taken.customer.org', alice)).status, 404);
  const [row] = await server.sql<{ n: number }[]>`select count(*)::int as n from custom_domains`;
  assert.is(row!.n, 1);
});

test('a domain whose ownership record is missing fails verification with what to create; nothing is routed or issued', async () => {
  const added = await call('POST', '/api/v1/domains', alice, { name: 'shop.customer.org', tunnel: 'web' });
  assert.is(added.status, 201);
  assert.is(added.body.verified, false);
  assert.is(added.body.txt_name, '_burrow-challenge.shop.customer.org');
  assert.is(added.body.cname_target, `web.${DOMAIN}`);
  const r = await call('POST', '/api/v1/domains/shop.customer.org/verify', alice);
  assert.is(r.status, 409);
  assert.match(r.body.detail, /not verified: neither the TXT record nor the CNAME is in place/);
  assert.ok(r.body.detail.includes(added.body.txt_value), 'the detail names the value to create');
  const got = await call('GET', '/api/v1/domains/shop.customer.org', alice);
  assert.is(got.body.verified, false);
  assert.match(got.body.last_error, /neither/);
  const [row] = await server.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where name = 'shop.customer.org'`;
  assert.is(row!.n, 0, 'no order before verification');
  // Another user's token would not do: the value is bound to the user who added the domain.
  const bobs = await call('POST', '/api/v1/domains', bob, { name: 'other.customer.org', tunnel: 'web' });
  assert.is.not(bobs.body.txt_value, added.body.txt_value);
});

test('with the TXT record in place: verified, routed to its tunnel, and issued by HTTP-01 on --http-port', async () => {
  const added = (await call('GET', '/api/v1/domains/shop.customer.org', alice)).body;
  await pebble.setTxt(added.txt_name, added.txt_value);
  const r = await call('POST', '/api/v1/domains/shop.customer.org/verify', alice);
  assert.is(r.status, 200, JSON.stringify(r.body));
  assert.is(r.body.verified, true);
  const cert = await eventually(async () => {
    const c = await certificateFor('shop.customer.org');
    if (!/DNS:shop\.customer\.org/.test(c.subjectaltname ?? '')) throw new Error(`still ${c.subjectaltname}`);
    return c;
  }, 30_000, 'the custom domain certificate');
  assert.not.match(cert.subjectaltname ?? '', /\*/);
  // Routed as web.<domain> is: both reach tunnel "web" (not connected here), not the API.
  const viaDomain = await call('GET', '/anything', alice, undefined, 'shop.customer.org');
  const viaTunnelHost = await call('GET', '/anything', alice, undefined, `web.${DOMAIN}`);
  assert.is(viaDomain.status, viaTunnelHost.status);
  assert.equal(viaDomain.body, viaTunnelHost.body);
  const list = await call('GET', '/api/v1/domains', alice);
  assert.equal(list.body.map((d: { name: string }) => d.name), ['shop.customer.org']);
  // Removed: no longer routed, its certificate gone.
  assert.is((await call('DELETE', '/api/v1/domains/shop.customer.org', alice)).status, 200);
  const after = await call('GET', '/anything', alice, undefined, 'shop.customer.org', DOMAIN);
  assert.not.equal(after.body, viaDomain.body);
  const fallback = await certificateFor('shop.customer.org', false);
  assert.not.match(fallback.subjectaltname ?? '', /shop/);
  assert.match(fallback.subjectaltname ?? '', /\*\.tunnel\.example\.com/);
});

test('the CLI: domains add prints the records (and --json the fields), verify explains a failure, list, get, remove; --help on each', async () => {
  const cfg = tempDir();
  try {
    // The CLI reaches the server by the tunnel domain (its certificate's name): a preload points
    // that name at loopback, as a hosts file entry would.
    const preload = join(cfg.dir, 'loopback-dns.mjs');
    writeFileSync(preload, `import dns from 'node:dns';\nconst lookup = dns.lookup;\ndns.lookup = (host, o, cb) => host.endsWith('example.com') ? (typeof o === 'function' ? o : cb)(null, ...(o && o.all ? [[{ address: '127.0.0.1', family: 4 }]] : ['127.0.0.1', 4])) : lookup(host, o, cb);\n`);
    const rootFile = join(cfg.dir, 'pebble-root.pem');
    writeFileSync(rootFile, root);
    const env = { BURROW_SERVER: `https://${DOMAIN}:${server.port}`, BURROW_TOKEN: alice, BURROW_CA: rootFile, NODE_OPTIONS: `--import=${preload}` };
    const run = (args: string[]) => burrow({ configDir: cfg.dir, env }, args);
    const added = await run(['domains', 'add', 'cli.customer.org', '--tunnel', 'web']);
    assert.is(added.code, 0, added.stderr);
    assert.match(added.stdout, /_burrow-challenge\.cli\.customer\.org\. TXT "[A-Za-z0-9_-]{43}"/);
    assert.match(added.stdout, /cli\.customer\.org\. CNAME web\.tunnel\.example\.com\./);
    const json = await run(['domains', 'add', 'cli2.customer.org', '--tunnel', 'web', '--json']);
    assert.is(json.code, 0, json.stderr);
    const d = JSON.parse(json.stdout);
    for (const k of ['name', 'tunnel', 'verified', 'txt_name', 'txt_value']) assert.ok(k in d, k);
    assert.is(d.verified, false);
    const refused = await run(['domains', 'verify', 'cli.customer.org']);
    assert.is(refused.code, 5, refused.stderr);
    assert.match(refused.stderr, /not verified: neither the TXT record nor the CNAME/);
    const bad = await run(['domains', 'add', '10.0.0.1', '--tunnel', 'web']);
    assert.is(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /IP address/);
    const list = await run(['domains', 'list']);
    assert.match(list.stdout, /cli\.customer\.org\s+web\s+no/);
    const got = await run(['domains', 'get', 'cli2.customer.org', '--json']);
    assert.is(JSON.parse(got.stdout).name, 'cli2.customer.org');
    assert.is((await run(['domains', 'remove', 'cli2.customer.org'])).code, 0);
    assert.is((await run(['domains', 'get', 'cli2.customer.org'])).code, 4);
    for (const sub of ['add', 'verify', 'list', 'get', 'remove']) {
      const help = await run(['domains', sub, '--help']);
      assert.is(help.code, 0);
      assert.match(help.stdout, /Usage: burrow domains/);
    }
  } finally {
    cfg.remove();
  }
});

test('first need: a domain verified elsewhere (another node, SQL) gets its certificate when a handshake first names it', async () => {
  assert.is((await call('POST', '/api/v1/domains', alice, { name: 'first.customer.org', tunnel: 'web' })).status, 201);
  await server.sql`update custom_domains set verified_at = now() where name = 'first.customer.org'`;
  const cert = await eventually(async () => {
    const c = await certificateFor('first.customer.org', false);
    if (!/DNS:first\.customer\.org/.test(c.subjectaltname ?? '')) throw new Error(`still ${c.subjectaltname}`);
    return c;
  }, 20_000, 'the certificate of first need');
  assert.ok(cert.serialNumber);
  const [row] = await server.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where name = 'first.customer.org'`;
  assert.is(row!.n, 1, 'ordered once, however many handshakes asked');
});

test('team rules: members see and verify a team\'s domain; only its adder, a team owner or an admin remove it; outsiders see nothing', async () => {
  const owner = await createUser(server);
  const member = await createUser(server);
  const outsider = await createUser(server);
  const [ownerKey, memberKey, outsiderKey] = await Promise.all([owner, member, outsider].map((u) => createKeyFor(server, u.id)));
  const team = await createTeamWithOwner(server.sql, `domains-${Date.now()}`, owner.id);
  await addMember(server.sql, team.id, member.id);
  const notMine = await call('POST', '/api/v1/domains', outsiderKey, { name: 'intruder.teamco.org', tunnel: 'web', team_id: team.id });
  assert.is(notMine.status, 403);
  const added = await call('POST', '/api/v1/domains', memberKey, { name: 'docs.teamco.org', tunnel: 'handbook', team_id: team.id });
  assert.is(added.status, 201);
  assert.is(added.body.team_id, team.id);
  assert.is((await call('GET', '/api/v1/domains/docs.teamco.org', ownerKey)).status, 200);
  assert.is((await call('POST', '/api/v1/domains/docs.teamco.org/verify', ownerKey)).status, 409, 'verified by a member: checked (and refused, no record)');
  assert.is((await call('GET', '/api/v1/domains/docs.teamco.org', outsiderKey)).status, 404);
  assert.equal((await call('GET', '/api/v1/domains', outsiderKey)).body, []);
  const byOwnerOfOther = await call('POST', '/api/v1/domains', ownerKey, { name: 'owner.teamco.org', tunnel: 'handbook', team_id: team.id });
  assert.is(byOwnerOfOther.status, 201);
  const memberRemoves = await call('DELETE', '/api/v1/domains/owner.teamco.org', memberKey);
  assert.is(memberRemoves.status, 403);
  assert.match(memberRemoves.body.detail, /user who added it, an owner of its team, or an admin/);
  assert.is((await call('DELETE', '/api/v1/domains/docs.teamco.org', ownerKey)).status, 200, 'a team owner removes a member\'s domain');
  assert.is((await call('DELETE', '/api/v1/domains/owner.teamco.org', server.adminKey)).status, 200, 'an admin removes any');
});

test('the route map: a verified name with any port or a trailing dot, nothing else', () => {
  const r = new DomainRoutes();
  (r as unknown as { routes: Map<string, string> }).routes = new Map([['shop.customer.org', 'web']]);
  assert.is(r.tunnelOf('shop.customer.org'), 'web');
  assert.is(r.tunnelOf('Shop.Customer.org:8443'), 'web');
  assert.is(r.tunnelOf('shop.customer.org.'), 'web');
  assert.is(r.tunnelOf('x.shop.customer.org'), null);
});

test.run();
