// --server pointing at a server that is not burrowd (a web server's 404 page, a login wall, a
// catch-all 200): every command says "this is not a burrowd server (it answered 404 text/html to
// GET /api/v1/me)", exit 6, prints none of its HTML and claims nothing about keys or logins.
// A proxy's 502 page (burrowd behind nginx, restarting) is said as such, and `burrow http` keeps
// trying. No burrowd here: the servers are plain node:http ones.
import { createServer, type Server } from 'node:http';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { burrow, spawnBurrow, tempDir, waitFor, exitOf, type CliEnv } from './harness.js';

const PAGE = '<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1><hr>nginx</body></html>';
const servers: Server[] = [];
let home: { dir: string; remove: () => void };

test.before(() => {
  home = tempDir();
});
test.after(() => {
  for (const s of servers) s.close();
  home?.remove();
});

/** A server answering every request (upgrades too) with `status` and an HTML page; its URL. */
async function htmlServer(status: number): Promise<string> {
  const answer = `HTTP/1.1 ${status} X\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: ${PAGE.length}\r\nConnection: close\r\n\r\n${PAGE}`;
  const s = createServer((_req, res) => {
    res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
    res.end(PAGE);
  });
  s.on('upgrade', (_req, socket) => {
    // The CLI may reset the connection once it read the answer: not this server's error.
    socket.on('error', () => undefined);
    socket.end(answer);
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as { port: number }).port}`;
}

const as = (server: string): CliEnv => ({
  configDir: home.dir,
  env: { BURROW_SERVER: server, BURROW_TOKEN: 'bk_aaaaaaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' },
});

function assertNotBurrowd(r: { code: number | null; stdout: string; stderr: string }, server: string, status: number, path: string): void {
  assert.is(r.code, 6, r.stderr);
  assert.is(r.stdout, '');
  assert.is(r.stderr, `error: ${server}: this is not a burrowd server (it answered ${status} text/html to GET ${path})\nhint: check --server, BURROW_SERVER or \`burrow context current\`\n`);
}

test('a 404 page: whoami, tunnels list, http and login all say it is not burrowd, exit 6, no HTML', async () => {
  const server = await htmlServer(404);
  assertNotBurrowd(await burrow(as(server), ['whoami']), server, 404, '/api/v1/me');
  assertNotBurrowd(await burrow(as(server), ['tunnels', 'list']), server, 404, '/api/v1/tunnels');
  assertNotBurrowd(await burrow(as(server), ['http', '3000', '--no-inspect']), server, 404, '/tunnel/v1/connect');
  // Not "has no login provider configured": it is not burrow's login that is missing.
  assertNotBurrowd(await burrow(as(server), ['login', '--no-browser']), server, 404, '/auth/v1/providers');
});

test('a 401 page is not a refused key, a 200 page not an answer: same message, no key or login hint', async () => {
  const wall = await htmlServer(401);
  assertNotBurrowd(await burrow(as(wall), ['whoami']), wall, 401, '/api/v1/me');
  assertNotBurrowd(await burrow(as(wall), ['http', '3000', '--no-inspect']), wall, 401, '/tunnel/v1/connect');
  const catchAll = await htmlServer(200);
  assertNotBurrowd(await burrow(as(catchAll), ['whoami']), catchAll, 200, '/api/v1/me');
  // Before, `burrow http` took a 200 page for a passing failure and printed it at every retry.
  assertNotBurrowd(await burrow(as(catchAll), ['http', '3000', '--no-inspect']), catchAll, 200, '/tunnel/v1/connect');
});

test("a proxy's 502 page: said as the proxy's, and burrow http keeps trying (burrowd may be restarting)", async () => {
  const proxy = await htmlServer(502);
  const r = await burrow(as(proxy), ['whoami']);
  assert.match(r.stderr, /^error: http:\/\/127\.0\.0\.1:\d+: no answer from burrowd: something in front of it answered 502 text\/html to GET \/api\/v1\/me \(a proxy whose burrowd is down or restarting\?\)$/m);
  assert.not.match(r.stderr, /</);
  const child = spawnBurrow(as(proxy), ['http', '3000', '--no-inspect']);
  try {
    await waitFor(() => (/attempt 2\b/.test(child.output.stderr) ? true : undefined), 15_000, `two attempts: ${child.output.stderr}`);
    assert.match(child.output.stderr, /reconnecting in \d+ms \(attempt 1\): no answer from burrowd: something in front of it answered 502 text\/html to GET \/tunnel\/v1\/connect/);
    assert.not.match(child.output.stderr, /</);
  } finally {
    child.kill('SIGINT');
    await exitOf(child, 10_000, 'burrow http exit');
  }
});

test.run();
