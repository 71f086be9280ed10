// The inspector of a real `burrow start` (a burrow.yml with two http tunnels and a tcp one, one
// control connection, a real burrowd and real local services): one inspector for the run, its
// address on stderr once, the requests of both http tunnels recorded under their entry names,
// and a replay going to the local service of the tunnel the request came through.
import http from 'node:http';
import net from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { CaptureJson } from '../../src/client/inspector/store.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { adminOf, closedPort, exitOf, RunningBurrows, tempDir, waitFor, type CliEnv } from '../cli/harness.js';
import { listen, visit, type Local } from '../tunnel/helpers.js';
import { call } from './http.js';

let srv: TestServer;
let home: { dir: string; remove: () => void };
let web: Local;
let api: Local;
let echo: Local;
let alice: CliEnv;
const burrows = new RunningBurrows();
const seen: string[] = [];

/** A local service that says who it is and remembers what reached it. */
const service = (name: string) =>
  http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      seen.push(`${name} ${req.method} ${req.url} ${body}`);
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(`${name} says ${req.url}`);
    });
  });

test.before(async () => {
  srv = await startServer();
  home = tempDir();
  web = await listen(service('web'));
  api = await listen(service('api'));
  echo = await listen(net.createServer((s) => s.pipe(s)));
  alice = adminOf(srv, home.dir);
});

test.after(async () => {
  burrows.killAll();
  await web?.close();
  await api?.close();
  await echo?.close();
  await srv?.stop();
  home?.remove();
});

function configFile(name: string, tunnels: string): string {
  const p = join(home.dir, name);
  writeFileSync(p, `version: 1\ntunnels:\n${tunnels}`);
  return p;
}

const inspectorLines = (stderr: string) => [...stderr.matchAll(/^burrow: inspector at (http:\/\/\S+)$/gm)].map((m) => m[1]!);

async function captures(insp: string, n: number): Promise<CaptureJson[]> {
  let entries: CaptureJson[] = [];
  for (let i = 0; i < 400; i++) {
    entries = (await call(`${insp}/api/requests`)).json<CaptureJson[]>();
    if (entries.length >= n && entries.every((e) => e.state === 'complete')) return entries;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`captures: ${JSON.stringify(entries.map((e) => [e.tunnel, e.path, e.state]))}`);
}

test('burrow start: one inspector records the requests of both http tunnels under their names; replay goes to the right service', async () => {
  const file = configFile(
    'insp.yml',
    `  web: { proto: http, addr: "127.0.0.1:${web.port}", id: insp-start-web }\n  api: { proto: http, addr: "127.0.0.1:${api.port}", id: insp-start-api }\n  db: { proto: tcp, addr: "127.0.0.1:${echo.port}" }\n`,
  );
  const child = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['start', '--config', file]);
  await waitFor(() => (child.output.stdout.split('\n').filter(Boolean).length >= 3 ? true : undefined), 20_000, 'three URL lines');
  const insp = await waitFor(() => inspectorLines(child.output.stderr)[0], 10_000, 'inspector address on stderr');
  assert.not.match(child.output.stdout, /inspector/);

  const webHost = `insp-start-web.localhost:${srv.port}`;
  const apiHost = `insp-start-api.localhost:${srv.port}`;
  assert.is((await visit(srv.port, webHost, { path: '/page' })).body.toString(), 'web says /page');
  assert.is((await visit(srv.port, apiHost, { method: 'POST', path: '/items', headers: { 'content-type': 'application/json' }, body: '{"n":2}' })).body.toString(), 'api says /items');

  const entries = await captures(insp, 2);
  assert.equal(entries.map((e) => [e.tunnel, e.method, e.path, e.status]), [
    ['api', 'POST', '/items', 200],
    ['web', 'GET', '/page', 200],
  ]);
  assert.is(Buffer.from(entries[0]!.response.body_base64, 'base64').toString(), 'api says /items');

  // The api tunnel's capture is replayed to the api service, not to the first tunnel's.
  seen.length = 0;
  const rep = await call(`${insp}/api/requests/${entries[0]!.id}/replay`, { method: 'POST' });
  assert.is(rep.status, 200, rep.text);
  const again = rep.json<CaptureJson>();
  assert.is(again.tunnel, 'api');
  assert.is(again.replay_of, entries[0]!.id);
  assert.equal(seen, ['api POST /items {"n":2}']);

  // One inspector for the run: announced once, however many tunnels.
  assert.equal(inspectorLines(child.output.stderr), [insp]);
  child.kill('SIGINT');
  assert.is(await exitOf(child, 30_000, 'burrow start exit'), 0);
  assert.not.ok(await call(`${insp}/api/requests`, {}, 3_000).then(() => true, () => false), 'inspector still answering');
});

test('burrow start --no-inspect, and a file of tcp tunnels only: no inspector', async () => {
  const httpFile = configFile('noinsp.yml', `  web: { proto: http, addr: "127.0.0.1:${web.port}", id: insp-start-none }\n`);
  const none = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['start', '--config', httpFile, '--no-inspect']);
  await burrows.firstLine(none);
  const tcpFile = configFile('tcp.yml', `  db: { proto: tcp, addr: "127.0.0.1:${echo.port}" }\n`);
  const tcp = burrows.start({ ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['start', '--config', tcpFile]);
  await burrows.firstLine(tcp);
  // The address is announced in the same turn as the URLs are printed; give the pipe a moment.
  await new Promise((r) => setTimeout(r, 500));
  for (const [child, what] of [[none, '--no-inspect'], [tcp, 'tcp only']] as const) {
    child.kill('SIGINT');
    assert.is(await exitOf(child, 30_000, `${what} exit`), 0);
    assert.not.match(child.output.stderr, /inspector/, what);
  }
});

test.run();
