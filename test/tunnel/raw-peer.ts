import { WsClient } from '../../src/protocol/ws-client.js';
import { F, MAX_FRAME_BYTES, PROTOCOL_VERSION, decodeFrame, encodeFrame, type Frame, type Hello, type OpenRequest, type Refusal } from '../../src/protocol/frames.js';
import { withDeadline } from '../helpers/deadline.js';

// A raw protocol peer for tests: records every frame it receives (Pings answered and left
// out) and notes Fatal / Closed / close events in a shared `events` list, so a test can tell
// whether they came before an API call's answer (which the test notes there too).

export interface RawPeer {
  ws: WsClient;
  frames: Frame[];
  closed: Promise<[number, string]>;
  isClosed(): boolean;
  send(f: Frame): void;
  /** Sends Open and waits for its Opened or Refused. */
  open(req: OpenRequest): Promise<Frame>;
  /** The next frame matching `pred` (already received or to come). */
  waitFor(pred: (f: Frame) => boolean, ms: number, what: string): Promise<Frame>;
}

let nextReq = 1;

export async function rawPeer(serverUrl: string, key: string, events: string[] = [], name = 'peer', hello: Partial<Hello> = {}): Promise<RawPeer> {
  const ws = await WsClient.connect(`${serverUrl}/tunnel/v1/connect`, { authorization: `Bearer ${key}` }, MAX_FRAME_BYTES, 5_000);
  const frames: Frame[] = [];
  const waiters = new Set<() => void>();
  let closedFlag = false;
  ws.on('message', (m) => {
    const f = decodeFrame(m);
    if (f[0] === F.Ping) return void ws.send(encodeFrame([F.Pong, f[1]]));
    if (f[0] === F.Fatal) events.push(`${name}:fatal`);
    if (f[0] === F.Closed) events.push(`${name}:closed:${f[1]}`);
    frames.push(f);
    for (const w of [...waiters]) w();
  });
  const closed = new Promise<[number, string]>((r) =>
    ws.once('close', (c, why) => {
      closedFlag = true;
      events.push(`${name}:close`);
      r([c, why]);
    }),
  );
  const waitFor = (pred: (f: Frame) => boolean, ms: number, what: string): Promise<Frame> =>
    withDeadline(
      new Promise<Frame>((resolve) => {
        const check = (): void => {
          const f = frames.find(pred);
          if (!f) return;
          waiters.delete(check);
          resolve(f);
        };
        waiters.add(check);
        check();
      }),
      ms,
      what,
    );
  const peer: RawPeer = {
    ws,
    frames,
    closed,
    isClosed: () => closedFlag,
    send: (f) => void ws.send(encodeFrame(f)),
    open(req) {
      const id = nextReq++;
      peer.send([F.Open, id, req]);
      return waitFor((f) => (f[0] === F.Opened || f[0] === F.Refused) && f[1] === id, 10_000, `answer to Open ${JSON.stringify(req)}`);
    },
    waitFor,
  };
  peer.send([F.Hello, { v: PROTOCOL_VERSION, agent: 'test', ...hello }]);
  await waitFor((f) => f[0] === F.Welcome, 5_000, 'Welcome');
  return peer;
}

export function refusalIn(f: Frame): Refusal {
  if (f[0] !== F.Refused && f[0] !== F.Fatal && f[0] !== F.Closed) throw new Error(`frame ${f[0]} is not a refusal`);
  return f[f.length - 1] as Refusal;
}
