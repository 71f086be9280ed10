// "Copy as cURL": the command is pasted into a shell, so it is run here by /bin/sh with the real
// curl, against a local service standing in for the public URL, and what arrives must be exactly
// the captured request: method, path, headers and body, hostile quotes and `$(…)` included, and
// nothing run on the way.
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { curlCommand, shellQuote } from '../../src/client/inspector/curl.js';
import { CaptureStore } from '../../src/client/inspector/store.js';

interface Arrival {
  method: string;
  url: string;
  headers: string[];
  body: Buffer;
}

let server: http.Server;
let port: number;
let arrivals: Arrival[] = [];
let scratch: string;

test.before(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'burrow-curl-'));
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      arrivals.push({ method: req.method!, url: req.url!, headers: req.rawHeaders, body: Buffer.concat(chunks) });
      res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  port = (server.address() as AddressInfo).port;
});

test.after(() => {
  server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** A capture as the tunnel client records it: the edge's forwarding headers name the public host. */
function captured(method: string, path: string, headers: string[], body?: Buffer) {
  const store = new CaptureStore();
  const obs = store.begin('web', { method, target: path, headers: ['Host', 'localhost:3000', ...headers, 'x-forwarded-for', '203.0.113.9', 'x-forwarded-proto', 'http', 'x-forwarded-host', `127.0.0.1:${port}`, 'x-real-ip', '203.0.113.9'] });
  if (body) obs.requestBody(body);
  obs.end();
  return obs.capture;
}

/** Runs the command as a user's shell would, in a scratch directory (where a `touch` would land). */
function runInShell(command: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('/bin/sh', ['-c', command], { cwd: scratch, timeout: 10_000 }, (err, _out, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve()));
  });
}

async function send(command: string): Promise<Arrival> {
  arrivals = [];
  await runInShell(command);
  assert.is(arrivals.length, 1);
  return arrivals[0]!;
}

const pairs = (raw: string[]) => raw.flatMap((v, i) => (i % 2 ? [] : [[v, raw[i + 1]!]]));

test('shellQuote: one single-quoted word; a quote inside is closed, escaped and reopened', () => {
  assert.is(shellQuote('plain'), `'plain'`);
  assert.is(shellQuote(`it's`), `'it'\\''s'`);
});

test('a hostile text body and header reach the service exactly, and nothing in them runs', async () => {
  const hostile = `{"q": "it's $(touch pwned-body) \`touch pwned-tick\` \\\\ %s\\n"}\nline two\r\n`;
  const c = captured('POST', "/api/items?x=1&y=$(touch${IFS}pwned-url)'", ['Content-Type', 'application/json', 'X-Note', `O'Brien $(touch pwned-header) "quoted"`], Buffer.from(hostile));
  const cmd = curlCommand(c);
  assert.ok(cmd.startsWith('curl '), cmd);
  assert.match(cmd, new RegExp(`'http://127\\.0\\.0\\.1:${port}/api/items`)); // the public URL, from X-Forwarded-Host
  const got = await send(cmd);
  assert.is(got.method, 'POST');
  assert.is(got.url, "/api/items?x=1&y=$(touch${IFS}pwned-url)'");
  assert.is(got.body.toString(), hostile);
  const headers = pairs(got.headers);
  assert.ok(headers.some(([n, v]) => n === 'X-Note' && v === `O'Brien $(touch pwned-header) "quoted"`), JSON.stringify(headers));
  assert.ok(headers.some(([n, v]) => n === 'Content-Type' && v === 'application/json'));
  // The edge sets these again, and curl writes Host from the URL: not copied from the capture.
  for (const h of ['x-forwarded-for', 'x-real-ip']) assert.not.ok(headers.some(([n]) => n.toLowerCase() === h), h);
  assert.ok(headers.some(([n, v]) => n === 'Host' && v === `127.0.0.1:${port}`));
  assert.equal(readdirSync(scratch), []); // no `touch` ran
});

test('a binary body (NUL, high bytes, quotes, %, backslash) arrives byte for byte', async () => {
  const bytes = Buffer.from([0, 1, 0x27, 0x25, 0x5c, 0x0a, 0xff, 0xfe, 0x80, 0x41, 0x00]);
  const got = await send(curlCommand(captured('PUT', '/upload', ['Content-Type', 'application/octet-stream'], bytes)));
  assert.is(got.method, 'PUT');
  assert.equal([...got.body], [...bytes]);
});

test('method and URL as captured: HEAD, DELETE, globs and dot segments are not rewritten by curl', async () => {
  assert.is((await send(curlCommand(captured('DELETE', '/items/7', [])))).method, 'DELETE');
  assert.is((await send(curlCommand(captured('HEAD', '/probe', [])))).method, 'HEAD');
  assert.is((await send(curlCommand(captured('GET', '/search?tags[]=a&q={x}', [])))).url, '/search?tags[]=a&q={x}');
  assert.is((await send(curlCommand(captured('GET', '/a/../b/./c', [])))).url, '/a/../b/./c');
});

test('a body without a Content-Type gets none (curl would add a form type)', async () => {
  const got = await send(curlCommand(captured('POST', '/raw', [], Buffer.from('a=1&b=2'))));
  assert.is(got.body.toString(), 'a=1&b=2');
  assert.not.ok(pairs(got.headers).some(([n]) => n.toLowerCase() === 'content-type'));
});

test('the URL is the public one even when the Host was rewritten for the local service', () => {
  const c = captured('GET', '/x', []);
  assert.match(curlCommand(c), new RegExp(`^curl 'http://127\\.0\\.0\\.1:${port}/x'$`));
});

test("a basic-auth tunnel's credential: added as -u only when asked, and a hostile one stays one word", async () => {
  const store = new CaptureStore();
  const credential = `al'ice:$(touch pwned-cred)`;
  const obs = store.begin('web', { method: 'GET', target: '/secret', headers: ['Host', 'localhost:3000', 'x-forwarded-host', `127.0.0.1:${port}`] }, { credentials: credential });
  obs.end();
  const c = obs.capture;
  assert.is(c.summary().basic_auth, true);
  assert.not.ok(JSON.stringify(c).includes('pwned-cred'), 'the credential is never in the capture JSON');
  assert.not.match(curlCommand(c), / -u /);
  const cmd = curlCommand(c, true);
  const got = await send(cmd);
  assert.is(pairs(got.headers).find(([n]) => n === 'Authorization')?.[1], `Basic ${Buffer.from(credential).toString('base64')}`);
  assert.equal(readdirSync(scratch), []);
  // A tunnel without basic auth: nothing to add.
  assert.not.match(curlCommand(captured('GET', '/open', []), true), / -u /);
});

test.run();
