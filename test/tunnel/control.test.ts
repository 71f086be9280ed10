import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import net from 'node:net';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient, TunnelRefused } from '../../src/client/tunnel-client.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, decodeFrame, encodeFrame, type Frame } from '../../src/protocol/frames.js';
import { listen, visit, once, type Local } from './helpers.js';
import { burrowVersion } from '../../src/version.js';

// The control connection: auth before upgrading, hello/version, several tunnels on one
// connection, malformed and oversized frames, admission rules, takeover, delete, reconnect.

let server: TestServer;
let local: Local;
const clients: TunnelClient[] = [];

function client(o: Partial<ConstructorParameters<typeof TunnelClient>[0]> = {}): TunnelClient {
  const c = new TunnelClient({ server: server.url, token: server.adminKey, type: 'http', local: { host: '127.0.0.1', port: local.port }, ...o });
  clients.push(c);
  return c;
}

async function refusal(p: Promise<unknown>): Promise<TunnelRefused> {
  try {
    await withDeadline(p, 10_000, 'start');
  } catch (err) {
    assert.instance(err, TunnelRefused);
    return err as TunnelRefused;
  }
  throw new Error('expected a refusal');
}

/** A raw protocol peer: frames in, frames out. */
async function raw(key = server.adminKey): Promise<{ ws: WsClient; next(): Promise<Frame>; send(f: Frame): void; closed: Promise<[number, string]> }> {
  const ws = await WsClient.connect(`${server.url}/tunnel/v1/connect`, { authorization: `Bearer ${key}` }, MAX_FRAME_BYTES, 5_000);
  const queue: Frame[] = [];
  const waiters: ((f: Frame) => void)[] = [];
  ws.on('message', (m) => {
    const f = decodeFrame(m);
    if (f[0] === F.Ping) return;
    const w = waiters.shift();
    if (w) w(f);
    else queue.push(f);
  });
  const closed = new Promise<[number, string]>((r) => ws.once('close', (c, why) => r([c, why])));
  return {
    ws,
    closed,
    send: (f) => ws.send(encodeFrame(f)),
    next: () => withDeadline(queue.length ? Promise.resolve(queue.shift()!) : new Promise<Frame>((r) => waiters.push(r)), 5_000, 'next frame'),
  };
}

test.before(async () => {
  server = await startServer();
  local = await listen(http.createServer((req, res) => res.end(`local ${req.url}`)));
});

test.after(async () => {
  await Promise.all(clients.map((c) => c.stop()));
  await local?.close();
  await server?.stop();
});

test('bad key: 401 before upgrading, refused for good', async () => {
  const e = await refusal(client({ token: 'bk_nope' }).start());
  assert.is(e.code, 'unauthorized');
  assert.is(e.permanent, true);
});

test('key without the tunnels scope: 403', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id, { scopes: ['management'] });
  const e = await refusal(client({ token: key }).start());
  assert.is(e.code, 'forbidden');
});

test('protocol version mismatch is refused with what to upgrade', async () => {
  const p = await raw();
  p.send([F.Hello, { v: PROTOCOL_VERSION + 1, agent: 'future' }]);
  const f = await p.next();
  assert.is(f[0], F.Fatal);
  const why = (f as [number, { code: string; message: string; permanent: boolean }])[1];
  assert.is(why.code, 'version');
  assert.ok(/upgrade burrowd/.test(why.message), why.message);
  await withDeadline(p.closed, 5_000, 'close');
});

test('the first frame must be a hello', async () => {
  const p = await raw();
  p.send([F.Ping, 1]);
  const f = await p.next();
  assert.is(f[0], F.Fatal);
  await withDeadline(p.closed, 5_000, 'close');
});

test('one connection carries several tunnels; streams name their tunnel', async () => {
  const p = await raw();
  p.send([F.Hello, { v: PROTOCOL_VERSION, agent: 'test' }]);
  assert.is((await p.next())[0], F.Welcome);
  p.send([F.Open, 1, { type: 'http', id: 'multi-one' }]);
  p.send([F.Open, 2, { type: 'http', id: 'multi-two' }]);
  const a = await p.next();
  const b = await p.next();
  assert.equal([a[0], b[0]], [F.Opened, F.Opened]);
  const pending = visit(server.port, 'multi-two.localhost', { path: '/two' });
  const open = await p.next();
  assert.is(open[0], F.StreamOpen);
  const [, sid, tunnelId, head] = open as [number, number, string, { kind: string; target: string }];
  assert.is(tunnelId, 'multi-two');
  assert.is(head.target, '/two');
  // The answer is the local service's bytes as they came (protocol 2), parsed again by the edge.
  p.send([F.Data, sid, Buffer.from('HTTP/1.1 201 Created\r\nX-Raw: yes\r\nContent-Length: 13\r\n\r\n')]);
  p.send([F.Data, sid, Buffer.from('from raw peer')]);
  p.send([F.End, sid]);
  const r = await pending;
  assert.is(r.status, 201);
  assert.is(r.body.toString(), 'from raw peer');
  p.ws.close();
});

