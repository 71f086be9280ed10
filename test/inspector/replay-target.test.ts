// Replay reaches the local service exactly as the tunnel does: the same Host rule
// (--host-header), the same scheme and certificate check (https://, --upstream-insecure), and
// the same `localhost` (both loopback addresses). Real `burrow http` behind a real burrowd, real
// local services on loopback; the self-signed certificate is made with the openssl CLI.
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { CaptureJson } from '../../src/client/inspector/store.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { adminOf, closedPort, exitOf, RunningBurrows, tempDir, waitFor, type CliEnv } from '../cli/harness.js';
import { visit } from '../tunnel/helpers.js';
import { call } from './http.js';
import { listenIpv6Only } from '../helpers/ipv6-only.js';

let srv: TestServer;
let home: { dir: string; remove: () => void };
let alice: CliEnv;
const burrows = new RunningBurrows();
const servers: http.Server[] = [];

function listen(s: http.Server, host: string): Promise<number> {
  servers.push(s);
  if (host === '::1') return listenIpv6Only(s);
  return new Promise((resolve) => s.listen(0, host, () => resolve((s.address() as AddressInfo).port)));
}

test.before(async () => {
  srv = await startServer();
  home = tempDir();
  alice = adminOf(srv, home.dir);
  execFileSync('/usr/bin/openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1',
    '-keyout', join(home.dir, 'key.pem'), '-out', join(home.dir, 'cert.pem'),
  ], { stdio: 'ignore' });
});

test.after(async () => {
  burrows.killAll();
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
  await srv?.stop();
  home?.remove();
});

const inspectorUrl = (stderr: string) => /^burrow: inspector at (http:\/\/\S+)$/m.exec(stderr)?.[1];

/** `burrow http ARGS` with its own inspector; resolves once both the URL and the inspector are up. */
async function expose(args: string[]) {
  const env: CliEnv = { ...alice, env: { ...alice.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } };
  const child = burrows.start(env, ['http', ...args]);
  const url = await burrows.firstLine(child);
  const insp = await waitFor(() => inspectorUrl(child.output.stderr), 10_000, 'inspector address on stderr');
  return { child, host: new URL(url).host, insp };
}

/** The capture of the one request made through the tunnel, once it completed. */
async function onlyCapture(insp: string): Promise<CaptureJson> {
  for (let i = 0; i < 200; i++) {
    const list = (await call(`${insp}/api/requests`)).json<CaptureJson[]>();
    if (list.length === 1 && list[0]!.state !== 'pending') return list[0]!;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('no completed capture');
}

async function replay(insp: string, id: string, edits?: object): Promise<CaptureJson> {
  const r = await call(`${insp}/api/requests/${id}/replay`, {
    method: 'POST',
    ...(edits ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(edits) } : {}),
  });
  assert.is(r.status, 200, r.text);
  return r.json<CaptureJson>();
}

const bodyOf = (c: CaptureJson) => Buffer.from(c.response.body_base64, 'base64').toString();

test('--host-header rewrite: a dev server that refuses a foreign Host answers replays too, even with an edited Host', async () => {
  let port = 0;
  const hosts: string[] = [];
  port = await listen(
    http.createServer((req, res) => {
      hosts.push(String(req.headers.host));
      // What Vite and webpack-dev-server do with a Host they do not know.
      if (req.headers.host !== `127.0.0.1:${port}`) return void res.writeHead(403).end('Invalid Host header');
      res.end('hello');
    }),
    '127.0.0.1',
  );
  const { child, host, insp } = await expose([`127.0.0.1:${port}`, '--id', 'replay-rewrite', '--host-header', 'rewrite']);
  assert.is((await visit(srv.port, host, { path: '/page' })).status, 200);
  const original = await onlyCapture(insp);
  assert.is(original.status, 200);

  const plain = await replay(insp, original.id);
  assert.is(plain.status, 200, plain.error ?? '');
  assert.is(bodyOf(plain), 'hello');
  // An edit that puts the public name back: the tunnel's rule still decides the Host sent.
  const edited = await replay(insp, original.id, { headers: [['Host', host], ['X-Edited', '1']] });
  assert.is(edited.status, 200, edited.error ?? '');
  assert.is(hosts.at(-1), `127.0.0.1:${port}`);
  // The capture shows the Host the local service got.
  assert.equal(edited.request.headers.filter(([n]) => n.toLowerCase() === 'host').map(([, v]) => v), [`127.0.0.1:${port}`]);

  child.kill('SIGINT');
  assert.is(await exitOf(child, 30_000, 'burrow http exit'), 0);
});

test('https://localhost on ::1 only, self-signed: replay speaks TLS to ::1 with --upstream-insecure, and verifies without it', async () => {
  const tls = https.createServer({ key: readFileSync(join(home.dir, 'key.pem')), cert: readFileSync(join(home.dir, 'cert.pem')) }, (req, res) => {
    res.end(`tls=${(req.socket as TLSSocket).encrypted === true} ${req.method} ${req.url}`);
  });
  // ::1 alone, as Vite and recent Node listen: this machine's resolver says localhost is 127.0.0.1.
  const port = await listen(tls, '::1');

  const lax = await expose([`https://localhost:${port}`, '--id', 'replay-tls', '--upstream-insecure']);
  assert.is((await visit(srv.port, lax.host, { path: '/secure' })).status, 200);
  const original = await onlyCapture(lax.insp);
  assert.is(original.status, 200);
  const again = await replay(lax.insp, original.id);
  assert.is(again.status, 200, again.error ?? '');
  assert.is(bodyOf(again), 'tls=true GET /secure');
  lax.child.kill('SIGINT');
  assert.is(await exitOf(lax.child, 30_000, 'insecure exit'), 0);

  // Without --upstream-insecure the tunnel refuses the certificate (502), and so does replay.
  const strict = await expose([`https://localhost:${port}`, '--id', 'replay-tls-strict']);
  assert.is((await visit(srv.port, strict.host, { path: '/secure' })).status, 502);
  const refused = await onlyCapture(strict.insp);
  const retried = await replay(strict.insp, refused.id);
  assert.is(retried.status, null);
  assert.match(retried.error ?? '', /certificate/i);
  strict.child.kill('SIGINT');
  assert.is(await exitOf(strict.child, 30_000, 'strict exit'), 0);
});

test.run();
