// The inspector of a real `burrow http` in front of a real local service, behind a real burrowd:
// requests made through the tunnel show in GET /api/requests with heads and bodies, replay
// reaches the local service again, the HAR parses, a foreign Host is refused, and the address
// falls back to the next free port. The page in a browser: test/browser/inspector.test.ts.
import http from 'node:http';
import { createServer, type Server } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { CaptureJson } from '../../src/client/inspector/store.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { adminOf, closedPort, exitOf, RunningBurrows, tempDir, waitFor, type CliEnv } from '../cli/harness.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';
import { call } from './http.js';

let srv: TestServer;
let home: { dir: string; remove: () => void };
let local: Local;
let alice: CliEnv;
const burrows = new RunningBurrows();
const blockers: Server[] = [];
const seen: { method: string; url: string; body: string; trace?: string }[] = [];

test.before(async () => {
  srv = await startServer();
  home = tempDir();
  local = await listen(
    http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        seen.push({ method: req.method!, url: req.url!, body, trace: req.headers['x-trace'] as string | undefined });
        res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'application/json', 'x-local': 'yes' });
        res.end(JSON.stringify({ path: req.url, body }));
      });
    }),
  );
  alice = adminOf(srv, home.dir);
});

test.after(async () => {
  burrows.killAll();
  for (const b of blockers) b.close();
  await local?.close();
  await srv?.stop();
  home?.remove();
});

/** `burrow http` with the inspector's default base port moved to `base` (a free one). */
async function startHttp(id: string, base: number, extra: string[] = []) {
  const env: CliEnv = { ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(base) } };
  const child = burrows.start(env, ['http', String(local.port), '--id', id, ...extra]);
  const url = await burrows.firstLine(child);
  return { child, url };
}

const inspectorUrl = (stderr: string) => /^burrow: inspector at (http:\/\/\S+)$/m.exec(stderr)?.[1];

test('requests through the tunnel show in the API with heads and bodies; replay reaches the local service; HAR parses', async () => {
  const { child, url } = await startHttp('insp-api', await closedPort());
  assert.is(url, `http://insp-api.localhost:${srv.port}`); // stdout's first line is still the URL
  const insp = await waitFor(() => inspectorUrl(child.output.stderr), 10_000, 'inspector address on stderr');
  assert.not.match(child.output.stdout, /inspector/);
  const host = `insp-api.localhost:${srv.port}`;
  const r = await visit(srv.port, host, { method: 'POST', path: '/orders?x=1', headers: { 'content-type': 'application/json', 'x-trace': 'abc' }, body: '{"n":1}' });
  assert.is(r.status, 200);
  assert.is((await visit(srv.port, host, { path: '/missing' })).status, 404);

  let entries: CaptureJson[] = [];
  const poll = async () => {
    for (let i = 0; i < 200; i++) {
      entries = (await call(`${insp}/api/requests`)).json<CaptureJson[]>();
      if (entries.length >= 2 && entries.every((e) => e.state === 'complete')) return;
      await new Promise((res) => setTimeout(res, 50));
    }
    throw new Error(`captures: ${JSON.stringify(entries.map((e) => [e.path, e.state]))}`);
  };
  await poll();
  assert.equal(entries.map((e) => [e.tunnel, e.method, e.path, e.status]), [['insp-api', 'GET', '/missing', 404], ['insp-api', 'POST', '/orders?x=1', 200]]);
  const post = entries[1]!;
  const reqHeaders = Object.fromEntries(post.request.headers.map(([k, v]) => [k.toLowerCase(), v]));
  assert.is(reqHeaders['x-trace'], 'abc');
  assert.is(reqHeaders.host, host);
  assert.is(Buffer.from(post.request.body_base64, 'base64').toString(), '{"n":1}');
  const resHeaders = Object.fromEntries(post.response.headers.map(([k, v]) => [k.toLowerCase(), v]));
  assert.is(resHeaders['x-local'], 'yes');
  assert.equal(JSON.parse(Buffer.from(post.response.body_base64, 'base64').toString()), { path: '/orders?x=1', body: '{"n":1}' });
  assert.type(post.duration_ms, 'number');
  assert.ok(!Number.isNaN(Date.parse(post.started_at)));

  seen.length = 0;
  const rep = await call(`${insp}/api/requests/${post.id}/replay`, { method: 'POST' });
  assert.is(rep.status, 200, rep.text);
  const again = rep.json<CaptureJson>();
  assert.is(again.replay_of, post.id);
  assert.is(again.status, 200);
  assert.equal(seen, [{ method: 'POST', url: '/orders?x=1', body: '{"n":1}', trace: 'abc' }]);
  const after = (await call(`${insp}/api/requests`)).json<CaptureJson[]>();
  assert.is(after.length, 3);
  assert.is(after[0]!.id, again.id);

  const har = await call(`${insp}/api/requests.har`);
  assert.match(String(har.headers['content-disposition']), /attachment; filename="burrow-.*\.har"/);
  const doc = JSON.parse(har.text);
  assert.is(doc.log.version, '1.2');
  assert.equal(doc.log.entries.map((e: { request: { method: string; url: string } }) => [e.request.method, e.request.url]), [
    ['POST', `http://${host}/orders?x=1`],
    ['GET', `http://${host}/missing`],
    ['POST', `http://${host}/orders?x=1`],
  ]);
  assert.is(doc.log.entries[0].request.postData.text, '{"n":1}');

  const foreign = await call(`${insp}/api/requests`, { headers: { host: 'attacker.example:4040' } });
  assert.is(foreign.status, 403);
  assert.not.match(foreign.text, /orders/);

  child.kill('SIGINT');
  assert.is(await exitOf(child, 30_000, 'burrow http exit'), 0);
  // The inspector went with it.
  assert.not.ok(await call(`${insp}/api/requests`, {}, 3_000).then(() => true, () => false), 'inspector still answering');
});

