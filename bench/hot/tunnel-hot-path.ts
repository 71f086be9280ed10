// The tunnel's hot path in one process, no sockets: how many ns and bytes of heap a small
// request costs on each side, to see a change that adds garbage before a wrk run does.
//
//   node dist/bench/hot/tunnel-hot-path.js [--requests N] [--concurrency C]
//
//   edge side                                            client side
//   RequestParser (the visitor's GET) → requestHeaders   Link.receive (decodeFrame) → a stream
//   → rawStreamOpenFrame → WsConnection 'server'          that answers at once: Link.sender
//   ⇄ in-memory pipe (two Duplex ends, one delivery per  (FairWriter: dataFrameHead + sendParts,
//     write, a turn of the event loop later) ⇄          End) → WsClient (WsConnection 'client')
//   decodeFrame(Data / End) → ResponseParser (the answer's end)
//
// What it is NOT: the edge's ControlConnection / TunnelActor / TunnelVisitor (their seams need a
// shard context, registry and front connection) and the client's RawHttpStream / LocalPool (a
// local socket): it drives the same codecs, WebSocket ends, framing and the client's Link and
// FairWriter that every request passes through, with the visitor's and the origin's bytes fixed.
//
// Attribution: every callback either side runs (a delivery from the pipe, a setImmediate it
// scheduled: the WebSocket's once-per-turn flush) is timed and charged to that side; what runs
// between (nextTick bookkeeping of the streams, the pipe) is "other". Allocation is measured in
// a second pass: used_heap_size before and after each charged callback (the cost of reading it,
// calibrated, subtracted); a callback during which a scavenge ran is left out and the rest
// scaled up (their count is printed). Times come from a first pass without those reads.
import { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import { WsConnection } from '../../src/protocol/ws-connection.js';
import { WsClient } from '../../src/protocol/ws-client.js';
import { Link } from '../../src/client/link.js';
import { F, MAX_FRAME_BYTES, decodeFrame, rawStreamOpenFrame, type HttpHead } from '../../src/protocol/frames.js';
import { RequestParser, ResponseParser, type RequestHead } from '../../src/protocol/http1-parser.js';
import { requestHeaders } from '../../src/protocol/http-headers.js';
import type { ClientStream } from '../../src/client/streams.js';

const EDGE = 0;
const CLIENT = 1;
type Side = typeof EDGE | typeof CLIENT;

const { values } = parseArgs({ options: { requests: { type: 'string', default: '50000' }, concurrency: { type: 'string', default: '64' }, help: { type: 'boolean', default: false } } });
if (values.help) {
  console.log('usage: node dist/bench/hot/tunnel-hot-path.js [--requests N (default 50000)] [--concurrency C (default 64)]');
  process.exit(0);
}
const N = Number(values.requests);
const C = Number(values.concurrency);
if (!Number.isInteger(N) || N < 100 || !Number.isInteger(C) || C < 1 || C > 4096) {
  console.error('--requests: an integer ≥ 100; --concurrency: 1..4096');
  process.exit(2);
}

// What wrk sends and what nginx answers in the bench's http scenario (GET /small, 14 B).
const VISITOR_REQUEST = Buffer.from('GET /small HTTP/1.1\r\nHost: t1.localhost:8080\r\n\r\n');
const ORIGIN_ANSWER = Buffer.from(
  'HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 28 Nov 2026 03:00:00 GMT\r\nContent-Type: application/octet-stream\r\n' +
    'Content-Length: 14\r\nLast-Modified: Sat, 28 Nov 2026 02:00:00 GMT\r\nConnection: keep-alive\r\nETag: "6769a1e0-e"\r\nAccept-Ranges: bytes\r\n\r\nhello, burrow\n',
);
const CLIENT_ADDRESS = { ip: '127.0.0.1', forwardedFor: '127.0.0.1', proto: 'http' };

// ---- charging time and allocation to a side ------------------------------------------------

const nativeSetImmediate = globalThis.setImmediate;
let current: Side | -1 = -1;
let measureAlloc = false;
const ns = [0, 0];
const bytes = [0, 0];
let windows = 0;
let windowsWithGc = 0;
let readCost = 0;

function charge(side: Side, fn: () => void): void {
  const prev = current;
  current = side;
  if (measureAlloc) {
    const before = getHeapStatistics().used_heap_size;
    fn();
    const after = getHeapStatistics().used_heap_size;
    windows++;
    if (after < before) windowsWithGc++;
    else bytes[side]! += Math.max(0, after - before - readCost);
  } else {
    const t0 = performance.now();
    fn();
    ns[side]! += (performance.now() - t0) * 1e6;
  }
  current = prev;
}

// A callback scheduled by a side (the WebSocket's flush) is charged to that side.
globalThis.setImmediate = ((cb: (...a: unknown[]) => void, ...args: unknown[]) => {
  const side = current;
  if (side === -1) return nativeSetImmediate(cb, ...args);
  return nativeSetImmediate(() => charge(side, () => cb(...args)));
}) as typeof setImmediate;

// ---- the pipe ------------------------------------------------------------------------------

class PipeEnd extends Duplex {
  peer!: PipeEnd;
  constructor(readonly side: Side) {
    super({ allowHalfOpen: false });
  }
  setNoDelay(): this {
    return this;
  }
  override _read(): void {}
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const peer = this.peer;
    // a socket's bytes reach the peer in a later turn (libuv's poll phase): charged to the reader
    nativeSetImmediate(() => charge(peer.side, () => void peer.push(chunk)));
    cb();
  }
  override _final(cb: () => void): void {
    nativeSetImmediate(() => this.peer.push(null));
    cb();
  }
}

