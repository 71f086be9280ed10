import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import fc from 'fast-check';
import '../helpers/property.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, eventually, withDeadline } from '../helpers/fixtures.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { encode } from '../../src/protocol/codec.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, RESET_CODES, decodeFrame, type Frame } from '../../src/protocol/frames.js';
import { visit, sleep } from './helpers.js';
import { lanePorts } from '../helpers/ports.js';

// Hostile tunnel clients: whatever a peer sends on its control connection (frames in invalid
// orders, wrong field types, extreme numbers, unknown stream ids, bursts, garbage) ends at most
// that connection or one stream. The shards never crash, the registry forgets the connection's
// tunnels, and no TCP port stays bound.

let server: TestServer;
const TCP_RANGE = lanePorts(300);

test.before(async () => {
  server = await startServer({ workers: 2, args: ['--tcp-port-range', `${TCP_RANGE.min}-${TCP_RANGE.max}`] });
});

test.after(async () => {
  await server?.stop();
});

/** A shard crash is logged by the shard ("shard crashed") and by the supervisor before its restart. */
const CRASH_RE = /shard crashed|shard exited unexpectedly|shards keep crashing|handler failed|teardown failed/;

function assertServerHealthy(): void {
  const bad = server.stderr().split('\n').filter((l) => CRASH_RE.test(l));
  assert.equal(bad, [], 'no shard crashed or restarted, no handler failed');
  assert.is(server.proc.exitCode, null, 'burrowd is running');
}

async function liveTunnelIds(): Promise<string[]> {
  const r = await api(server, 'GET', '/tunnels', { key: server.adminKey });
  assert.is(r.status, 200, r.text);
  return (r.body as { id: string }[]).map((t) => t.id);
}

/** A raw protocol peer: bytes out, frames in (Opened ports remembered). */
interface Peer {
  ws: WsClient;
  frames: Frame[];
  ports: number[];
  closed: Promise<[number, string]>;
  send(f: unknown): void;
  next(match: (f: Frame) => boolean, what: string): Promise<Frame>;
}

async function peer(): Promise<Peer> {
  const ws = await WsClient.connect(`${server.url}/tunnel/v1/connect`, { authorization: `Bearer ${server.adminKey}` }, MAX_FRAME_BYTES, 5_000);
  const frames: Frame[] = [];
  const ports: number[] = [];
  const waiters = new Set<() => void>();
  ws.on('message', (m) => {
    let f: Frame;
    try {
      f = decodeFrame(Buffer.from(m));
    } catch (err) {
      // A server frame our decoder refuses: kept as a Fatal so a test sees it, not thrown here.
      f = [F.Fatal, { code: 'internal', message: `undecodable server frame: ${(err as Error).message}`, permanent: true }];
    }
    if (f[0] === F.Opened && f[2].remotePort !== null) ports.push(f[2].remotePort);
    frames.push(f);
    for (const w of waiters) w();
  });
  const closed = new Promise<[number, string]>((r) => ws.once('close', (c, why) => r([c, why])));
  return {
    ws,
    frames,
    ports,
    closed,
    send: (f) => ws.send(encode(f)),
    next: (match, what) =>
      withDeadline(
        new Promise<Frame>((resolve) => {
          const check = (): void => {
            const i = frames.findIndex(match);
            if (i < 0) return;
            waiters.delete(check);
            resolve(frames.splice(i, 1)[0]!);
          };
          waiters.add(check);
          check();
        }),
        5_000,
        what,
      ),
  };
}

async function hello(p: Peer): Promise<void> {
  p.send([F.Hello, { v: PROTOCOL_VERSION, agent: 'hostile-test' }]);
  await p.next((f) => f[0] === F.Welcome, 'welcome');
}

async function openHttp(p: Peer, id: string): Promise<void> {
  p.send([F.Open, 1, { type: 'http', id }]);
  const f = await p.next((f) => f[0] === F.Opened || f[0] === F.Refused, 'opened');
  assert.is(f[0], F.Opened, JSON.stringify(f));
}

