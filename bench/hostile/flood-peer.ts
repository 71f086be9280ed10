// The attacker of bench/hostile/control-flood.ts, in a process of its own (its writes must not
// slow the measuring loop): `connections` control connections with one key, each reading
// nothing after Welcome and writing one kind of answered frame as fast as the socket takes it.
//
//   node dist/bench/hostile/flood-peer.js <repo root> <server url> <key> <ping|open|wsping> <connections> <ms>
//
// Prints "ready" once every connection is welcomed, then "sent <bytes> closed <n>" at the end.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [root, serverUrl, key, kind, count, ms] = process.argv.slice(2) as [string, string, string, string, string, string];
const load = <T>(path: string): Promise<T> => import(pathToFileURL(join(root, 'dist', 'src', path)).href) as Promise<T>;
const { WsClient } = await load<typeof import('../../src/client/ws-client.js')>('client/ws-client.js');
const frames = await load<typeof import('../../src/protocol/frames.js')>('protocol/frames.js');
const wsFrames = await load<typeof import('../../src/protocol/ws-frames.js')>('protocol/ws-frames.js');
const { F, encodeFrame, MAX_FRAME_BYTES, PROTOCOL_VERSION } = frames;
const { WS_OP, encodeWsFrame } = wsFrames;

const one =
  kind === 'ping' ? encodeWsFrame(WS_OP.Binary, encodeFrame([F.Ping, 1]), true)
  : kind === 'open' ? encodeWsFrame(WS_OP.Binary, encodeFrame([F.Open, 1, { type: 'http', id: 'NOT VALID' }]), true)
  : encodeWsFrame(WS_OP.Ping, Buffer.alloc(0), true);
const block = Buffer.concat(Array.from({ length: Math.ceil(65_536 / one.length) }, () => one));

const peers = await Promise.all(
  Array.from({ length: Number(count) }, async () => {
    const ws = await WsClient.connect(`${serverUrl}/tunnel/v1/connect`, { authorization: `Bearer ${key}` }, MAX_FRAME_BYTES, 10_000);
    const welcomed = new Promise<void>((r) => ws.once('message', () => r()));
    ws.send(encodeFrame([F.Hello, { v: PROTOCOL_VERSION, agent: 'flood' }]));
    await welcomed;
    ws.socket.pause();
    ws.socket.on('error', () => undefined);
    return ws;
  }),
);
console.log('ready');
const until = Date.now() + Number(ms);
const sent = await Promise.all(
  peers.map(
    (ws) =>
      new Promise<number>((resolve) => {
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
        setTimeout(() => resolve(bytes), Number(ms) + 1_000).unref();
        pump();
      }),
  ),
);
console.log(`sent ${sent.reduce((a, b) => a + b, 0)} closed ${peers.filter((p) => p.socket.destroyed).length}`);
process.exit(0);