test('a malformed frame closes only that connection', async () => {
  const good = client({ id: 'survivor' });
  await withDeadline(good.start(), 10_000, 'start');
  const p = await raw();
  p.send([F.Hello, { v: PROTOCOL_VERSION, agent: 'test' }]);
  await p.next();
  p.ws.send(Buffer.from([0xc1, 0xff, 0x00]));
  const f = await p.next();
  assert.is(f[0], F.Fatal);
  await withDeadline(p.closed, 5_000, 'close');
  assert.is((await visit(server.port, 'survivor.localhost', { path: '/still' })).body.toString(), 'local /still');
});

test('an oversized frame closes only that connection', async () => {
  const p = await raw();
  p.send([F.Hello, { v: PROTOCOL_VERSION, agent: 'test' }]);
  await p.next();
  p.ws.send(Buffer.alloc(MAX_FRAME_BYTES + 10));
  await withDeadline(p.closed, 5_000, 'close');
  assert.is((await visit(server.port, 'survivor.localhost', { path: '/again' })).body.toString(), 'local /again');
});

test('ids: invalid and reserved are bad requests', async () => {
  assert.is((await refusal(client({ id: 'Bad_Id' }).start())).code, 'bad-request');
  assert.is((await refusal(client({ id: 'api' }).start())).code, 'bad-request');
  assert.is((await refusal(client({ id: 'localhost' }).start())).code, 'bad-request');
});

test("another user's id: conflict; the same user's: takeover", async () => {
  const first = client({ id: 'taken' });
  await withDeadline(first.start(), 10_000, 'start');
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id, { scopes: ['tunnels'] });
  const e = await refusal(client({ id: 'taken', token: key }).start());
  assert.is(e.code, 'conflict');
  assert.is(e.permanent, true);

  const closed = once<[{ permanent: boolean; code: string }]>(first, 'closed', 5_000);
  const second = client({ id: 'taken' });
  await withDeadline(second.start(), 10_000, 'takeover');
  const [why] = await closed;
  assert.is(why.code, 'taken-over');
  assert.is(why.permanent, true);
  assert.is((await visit(server.port, 'taken.localhost', { path: '/t' })).status, 200);
});

test('team binding needs membership', async () => {
  const u = await createUser(server);
  const key = await createKeyFor(server, u.id);
  const team = await api(server, 'POST', '/teams', { key: server.adminKey, body: { name: `t-${Date.now()}` } });
  assert.is(team.status, 201);
  const e = await refusal(client({ token: key, teamId: team.body.id }).start());
  assert.is(e.code, 'forbidden');
  // Not a uuid: a team name, resolved among the user's own teams only.
  const unknown = await refusal(client({ teamId: 'no-such-team' }).start());
  assert.is(unknown.code, 'not-found');
  assert.match(unknown.message, 'no team named "no-such-team"');
  // Another team's name answers the same as no team at all: names of teams one is not in stay hidden.
  assert.is((await refusal(client({ token: key, teamId: team.body.name }).start())).code, 'not-found');
  const ok = client({ teamId: team.body.id, id: 'team-bound' });
  await withDeadline(ok.start(), 10_000, 'start');
  const t = await api(server, 'GET', '/tunnels/team-bound', { key: server.adminKey });
  assert.is(t.body.team_id, team.body.id);
});

test('delete through the API ends the client for good', async () => {
  const c = client({ id: 'doomed' });
  await withDeadline(c.start(), 10_000, 'start');
  const closed = once<[{ permanent: boolean; code: string }]>(c, 'closed', 5_000);
  const r = await api(server, 'DELETE', '/tunnels/doomed', { key: server.adminKey });
  assert.is(r.status, 200);
  const [why] = await closed;
  assert.is(why.permanent, true);
  assert.is(why.code, 'deleted');
  assert.is((await api(server, 'GET', '/tunnels/doomed', { key: server.adminKey })).status, 404);
  assert.is((await visit(server.port, 'doomed.localhost')).status, 404);
});

test('a dropped control connection reconnects with the same id', async () => {
  const c = client({ id: 'phoenix' });
  await withDeadline(c.start(), 10_000, 'start');
  const reconnecting = once<[{ attempt: number; delayMs: number }]>(c, 'reconnecting', 5_000);
  const registered = once<[{ id: string }]>(c, 'registered', 10_000);
  // Cut the socket under the client, as a network failure would.
  (c as unknown as { conn: { link: { ws: WsClient } } }).conn.link.ws.socket.destroy();
  const [r] = await reconnecting;
  assert.is(r.attempt, 1);
  const [again] = await registered;
  assert.is(again.id, 'phoenix');
  await eventually(async () => (await visit(server.port, 'phoenix.localhost', { path: '/back' })).status === 200, 5_000, 'tunnel back');
});

