// The attacker of bench/hostile/control-flood.ts, in a process of its own (its writes must not
// slow the measuring loop): `connections` control connections with one key, each reading
// nothing after Welcome and writing one kind of answered frame as fast as the socket takes it.
//
//   node dist/bench/hostile/flood-peer.js <repo root> <server url> <key> <ping|open|wsping> <connections> <ms> [reconnect]
//
// With `reconnect`, a connection the server closes is opened again at once (as long as the
// server admits it), the way a determined attacker would go on.
// Prints "ready" once every connection is welcomed, then "sent <bytes> closed <n> reconnects <n>" at the end.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [root, serverUrl, key, kind, count, ms, mode] = process.argv.slice(2) as [string, string, string, string, string, string, string | undefined];
const reconnect = mode === 'reconnect';
const load = <T>(path: string): Promise<T> => import(pathToFileURL(join(root, 'dist', 'src', path)).href) as Promise<T>;
const { WsClient } = await load<typeof import('../../src/protocol/ws-client.js')>('protocol/ws-client.js');
const frames = await load<typeof import('../../src/protocol/frames.js')>('protocol/frames.js');
const wsFrames = await load<typeof import('../../src/protocol/ws-frames.js')>('protocol/ws-frames.js');
const { F, encodeFrame, MAX_FRAME_BYTES, PROTOCOL_VERSION } = frames;
const { WS_OP, encodeWsFrame } = wsFrames;

const one =
  kind === 'ping' ? encodeWsFrame(WS_OP.Binary, encodeFrame([F.Ping, 1]), true)
  : kind === 'open' ? encodeWsFrame(WS_OP.Binary, encodeFrame([F.Open, 1, { type: 'http', id: 'NOT VALID' }]), true)
  : encodeWsFrame(WS_OP.Ping, Buffer.alloc(0), true);
const block = Buffer.concat(Array.from({ length: Math.ceil(65_536 / one.length) }, () => one));

async function welcomed(): Promise<InstanceType<typeof WsClient>> {
  const ws = await WsClient.connect(`${serverUrl}/tunnel/v1/connect`, { authorization: `Bearer ${key}` }, MAX_FRAME_BYTES, 10_000);
  const first = new Promise<void>((r) => ws.once('message', () => r()));
  ws.send(encodeFrame([F.Hello, { v: PROTOCOL_VERSION, agent: 'flood' }]));
  await first;
  ws.socket.pause();
  ws.socket.on('error', () => undefined);
  return ws;
}

const peers = await Promise.all(Array.from({ length: Number(count) }, welcomed));
console.log('ready');
const until = Date.now() + Number(ms);
let reconnects = 0;
let closed = 0;
/** Floods one connection until it closes; resolves with the bytes sent. */
function flood(ws: InstanceType<typeof WsClient>): Promise<number> {
  return new Promise<number>((resolve) => {
    const socket = ws.socket;
    let bytes = 0;
    const pump = (): void => {
      while (Date.now() < until && !socket.destroyed) {
        bytes += block.length;
        if (!socket.write(block)) return void socket.once('drain', pump);
      }
      resolve(bytes);
    };
    socket.on('close', () => resolve(bytes));
    setTimeout(() => resolve(bytes), Math.max(0, until - Date.now()) + 1_000).unref();
    pump();
  });
}
async function attacker(first: InstanceType<typeof WsClient>): Promise<number> {
  let sent = await flood(first);
  if (first.socket.destroyed) closed++;
  while (reconnect && Date.now() < until) {
    const ws = await welcomed().catch(() => null);
    if (!ws) {
      await new Promise((r) => setTimeout(r, 10));
      continue;
    }
    reconnects++;
    sent += await flood(ws);
  }
  return sent;
}
const sent = await Promise.all(peers.map(attacker));
console.log(`sent ${sent.reduce((a, b) => a + b, 0)} closed ${closed} reconnects ${reconnects}`);
process.exit(0);