test('port fallback: the default port taken, the next free one is used and printed', async () => {
  const blocker = createServer();
  blockers.push(blocker);
  const base = await new Promise<number>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve((blocker.address() as { port: number }).port)));
  const { child } = await startHttp('insp-fallback', base);
  const insp = await waitFor(() => inspectorUrl(child.output.stderr), 10_000, 'inspector address');
  const port = Number(new URL(insp).port);
  assert.ok(port > base && port < base + 10, `${port} after ${base}`);
  assert.is((await call(`${insp}/api/requests`)).status, 200);
  child.kill('SIGINT');
  assert.is(await exitOf(child, 30_000, 'fallback exit'), 0);
});

test('--no-inspect starts none; --inspect ADDR taken is exit 1 saying so; burrow tcp has none', async () => {
  const none = await startHttp('insp-none', await closedPort(), ['--no-inspect']);
  await visit(srv.port, `insp-none.localhost:${srv.port}`, { path: '/x' });
  none.child.kill('SIGINT');
  assert.is(await exitOf(none.child, 30_000, '--no-inspect exit'), 0);
  assert.not.match(none.child.output.stderr, /inspector/);

  const blocker = createServer();
  blockers.push(blocker);
  const taken = await new Promise<number>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve((blocker.address() as { port: number }).port)));
  const bad = burrows.start(alice, ['http', String(local.port), '--id', 'insp-taken', '--inspect', `127.0.0.1:${taken}`]);
  assert.is(await exitOf(bad, 30_000, 'taken --inspect exit'), 1);
  assert.match(bad.output.stderr, new RegExp(`inspector not started.*127\\.0\\.0\\.1:${taken}: address in use`));
  assert.match(bad.output.stderr, /--no-inspect/);
  assert.is(bad.output.stdout, '');

  const usage = burrows.start(alice, ['http', String(local.port), '--inspect', 'nonsense']);
  assert.is(await exitOf(usage, 30_000, 'bad --inspect exit'), 2);
  assert.match(usage.output.stderr, /invalid --inspect/);

  const tcp = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['tcp', String(local.port)]);
  await burrows.firstLine(tcp);
  // burrow http announces its inspector in the same turn as it prints the URL; give the pipe a moment.
  await new Promise((r) => setTimeout(r, 500));
  assert.not.match(tcp.output.stderr, /inspector/);
});

test.run();
