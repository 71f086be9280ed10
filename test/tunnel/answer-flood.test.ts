import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { startServer, type TestServer } from '../helpers/server.js';
import { createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { encodeFrame, F } from '../../src/protocol/frames.js';
import { encodeWsFrame, WS_OP } from '../../src/protocol/ws-frames.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { rawPeer, type RawPeer } from './raw-peer.js';
import { listen, visit, type Local } from './helpers.js';

// A user with a key opens the 32 control connections it may hold, stops reading them and sends
// frames that each cost the edge an answer (protocol Pings, Opens that are refused, WebSocket
// Pings) as fast as it can. Each answer used to be its own socket write, counted by its payload
// bytes only, and the edge kept reading: +410 MiB for one connection, 1 GiB for 32, another
// user's visits took seconds and failed, and SIGTERM afterwards aborted. Now such a connection
// is closed once it spends its budget of answered frames, the edge stops reading a connection
// whose output waits, the server's memory stays within 64 MiB of where it was, another user's
// tunnel serves throughout, and burrowd still exits 0 on SIGTERM.

const CONNECTIONS = 32;
const FLOOD_MS = 3_000;
const RSS_BOUND_BYTES = 64 * 1024 * 1024;

let server: TestServer;
let local: Local;
let victim: TunnelClient;

test.before(async () => {
  server = await startServer({ workers: 2 });
  local = await listen(http.createServer((_req, res) => res.end('victim is fine')));
  const user = await createUser(server);
  const key = await createKeyFor(server, user.id, { scopes: ['tunnels'] });
  victim = new TunnelClient({ server: server.url, token: key, type: 'http', id: 'victim', local: { host: '127.0.0.1', port: local.port } });
  await withDeadline(victim.start(), 10_000, 'the victim tunnel starts');
});

test.after(async () => {
  victim?.stop();
  await local?.close();
  if (server && server.proc.exitCode === null) await server.stop();
});

/** burrowd's resident memory (its shards are threads of it); NaN once it is gone. */
function rssBytes(pid: number): number {
  try {
    return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) * 1024;
  } catch {
    return NaN;
  }
}

/** One WebSocket frame as a client sends it (masked), repeated into a 64 KiB block. */
function block(frame: Buffer): Buffer {
  return Buffer.concat(Array.from({ length: Math.ceil(65_536 / frame.length) }, () => frame));
}

const FLOODS: Record<string, Buffer> = {
  ping: block(encodeWsFrame(WS_OP.Binary, encodeFrame([F.Ping, 1]), true)),
  // An id that is not a valid tunnel id: refused at once, each refusal an answer.
  open: block(encodeWsFrame(WS_OP.Binary, encodeFrame([F.Open, 1, { type: 'http', id: 'NOT VALID' }]), true)),
  'websocket ping': block(encodeWsFrame(WS_OP.Ping, Buffer.alloc(0), true)),
};

/** Writes `bytes` again and again until `until`, waiting for each drain; resolves with the bytes sent. */
function flood(peer: RawPeer, bytes: Buffer, until: number): Promise<number> {
  const socket = peer.ws.socket;
  return new Promise((resolve) => {
    let sent = 0;
    const pump = (): void => {
      while (Date.now() < until && !socket.destroyed) {
        sent += bytes.length;
        if (!socket.write(bytes)) return void socket.once('drain', pump);
      }
      resolve(sent);
    };
    socket.on('error', () => resolve(sent));
    socket.on('close', () => resolve(sent));
    pump();
  });
}

for (const [name, bytes] of Object.entries(FLOODS)) {
  test(`${CONNECTIONS} connections that never read and flood ${name} frames: closed, memory bounded, another user served`, async () => {
    const peers = await Promise.all(Array.from({ length: CONNECTIONS }, () => rawPeer(server.url, server.adminKey)));
    for (const p of peers) p.ws.socket.pause(); // the attacker reads nothing from here on
    const logFrom = server.stderr().length;
    const before = rssBytes(server.proc.pid!);
    let peak = before;
    // Math.max keeps NaN: a burrowd that died on the way fails the bound below.
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(server.proc.pid!))), 50);
    const until = Date.now() + FLOOD_MS;
    const floods = Promise.all(peers.map((p) => flood(p, bytes, until)));
    // Another user's visitors, one after another, all through the flood.
    const answers: number[] = [];
    while (Date.now() < until) {
      const r = await visit(server.port, `victim.${server.domain}`, {}, 5_000);
      answers.push(r.status);
      assert.is(r.body.toString(), 'victim is fine');
    }
    await floods;
    // Every flooding connection was cut by the edge (the attacker's writes fail once it is).
    await eventually(() => peers.every((p) => p.ws.socket.destroyed), 10_000, 'every flooding connection is closed by the edge');
    await new Promise((r) => setTimeout(r, 500));
    clearInterval(sampler);
    peak = Math.max(peak, rssBytes(server.proc.pid!));
    assert.ok(answers.length > 0 && answers.every((s) => s === 200), `another user's visits all answered: ${answers.join(',')}`);
    assert.ok(peak - before < RSS_BOUND_BYTES, `burrowd grew by ${((peak - before) / 2 ** 20).toFixed(1)} MiB (bound ${RSS_BOUND_BYTES / 2 ** 20} MiB)`);
    assert.match(server.stderr().slice(logFrom), /too fast: closing it|closing control connection/);
    assert.is(server.proc.exitCode, null, 'burrowd is running');
  });
}

test('after the floods a client connects again, and SIGTERM in the middle of another flood ends burrowd with exit 0', async () => {
  // Another user: the flooded Opens spent the attacker's registrations of this minute.
  const user = await createUser(server);
  const peer = await rawPeer(server.url, await createKeyFor(server, user.id, { scopes: ['tunnels'] }));
  const opened = await peer.open({ type: 'http', id: 'after-flood' });
  assert.is(opened[0], F.Opened, JSON.stringify(opened));
  // The attacker's connections, not read, some holding unread output the edge wrote them.
  const attackers = await Promise.all(Array.from({ length: CONNECTIONS }, () => rawPeer(server.url, server.adminKey)));
  for (const p of attackers) p.ws.socket.pause();
  const floods = Promise.all(attackers.map((p, i) => flood(p, i % 2 ? FLOODS['websocket ping']! : FLOODS.ping!, Date.now() + 10_000)));
  await new Promise((r) => setTimeout(r, 200));
  victim.stop();
  const code = await withDeadline(server.stop(), 20_000, 'burrowd stops');
  assert.is(code, 0);
  for (const p of attackers) p.ws.destroy();
  peer.ws.destroy();
  await floods;
});

test.run();
