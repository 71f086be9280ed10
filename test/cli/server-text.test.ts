// Text a server sends is printed without what a terminal would act on: a peer posing as
// burrowd (or a forged notification, a key name) put escape sequences in a Refused message
// and in problem+json, and they reached the user's terminal raw (retitling it, clearing it,
// forging lines).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import type { Socket } from 'node:net';
import { WsConnection, websocketAccept } from '../../src/protocol/ws-connection.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, decodeFrame, encodeFrame } from '../../src/protocol/frames.js';
import { burrow, tempDir, type CliEnv } from './harness.js';

/** OSC window title, clear screen, colour, 8-bit CSI, a bell, a line of its own, a bidi override. */
const HOSTILE = '\x1b]0;pwned\x07\x1b[2J\x1b[31mclosed\x9b1m by\r\nerror: forged line\x07 the\u202e administrator\x1bc';

let peer: http.Server;
let url: string;
let home: { dir: string; remove: () => void };
let c: CliEnv;

test.before(async () => {
  peer = http.createServer((req, res) => {
    // Every API call: a problem whose title and detail carry the sequences.
    res.writeHead(409, { 'content-type': 'application/problem+json' });
    res.end(JSON.stringify({ type: 'about:blank', title: `Conflict${HOSTILE}`, status: 409, detail: `key name ${HOSTILE}` }));
  });
  // The control WebSocket: Welcome, then every Open refused with the sequences in its message.
  peer.on('upgrade', (req: http.IncomingMessage, socket: Socket, head: Buffer) => {
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${websocketAccept(String(req.headers['sec-websocket-key']))}\r\n\r\n`);
    const ws = new WsConnection(socket, head, MAX_FRAME_BYTES, 'server');
    ws.on('message', (m: Buffer) => {
      const f = decodeFrame(m);
      if (f[0] === F.Hello) ws.send(encodeFrame([F.Welcome, { v: PROTOCOL_VERSION, heartbeatMs: 1_000 }]));
      if (f[0] !== F.Open) return;
      if (f[2].id !== 'opened') return void ws.send(encodeFrame([F.Refused, f[1], { code: 'conflict', message: HOSTILE, permanent: true }]));
      // Admitted under a URL with the sequences in it, then closed for good with them.
      ws.send(encodeFrame([F.Opened, f[1], { id: 'opened', url: `http://opened.localhost${HOSTILE}`, remotePort: null }]));
      ws.send(encodeFrame([F.Closed, 'opened', { code: 'deleted', message: HOSTILE, permanent: true }]));
    });
  });
  await new Promise<void>((r) => peer.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(peer.address() as { port: number }).port}`;
  home = tempDir();
  c = { configDir: home.dir, env: { BURROW_SERVER: url, BURROW_TOKEN: 'bk_AAAAAAAAAAAA_' + 'A'.repeat(43) } };
});

test.after(async () => {
  peer?.closeAllConnections();
  await new Promise((r) => peer?.close(r));
  home?.remove();
});

/** Nothing a terminal acts on: no C0 control but the line ends, no DEL, no C1, no bidi override. */
function assertPrintable(text: string, what: string): void {
  // eslint-disable-next-line no-control-regex
  const bad = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/.exec(text);
  assert.is(bad, null, `${what}: ${JSON.stringify(text)}`);
}

test('a Refused message is printed without escape sequences or control characters, on one line', async () => {
  const r = await burrow(c, ['http', '3000', '--no-inspect']);
  assert.is(r.code, 5, r.stderr);
  assertPrintable(r.stdout + r.stderr, 'burrow http');
  assert.match(r.stderr, /^error: .*closed by error: forged line the administrator/m);
  assert.not.match(r.stderr, /^error: forged line/m, 'no line of the server\'s own');
  assert.not.match(r.stderr, /pwned/, 'no window title');
});

test('the URL of an Opened and the message of a Closed are printed stripped', async () => {
  const r = await burrow(c, ['http', '3000', '--id', 'opened', '--no-inspect']);
  assertPrintable(r.stdout + r.stderr, 'burrow http --id opened');
  assert.match(r.stdout, /^http:\/\/opened\.localhostclosed by error: forged line the administrator$/m);
  assert.match(r.stderr, /closed by error: forged line the administrator/);
  assert.not.match(r.stderr, /^error: forged line/m);
});

test('a problem+json title and detail are printed stripped, in text and under --json', async () => {
  const r = await burrow(c, ['keys', 'list']);
  assert.is(r.code, 5, r.stderr);
  assertPrintable(r.stdout + r.stderr, 'burrow keys list');
  assert.match(r.stderr, /^error: Conflict.*: key name .*closed by error: forged line the administrator/m);
  assert.is(r.stderr.trimEnd().split('\n').length, 2, 'one error line and one hint');
  const j = await burrow(c, ['keys', 'list', '--json']);
  assertPrintable(j.stderr, 'burrow keys list --json');
  assert.not.match(j.stderr, /\\u001b|\\u0007/, 'the JSON carries no escape either');
});

test.run();