function pipe(): [PipeEnd, PipeEnd] {
  const a = new PipeEnd(EDGE);
  const b = new PipeEnd(CLIENT);
  a.peer = b;
  b.peer = a;
  return [a, b];
}

// ---- the two sides -------------------------------------------------------------------------

const [edgeEnd, clientEnd] = pipe();
const edgeWs = new WsConnection(edgeEnd as unknown as Socket, Buffer.alloc(0), MAX_FRAME_BYTES, 'server');
const clientWs = new WsClient(clientEnd as unknown as Socket, Buffer.alloc(0), MAX_FRAME_BYTES, 'client');
const link = new Link(clientWs);

/** One visitor connection at the edge: its request parser, and the answer's parser. */
interface Visitor {
  sid: number;
  request: RequestParser;
  answer: ResponseParser;
  head: RequestHead | null;
  done: boolean;
}
const bySid = new Map<number, Visitor>();
let nextSid = 1;
let started = 0;
let finished = 0;
let target = 0;
let onAllDone: (() => void) | null = null;

function visitor(): Visitor {
  const v: Visitor = { sid: 0, head: null, done: false, request: null!, answer: null! };
  v.request = new RequestParser({ head: (h) => void (v.head = h), body: () => {}, end: () => {} });
  v.answer = new ResponseParser({ head: () => {}, body: () => {}, end: () => void (v.done = true) });
  return v;
}
const visitors = Array.from({ length: C }, visitor);

/** The edge takes the visitor's next request and opens a stream for it. */
function startRequest(v: Visitor): void {
  if (started >= target) return;
  started++;
  v.request.resume();
  v.head = null;
  const r = v.request.execute(VISITOR_REQUEST);
  if (r.kind !== 'paused' || !v.head) throw new Error(`the visitor's request did not parse: ${JSON.stringify(r)}`);
  const h: RequestHead = v.head;
  const head: HttpHead = { kind: 'http', method: h.method, target: h.target, headers: requestHeaders(h.headers, CLIENT_ADDRESS, false, h.host), upgrade: false, end: true };
  v.sid = nextSid++;
  if (nextSid > 0xffff_fff0) nextSid = 1;
  bySid.set(v.sid, v);
  v.answer.expect(h.method, false);
  v.done = false;
  // As control.ts sends it to a client that said rawHeads in Hello (every burrow CLI does).
  edgeWs.send(rawStreamOpenFrame(v.sid, 't1', head));
}

edgeWs.on('message', (m) => {
  const frame = decodeFrame(m);
  if (frame[0] === F.Data) {
    const v = bySid.get(frame[1]);
    if (!v) throw new Error(`Data for unknown stream ${frame[1]}`);
    const r = v.answer.execute(frame[2] as Buffer);
    if (r.kind === 'error') throw new Error(`the answer did not parse: ${r.reason}`);
    if (r.kind === 'paused') v.answer.resume();
  } else if (frame[0] === F.End) {
    const v = bySid.get(frame[1]);
    if (!v || !v.done) throw new Error(`End before the whole answer on stream ${frame[1]}`);
    bySid.delete(frame[1]);
    finished++;
    if (finished === target) onAllDone?.();
    else startRequest(v);
  }
});

// The client's streams answer at once with the origin's bytes, through the Link's sender
// (FairWriter: Data as head + payload, then End), as RawHttpStream does with what it reads.
clientWs.on('message', (m) => {
  link.receive(m, (l, sid) => {
    l.sender.sendData(sid, ORIGIN_ANSWER);
    l.sender.send([F.End, sid]);
  });
});

function run(count: number): Promise<number> {
  started = 0;
  finished = 0;
  target = count;
  const t0 = performance.now();
  return new Promise((resolve) => {
    onAllDone = () => resolve((performance.now() - t0) * 1e6);
    charge(EDGE, () => {
      for (const v of visitors) startRequest(v);
    });
  });
}

function calibrateRead(): number {
  let min = Infinity;
  for (let i = 0; i < 200; i++) {
    const a = getHeapStatistics().used_heap_size;
    const b = getHeapStatistics().used_heap_size;
    if (b >= a) min = Math.min(min, b - a);
  }
  return Number.isFinite(min) ? min : 0;
}

await run(Math.max(2000, Math.floor(N / 5))); // warm-up: the JIT settles
ns[EDGE] = ns[CLIENT] = 0;
const wallNs = await run(N);
const timed = [ns[EDGE]!, ns[CLIENT]!];
readCost = calibrateRead();
measureAlloc = true;
await run(N);
measureAlloc = false;
const kept = windows - windowsWithGc;
const scale = kept > 0 ? windows / kept : NaN;

const rows: [string, string, string][] = [
  ['edge', (timed[EDGE]! / N).toFixed(0), ((bytes[EDGE]! * scale) / N).toFixed(0)],
  ['client', (timed[CLIENT]! / N).toFixed(0), ((bytes[CLIENT]! * scale) / N).toFixed(0)],
  ['other (pipe, nextTick bookkeeping)', ((wallNs - timed[EDGE]! - timed[CLIENT]!) / N).toFixed(0), 'n/a'],
  ['total (wall)', (wallNs / N).toFixed(0), ''],
];
console.log(`tunnel hot path, in process: ${N} requests, ${C} in flight, ${ORIGIN_ANSWER.length} B answers (14 B body), Node ${process.version}`);
console.log('| side | ns/request | bytes allocated/request |');
console.log('| --- | ---: | ---: |');
for (const [a, b, c] of rows) console.log(`| ${a} | ${b} | ${c} |`);
console.log(`(${(1e9 / (wallNs / N)).toFixed(0)} requests/s on one thread; allocation from used_heap_size around ${windows} callbacks, ${windowsWithGc} left out for a scavenge inside them, reading cost ${readCost} B subtracted)`);
process.exit(0);