test('the server answers heartbeats', async () => {
  const p = await raw();
  p.send([F.Hello, { v: PROTOCOL_VERSION, agent: 'test' }]);
  await p.next();
  p.send([F.Ping, 42]);
  assert.equal(await p.next(), [F.Pong, 42]);
  p.ws.close();
});

// Half-open connections: a peer that stops talking without closing. A server with a 200 ms
// heartbeat makes the three missed intervals take well under a second.

test('a silent client is dropped after three missed heartbeats; its tunnel ends', async () => {
  const quick = await startServer({ args: ['--heartbeat-interval', '200'] });
  try {
    const ws = await WsClient.connect(`${quick.url}/tunnel/v1/connect`, { authorization: `Bearer ${quick.adminKey}` }, MAX_FRAME_BYTES, 5_000);
    const frames: Frame[] = [];
    // Pings are answered until the tunnel is seen registered (on a loaded machine that check can
    // take longer than three heartbeats); then the peer goes silent.
    let silent = false;
    ws.on('message', (m) => {
      const f = decodeFrame(m);
      frames.push(f);
      if (f[0] === F.Ping && !silent) ws.send(encodeFrame([F.Pong, f[1]]));
    });
    const closed = new Promise<void>((r) => ws.once('close', () => r()));
    ws.send(encodeFrame([F.Hello, { v: PROTOCOL_VERSION, agent: 'test' }]));
    ws.send(encodeFrame([F.Open, 1, { type: 'http', id: 'mute' }]));
    await eventually(() => frames.some((f) => f[0] === F.Opened), 5_000, 'opened');
    // Two shards: Welcome also names the one this connection landed on (for lanes).
    const welcome = frames.find((f) => f[0] === F.Welcome)!;
    const w = welcome[1] as { shard: number; resume: string };
    assert.match(w.resume, /^v1\.\d+\.[A-Za-z0-9_-]{43}$/, 'a resumption ticket');
    assert.equal(welcome, [F.Welcome, { v: PROTOCOL_VERSION, heartbeatMs: 200, version: burrowVersion(), shard: w.shard, shards: 2, resume: w.resume }]);
    assert.ok([0, 1].includes((welcome[1] as { shard: number }).shard));
    assert.is((await api(quick, 'GET', '/tunnels/mute', { key: quick.adminKey })).status, 200);
    silent = true;
    const pingsBefore = frames.filter((f) => f[0] === F.Ping).length;
    // From here on the peer neither answers Ping nor sends anything, and keeps its socket open.
    await withDeadline(closed, 5_000, 'the server closes the silent connection');
    assert.ok(frames.filter((f) => f[0] === F.Ping).length - pingsBefore >= 2, 'the server pinged before giving up');
    await eventually(async () => (await api(quick, 'GET', '/tunnels/mute', { key: quick.adminKey })).status === 404, 5_000, 'tunnel gone');
    assert.is((await visit(quick.port, 'mute.localhost')).status, 404);
  } finally {
    await quick.stop();
  }
});

/** A TCP relay whose open connections can be silenced: nothing forwarded, nothing closed. */
async function relay(targetPort: number): Promise<{ port: number; silence(): void; close(): void }> {
  const pairs: [net.Socket, net.Socket][] = [];
  const server = net.createServer((a) => {
    const b = net.connect(targetPort, '127.0.0.1');
    for (const s of [a, b]) s.on('error', () => undefined);
    a.pipe(b);
    b.pipe(a);
    pairs.push([a, b]);
  });
  const { port } = await listen(server);
  return {
    port,
    silence() {
      for (const [a, b] of pairs) {
        a.unpipe(b);
        b.unpipe(a);
        a.pause();
        b.pause();
      }
    },
    close() {
      for (const [a, b] of pairs) a.destroy(), b.destroy();
      server.close();
    },
  };
}

test('a client notices a silent server and reconnects', async () => {
  const quick = await startServer({ args: ['--heartbeat-interval', '200'] });
  const path = await relay(quick.port);
  const c = new TunnelClient({ server: `http://127.0.0.1:${path.port}`, token: quick.adminKey, type: 'http', id: 'deaf', local: { host: '127.0.0.1', port: local.port } });
  try {
    await withDeadline(c.start(), 10_000, 'start');
    const reconnecting = once<[{ attempt: number; reason: string }]>(c, 'reconnecting', 5_000);
    const registered = once<[{ id: string }]>(c, 'registered', 10_000);
    path.silence();
    const [r] = await reconnecting;
    assert.is(r.attempt, 1);
    assert.is((await registered)[0].id, 'deaf');
    await eventually(async () => (await visit(quick.port, 'deaf.localhost', { path: '/again' })).status === 200, 5_000, 'served again');
  } finally {
    await c.stop();
    path.close();
    await quick.stop();
  }
});

test.run();