/**
 * A visitor's WebSocket upgrade request over a raw socket: the server's answer up to the end
 * of its head (then the visitor leaves), or whatever came before the server closed.
 */
function upgradeVisit(host: string, ms = 8_000): Promise<string> {
  return withDeadline(
    new Promise<string>((resolve) => {
      const sock = net.connect(server.port, '127.0.0.1');
      let got = '';
      sock.on('data', (d) => {
        got += d.toString('latin1');
        if (got.includes('\r\n\r\n')) sock.destroy();
      });
      sock.on('error', () => undefined);
      sock.on('close', () => resolve(got));
      sock.write(
        `GET /ws HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
      );
    }),
    ms,
    `upgrade visit ${host}`,
  );
}

/** A visit whose failure is a value (a crashed shard hangs up before the test awaits it). */
function settle<T>(p: Promise<T>): Promise<T | Error> {
  return p.catch((e: unknown) => (e instanceof Error ? e : new Error(String(e))));
}

/** Port `port` on 127.0.0.1 can be bound again: nothing of burrowd holds it. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen({ host: '127.0.0.1', port, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

// ---- regressions of the exact reported cases -------------------------------------------------

test('a Reset with an unknown code on a live HTTP stream ends that connection, not the shard', async () => {
  const p = await peer();
  await hello(p);
  await openHttp(p, 'reset-code');
  const pending = settle(visit(server.port, 'reset-code.localhost', { path: '/x' }));
  const open = await p.next((f) => f[0] === F.StreamOpen, 'stream open');
  p.send([F.Reset, open[1], 'made-up-code']);
  const fatal = (await p.next((f) => f[0] === F.Fatal, 'fatal')) as [number, { code: string; message: string }];
  assert.is(fatal[1].code, 'bad-request');
  assert.match(fatal[1].message, /Reset frame: code must be one of/);
  await withDeadline(p.closed, 5_000, 'close');
  const answer = await pending;
  assert.ok(!(answer instanceof Error), String(answer));
  assert.is((answer as { status: number }).status, 502);
  assertServerHealthy();
  await eventually(async () => !(await liveTunnelIds()).includes('reset-code'), 5_000, 'tunnel gone');
});

test('an answer 200 then 101 on an upgrade stream resets that stream, the shard stays up', async () => {
  const p = await peer();
  await hello(p);
  await openHttp(p, 'twice-answered');
  const pending = settle(upgradeVisit('twice-answered.localhost'));
  const open = (await p.next((f) => f[0] === F.StreamOpen, 'stream open')) as [number, number, string, { upgrade: boolean }];
  assert.is(open[3].upgrade, true);
  const sid = open[1];
  p.send([F.Data, sid, Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n')]);
  p.send([F.Data, sid, Buffer.from('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n')]);
  const reset = await p.next((f) => f[0] === F.Reset && f[1] === sid, 'reset of the stream');
  assert.is(reset[2], 'protocol');
  const answer = await pending;
  assert.ok(!(answer instanceof Error), String(answer));
  assert.not.match(answer as string, /^HTTP\/1\.1 101/);
  assertServerHealthy();
  // The connection itself goes on: a plain request still gets through it.
  const next = visit(server.port, 'twice-answered.localhost', { path: '/after' });
  const open2 = await p.next((f) => f[0] === F.StreamOpen, 'second stream');
  p.send([F.Data, open2[1], Buffer.from('HTTP/1.1 204 No Content\r\n\r\n')]);
  p.send([F.End, open2[1]]);
  assert.is((await next).status, 204);
  p.ws.close();
  await withDeadline(p.closed, 5_000, 'close');
});

for (const [label, id] of [['1234', 1234], ['true', true], ["['abcd']", ['abcd']]] as const) {
  test(`an Open with id ${label} is refused with a message naming the field; /tunnels stays 200`, async () => {
    const p = await peer();
    await hello(p);
    p.send([F.Open, 7, { type: 'http', id }]);
    const fatal = (await p.next((f) => f[0] === F.Fatal || f[0] === F.Opened || f[0] === F.Refused, 'answer')) as [number, { code: string; message: string }];
    assert.is(fatal[0], F.Fatal, JSON.stringify(fatal));
    assert.is(fatal[1].code, 'bad-request');
    assert.match(fatal[1].message, /open\.id must be a string/);
    await withDeadline(p.closed, 5_000, 'close');
    const r = await api(server, 'GET', '/tunnels', { key: server.adminKey });
    assert.is(r.status, 200, r.text);
    assertServerHealthy();
  });
}

test('frames for a stream that was never opened end the connection', async () => {
  const p = await peer();
  await hello(p);
  p.send([F.Data, 77, Buffer.from('x')]);
  const fatal = (await p.next((f) => f[0] === F.Fatal, 'fatal')) as [number, { message: string }];
  assert.match(fatal[1].message, /stream 77 was never opened/);
  await withDeadline(p.closed, 5_000, 'close');
});

test('body bytes before the response head reset the stream (502 to the visitor)', async () => {
  const p = await peer();
  await hello(p);
  await openHttp(p, 'body-first');
  const pending = settle(visit(server.port, 'body-first.localhost'));
  const open = await p.next((f) => f[0] === F.StreamOpen, 'stream open');
  p.send([F.Data, open[1], Buffer.from('too early')]);
  const reset = await p.next((f) => f[0] === F.Reset, 'reset');
  assert.equal(reset, [F.Reset, open[1], 'protocol']);
  const answer = await pending;
  assert.ok(!(answer instanceof Error), String(answer));
  assert.is((answer as { status: number }).status, 502);
  p.ws.close();
  await withDeadline(p.closed, 5_000, 'close');
  assertServerHealthy();
});

test('a connection that ends while its Open is being admitted leaves no tunnel and no port', async () => {
  const p = await peer();
  p.send([F.Hello, { v: PROTOCOL_VERSION, agent: 'hangs-up' }]);
  p.send([F.Open, 1, { type: 'tcp', id: 'hangs-up', remotePort: TCP_RANGE.max }]);
  // Read in the same turn as the Open: the connection is closed before admission answers.
  p.send([F.End, 99]);
  await withDeadline(p.closed, 5_000, 'close');
  // Admission takes a round trip to main: give it time to land after the close.
  await sleep(300);
  await eventually(async () => !(await liveTunnelIds()).includes('hangs-up'), 5_000, 'no tunnel "hangs-up"');
  await eventually(() => portFree(TCP_RANGE.max), 5_000, 'port released');
  assertServerHealthy();
});

// ---- property: arbitrary frame sequences ---------------------------------------------------

type Op =
  | { k: 'frame'; f: unknown }
  | { k: 'burst'; f: unknown; n: number }
  | { k: 'raw'; b: Uint8Array }
  | { k: 'visit'; tunnel: number; upgrade: boolean; body: boolean }
  | { k: 'tcp-visit' }
  | { k: 'wait'; ms: number };

const weird = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(-1, 2 ** 32, 2 ** 53, Number.MAX_VALUE, NaN, Infinity),
  fc.string({ maxLength: 12 }),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.string({ maxLength: 4 }), { maxLength: 2 }),
  fc.uint8Array({ maxLength: 8 }),
  fc.dictionary(fc.string({ maxLength: 4 }), fc.integer(), { maxKeys: 2 }),
);
/** `weird` values include null-prototype objects, which String() refuses. */
const printable = (x: unknown): string => {
  try {
    return String(x);
  } catch {
    return '{}';
  }
};
/** Mostly the ids the server hands out (1, 2, ...), sometimes anything. */
const sid = fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 0, max: 5 }) }, { weight: 1, arbitrary: fc.constantFrom(2 ** 32 - 1, 2 ** 31) }, { weight: 1, arbitrary: weird });
const or = <T>(a: fc.Arbitrary<T>): fc.Arbitrary<unknown> => fc.oneof({ weight: 4, arbitrary: a }, { weight: 1, arbitrary: weird });
const headers = or(fc.array(fc.constantFrom('Content-Type', 'text/plain', 'Content-Length', '5', '0', 'X-A', 'Bad Name', 'Upgrade', 'websocket'), { maxLength: 6 }));

function frames(run: number): fc.Arbitrary<unknown> {
  const tunnelId = or(fc.constantFrom(`hx${run}a`, `hx${run}b`));
  return fc.oneof(
    or(fc.record({ v: fc.constantFrom(PROTOCOL_VERSION, 0, 99), agent: fc.string({ maxLength: 8 }) })).map((h) => [F.Hello, h]),
    fc.tuple(or(fc.nat(10)), or(fc.constantFrom('http', 'tcp')), tunnelId, or(fc.constantFrom(undefined, null)), or(fc.constantFrom(undefined, null))).map(([reqId, type, id, teamId, remotePort]) => [
      F.Open, reqId, { type, id, teamId, remotePort },
    ]),
    tunnelId.map((id) => [F.Close, id]),
    // Answers as raw bytes, well-formed or not (the edge parses them again).
    fc.tuple(sid, or(fc.constantFrom(101, 200, 204, 404, 100, 599)), fc.array(fc.constantFrom('Content-Type: text/plain', 'Content-Length: 5', 'Content-Length: 0', 'Bad Name: v', 'Upgrade: websocket', 'Transfer-Encoding: chunked'), { maxLength: 4 }))
      .map(([s, status, h]) => [F.Data, s, Buffer.from(`HTTP/1.1 ${printable(status)} X\r\n${h.map((l) => `${l}\r\n`).join('')}\r\n`)]),
    fc.tuple(sid, or(fc.uint8Array({ maxLength: 64 }))).map(([s, b]) => [F.Data, s, b]),
    sid.map((s) => [F.End, s]),
    fc.tuple(sid, or(fc.constantFrom(...RESET_CODES, 'bogus'))).map(([s, c]) => [F.Reset, s, c]),
    fc.tuple(sid, or(fc.constantFrom(0, 1, 128 * 1024, 2 ** 32 - 1))).map(([s, n]) => [F.Credit, s, n]),
    or(fc.nat()).map((n) => [F.Ping, n]),
    or(fc.nat()).map((n) => [F.Pong, n]),
    fc.tuple(sid, tunnelId).map(([s, t]) => [F.StreamOpen, s, t, { kind: 'tcp', remote: 'x' }]),
    fc.constantFrom(F.Welcome, F.Opened, F.Refused, F.Closed, F.Fatal, F.GoAway).map((t) => [t, { code: 'deleted', message: 'm', permanent: true }]),
    // A well-formed GoAway is still the server's frame alone.
    or(fc.nat()).map((ms) => [F.GoAway, { timeoutMs: ms }]),
    // So is a Ticket, well-formed or not.
    or(fc.string({ maxLength: 200 })).map((resume) => [F.Ticket, { resume }]),
    fc.tuple(fc.integer({ min: -3, max: 40 }), weird).map(([t, x]) => [t, x, x]),
    weird,
  );
}

function ops(run: number): fc.Arbitrary<Op[]> {
  const f = frames(run);
  // Most runs start with a hello and an Open so the later frames meet live tunnels and streams.
  const opening: Op[] = [
    { k: 'frame', f: [F.Hello, { v: PROTOCOL_VERSION, agent: 'prop' }] },
    { k: 'frame', f: [F.Open, 1, { type: 'http', id: `hx${run}a` }] },
    { k: 'frame', f: [F.Open, 2, { type: 'tcp' }] },
    { k: 'wait', ms: 30 },
  ];
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 8, arbitrary: f.map((x): Op => ({ k: 'frame', f: x })) },
    { weight: 1, arbitrary: fc.tuple(f, fc.integer({ min: 2, max: 60 })).map(([x, n]): Op => ({ k: 'burst', f: x, n })) },
    { weight: 1, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 24 }).map((b): Op => ({ k: 'raw', b })) },
    { weight: 3, arbitrary: fc.record({ tunnel: fc.nat(1), upgrade: fc.boolean(), body: fc.boolean() }).map((v): Op => ({ k: 'visit', ...v })) },
    { weight: 1, arbitrary: fc.constant<Op>({ k: 'tcp-visit' }) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: 25 }).map((ms): Op => ({ k: 'wait', ms })) },
  );
  return fc.tuple(fc.boolean(), fc.array(op, { minLength: 1, maxLength: 14 })).map(([open, rest]) => (open ? [...opening, ...rest] : rest));
}

/** One hostile connection: plays `list`, hangs up, waits for its visitors to settle. */
async function play(run: number, list: Op[]): Promise<number[]> {
  const p = await peer();
  const visitors: Promise<unknown>[] = []; // settled at once: a failure is a value
  const ids = [`hx${run}a`, `hx${run}b`];
  for (const op of list) {
    if (p.ws.bufferedBytes > 4 * 1024 * 1024) break;
    switch (op.k) {
      case 'frame':
        p.send(op.f);
        break;
      case 'burst':
        for (let i = 0; i < op.n; i++) p.send(op.f);
        break;
      case 'raw':
        p.ws.send(op.b);
        break;
      case 'visit': {
        const host = `${ids[op.tunnel]}.localhost`;
        visitors.push(settle<unknown>(op.upgrade ? upgradeVisit(host) : visit(server.port, host, op.body ? { method: 'POST', body: 'hello' } : {}, 8_000)));
        break;
      }
      case 'tcp-visit': {
        const port = p.ports[0];
        if (port === undefined) break;
        visitors.push(
          settle(withDeadline(
            new Promise<void>((resolve) => {
              const s = net.connect(port, '127.0.0.1', () => s.end('tcp visitor'));
              s.on('error', () => resolve());
              s.on('close', () => resolve());
              s.resume();
            }),
            8_000,
            'tcp visit',
          )),
        );
        break;
      }
      case 'wait':
        await sleep(op.ms);
        break;
    }
  }
  await sleep(20);
  p.ws.close();
  await withDeadline(p.closed, 5_000, 'control connection closed');
  // Every visitor gets an answer or a closed socket once the connection is gone: a hang is a failure.
  for (const v of await Promise.all(visitors)) if (v instanceof Error && /no result within/.test(v.message)) throw v;
  return p.ports;
}

test('property: arbitrary frame sequences never crash a shard nor leak tunnels or ports', async () => {
  const mine = (id: string): boolean => /^hx\d+[ab]$/.test(id);
  const runs = fc.integer({ min: 0, max: 999_999 }).chain((run) => ops(run).map((list) => ({ run, list })));
  await fc.assert(
    fc.asyncProperty(runs, async ({ run, list }) => {
      const ports = await play(run, list);
      assertServerHealthy();
      await eventually(async () => !(await liveTunnelIds()).some(mine), 5_000, 'no tunnel of a closed connection in /tunnels');
      for (const port of ports) await eventually(() => portFree(port), 5_000, `port ${port} released`);
    }),
    // A failure is not shrunk (the server's state carries over between runs); replay the
    // printed seed and path with PROPERTY_SEED / HOSTILE_PATH.
    { numRuns: 40, endOnFailure: true, ...(process.env.HOSTILE_PATH ? { path: process.env.HOSTILE_PATH } : {}) },
  );
  const ready = await api(server, 'GET', '/readyz');
  assert.is(ready.status, 200, ready.text);
  assertServerHealthy();
});

test.run();
