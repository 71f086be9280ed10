// The bare relay's client: `node relay-client.js <edge control port> <origin port>`, prints
// "connected". Each Open takes a keep-alive connection to the origin from a pool (or makes
// one); the request's bytes go to it untouched, and the answer's come back as Data frames in the
// pieces they arrived in. llhttp (the project's ResponseParser) only says where the answer ends;
// then End, and the connection goes back to the pool.
import { connect, type Socket } from 'node:net';
import { ResponseParser } from '../../src/protocol/http1-parser.js';
import { DATA, OPEN, OPEN_HEAD, END, RESET, SLOT_MASK, frameReader, frameWriter } from './relay-frames.js';

interface Origin {
  sock: Socket;
  parser: ResponseParser;
  /** the stream it answers, or -1 in the pool */
  stream: number;
  keepAlive: boolean;
}

/** Control bytes buffered past this pause the origins until the edge takes them. */
const CONTROL_BACKLOG = 1 << 20;

const [controlPort, originPort] = process.argv.slice(2).map(Number);
const ctl = connect({ port: controlPort!, host: '127.0.0.1', noDelay: true }, () => console.log('connected'));
const send = frameWriter(ctl);
const bound: (Origin | undefined)[] = [];
const pool: Origin[] = [];
const paused: Origin[] = [];
ctl.on('data', frameReader(onFrame));
ctl.on('drain', () => {
  for (const o of paused.splice(0)) o.sock.resume();
});
ctl.on('close', () => process.exit(0));
ctl.on('error', () => {});

function onFrame(type: number, id: number, payload: Buffer): void {
  const slot = id & SLOT_MASK;
  if (type === OPEN || type === OPEN_HEAD) {
    const stale = bound[slot];
    if (stale) finish(stale, RESET);
    const o = pool.pop() ?? dial();
    o.stream = id;
    o.parser.expect(type === OPEN_HEAD ? 'HEAD' : 'GET', false);
    bound[slot] = o;
    return;
  }
  const o = bound[slot];
  if (!o || o.stream !== id) return;
  if (type === DATA) o.sock.write(payload);
  else if (type === RESET) {
    bound[slot] = undefined;
    o.stream = -1;
    o.sock.destroy();
  }
  // END: the request is whole; nothing to do until the answer ends
}

function dial(): Origin {
  const sock = connect({ port: originPort!, host: '127.0.0.1', noDelay: true });
  const o: Origin = { sock, stream: -1, keepAlive: true, parser: null! };
  o.parser = new ResponseParser({ head: (h) => void (o.keepAlive = h.keepAlive), body: () => {}, end: () => {} });
  sock.on('data', (chunk: Buffer) => {
    if (o.stream === -1) return void sock.destroy(); // an answer nobody asked for
    const r = o.parser.execute(chunk);
    if (r.kind === 'error' || r.kind === 'upgrade') return void finish(o, RESET);
    const used = r.kind === 'paused' ? r.consumed : chunk.length;
    if (used > 0) send(DATA, o.stream, used === chunk.length ? chunk : chunk.subarray(0, used));
    if (r.kind === 'paused') {
      if (used < chunk.length || !o.keepAlive) return void finish(o, END);
      bound[o.stream & SLOT_MASK] = undefined;
      send(END, o.stream);
      o.stream = -1;
      o.parser.resume();
      pool.push(o);
    } else if (ctl.writableLength > CONTROL_BACKLOG) {
      sock.pause();
      paused.push(o);
    }
  });
  // an answer framed by the connection's close ends here
  sock.on('end', () => {
    if (o.stream !== -1) finish(o, o.parser.finish() === null ? END : RESET);
  });
  sock.on('error', () => {});
  sock.on('close', () => {
    if (o.stream !== -1) finish(o, RESET);
    const i = pool.indexOf(o);
    if (i >= 0) pool.splice(i, 1);
    o.parser.close();
  });
  return o;
}

/** Ends the origin connection's stream with End or Reset, and the connection with it. */
function finish(o: Origin, how: typeof END | typeof RESET): void {
  if (o.stream === -1) return;
  bound[o.stream & SLOT_MASK] = undefined;
  send(how, o.stream);
  o.stream = -1;
  o.sock.destroy();
}
