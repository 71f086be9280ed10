import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';

// The API while its database is away, through a TCP relay between burrowd and the database
// that the test controls: refused connections and a frozen link both give 503 `unavailable`
// problem+json with Retry-After within a bound (never a 500, never a hang), and the API
// answers again soon after the database returns.

let db: TestDatabase;
let proxy: TcpProxy;
let server: TestServer;
let freshKey = '';
/** Generous: the server's own bound is a few seconds; this only catches a hang. */
const ANSWER_DEADLINE_MS = 15_000;
const RECOVERY_DEADLINE_MS = 10_000;

test.before(async () => {
  db = await startDatabase();
  const u = new URL(db.url);
  proxy = await TcpProxy.start({ host: u.hostname, port: Number(u.port || 5432) });
  // A login provider (never contacted here) so the browser-login routes exist.
  const idp = 'http://127.0.0.1:9';
  const oauth = ['--base-url', 'http://localhost:8080', '--oauth-provider-name', 'corp', '--oauth-client-id', 'burrow', '--oauth-client-secret', 's3cret',
    '--oauth-authorize-url', `${idp}/authorize`, '--oauth-token-url', `${idp}/token`, '--oauth-userinfo-url', `${idp}/userinfo`];
  server = await startServer({ db: { ...db, url: proxy.urlFor(db.url) }, args: oauth });
  const user = await createUser(server);
  freshKey = await createKeyFor(server, user.id);
});

test.after(async () => {
  await proxy?.restore();
  await server?.stop();
  await proxy?.close();
  await db?.stop();
});

/** Times one call; the deadline only stops a hung test. */
async function timed(path: string, key = server.adminKey) {
  const t0 = Date.now();
  const r = await withDeadline(api(server, 'GET', path, { key }), ANSWER_DEADLINE_MS, `GET ${path}`);
  return { ...r, ms: Date.now() - t0 };
}

function assertUnavailable(r: Awaited<ReturnType<typeof timed>>, what: string): void {
  assert.is(r.status, 503, `${what}: ${r.text}`);
  assert.is(r.headers.get('content-type'), 'application/problem+json', what);
  assert.is(r.body.type, '/problems/unavailable', what);
  assert.match(r.body.detail, /database|try again/, what);
  assert.ok(Number(r.headers.get('retry-after')) > 0, `${what}: Retry-After`);
}

async function recovered(): Promise<number> {
  const t0 = Date.now();
  await eventually(async () => (await api(server, 'GET', '/me', { key: server.adminKey })).status === 200, RECOVERY_DEADLINE_MS, '/me answers again');
  await eventually(async () => (await api(server, 'GET', '/sessions', { key: server.adminKey })).status === 200, RECOVERY_DEADLINE_MS, '/sessions answers again');
  return Date.now() - t0;
}

test('database refusing connections: 503 with Retry-After, then recovery', async () => {
  assert.is((await timed('/me')).status, 200);
  assert.is((await timed('/sessions')).status, 200);
  await proxy.refuse();
  const figures: string[] = [];
  for (const path of ['/me', '/sessions', '/me']) {
    const r = await timed(path);
    assertUnavailable(r, `refused ${path}`);
    figures.push(`${path} ${r.ms} ms`);
  }
  // A key no shard has cached needs the database to authenticate: 503 too, not 401.
  assertUnavailable(await timed('/me', freshKey), 'uncached key');
  // Browser login's routes are outside the API table and meet the database too.
  const t0 = Date.now();
  const login = await withDeadline(
    fetch(`${server.url}/auth/v1/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ code: 'a-one-time-code', code_verifier: 'v'.repeat(43) }),
    }),
    ANSWER_DEADLINE_MS,
    'POST /auth/v1/token',
  );
  const text = await login.text();
  assertUnavailable({ status: login.status, headers: login.headers, body: JSON.parse(text), text, ms: Date.now() - t0 } as never, 'POST /auth/v1/token');
  await proxy.restore();
  const ms = await recovered();
  console.log(`refused: ${figures.join(', ')}; recovered in ${ms} ms`);
  assert.is((await timed('/me', freshKey)).status, 200);
  assert.not.match(server.stderr(), /unhandled error in route/);
});

test('frozen link: 503 within the bound, then recovery', async () => {
  assert.is((await timed('/me')).status, 200);
  proxy.freeze();
  const figures: string[] = [];
  // In parallel (more than the shard pools hold): queued calls are bounded too.
  const calls = await Promise.all(['/me', '/sessions', '/me', '/sessions', '/me', '/sessions', '/me', '/sessions', '/me', '/sessions'].map((p) => timed(p)));
  for (const r of calls) {
    assertUnavailable(r, 'frozen');
    figures.push(String(r.ms));
  }
  await proxy.restore();
  const ms = await recovered();
  console.log(`frozen: answered in ${figures.join(', ')} ms; recovered in ${ms} ms`);
  assert.not.match(server.stderr(), /unhandled error in route/);
});

test.run();
