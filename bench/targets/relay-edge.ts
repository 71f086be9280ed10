// The bare relay's edge: `node relay-edge.js` prints "control <port>" and "listening <port>".
// It takes one control connection (relay-client.ts), then visitors. Each visitor connection
// is a slot; each of its requests a stream (Open, Data…, End) whose bytes go on untouched.
// llhttp (the project's RequestParser) only says where a request ends; the next request waits
// for the answer's End. No flow control: it is the floor under a Node tunnel, not a product.
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { RequestParser } from '../../src/protocol/http1-parser.js';
import { DATA, END, OPEN, OPEN_HEAD, RESET, SLOT_MASK, frameReader, frameWriter } from './relay-frames.js';

interface Visitor {
  sock: Socket;
  slot: number;
  stream: number;
  phase: 'idle' | 'head' | 'body' | 'waiting';
  parser: RequestParser;
  headSeen: boolean;
  isHead: boolean;
  keepAlive: boolean;
  /** the request's bytes before its head is whole */
  early: Buffer[];
  /** bytes after a request, held until its answer ends */
  later: Buffer[];
}

const visitors: (Visitor | undefined)[] = [];
const generations: number[] = [];
const freeSlots: number[] = [];
let send: ((type: number, id: number, payload?: Buffer) => void) | null = null;

const control = createServer({ noDelay: true }, (sock) => {
  if (send) return void sock.destroy();
  send = frameWriter(sock);
  sock.on('data', frameReader(onFrame));
  sock.on('close', () => process.exit(0));
  sock.on('error', () => {});
});

const front = createServer({ noDelay: true, allowHalfOpen: true }, (sock) => {
  if (!send) return void sock.destroy();
  const slot = freeSlots.pop() ?? visitors.length;
  generations[slot] ??= 0;
  const v: Visitor = { sock, slot, stream: -1, phase: 'idle', parser: null!, headSeen: false, isHead: false, keepAlive: true, early: [], later: [] };
  v.parser = new RequestParser({
    head: (h) => {
      v.headSeen = true;
      v.isHead = h.method === 'HEAD';
      v.keepAlive = h.keepAlive;
    },
    body: () => {},
    end: () => {},
  });
  visitors[slot] = v;
  sock.on('data', (chunk: Buffer) => onVisitorData(v, chunk));
  sock.on('end', () => {
    v.keepAlive = false;
    if (v.phase === 'idle' || v.phase === 'head') sock.end();
  });
  sock.on('error', () => {});
  sock.on('close', () => {
    if (v.phase === 'body' || v.phase === 'waiting') send!(RESET, v.stream);
    v.parser.close();
    visitors[slot] = undefined;
    freeSlots.push(slot);
  });
});

function onFrame(type: number, id: number, payload: Buffer): void {
  const v = visitors[id & SLOT_MASK];
  if (!v || v.stream !== id) return;
  if (type === DATA) v.sock.write(payload);
  else if (type === END) {
    v.phase = 'idle';
    if (!v.keepAlive) return void v.sock.end();
    v.parser.resume();
    const later = v.later;
    v.later = [];
    v.sock.resume();
    for (const b of later) if (!v.sock.destroyed) onVisitorData(v, b);
  } else if (type === RESET) {
    v.phase = 'idle';
    v.sock.destroy();
  }
}

function onVisitorData(v: Visitor, chunk: Buffer): void {
  if (v.phase === 'waiting') {
    v.later.push(chunk);
    v.sock.pause();
    return;
  }
  if (v.phase === 'idle') {
    const gen = (generations[v.slot] = (generations[v.slot]! + 1) & 0xffff);
    v.stream = ((gen << 16) | v.slot) >>> 0;
    v.phase = 'head';
    v.headSeen = false;
  }
  const r = v.parser.execute(chunk);
  if (r.kind === 'error' || r.kind === 'upgrade') {
    if (v.phase === 'body') send!(RESET, v.stream);
    v.phase = 'idle';
    v.sock.end(`HTTP/1.1 ${r.kind === 'error' ? r.status : 501} Refused\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
    return;
  }
  const used = r.kind === 'paused' ? r.consumed : chunk.length;
  const piece = used === chunk.length ? chunk : chunk.subarray(0, used);
  if (v.phase === 'head') {
    if (used > 0) v.early.push(piece);
    if (!v.headSeen) return;
    send!(v.isHead ? OPEN_HEAD : OPEN, v.stream);
    for (const b of v.early) send!(DATA, v.stream, b);
    v.early = [];
    v.phase = 'body';
  } else if (used > 0) {
    send!(DATA, v.stream, piece);
  }
  if (r.kind === 'paused') {
    send!(END, v.stream);
    v.phase = 'waiting';
    if (used < chunk.length) {
      v.later.push(chunk.subarray(used));
      v.sock.pause();
    }
  }
}

const listen = (s: Server) => new Promise<number>((resolve) => s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)));
console.log(`control ${await listen(control)}`);
console.log(`listening ${await listen(front)}`);
