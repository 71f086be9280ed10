import { F, PROTOCOL_VERSION, decodeFrame, encodeFrame, type Frame, type OpenRequest, type Welcome } from '../protocol/frames.js';
import type { Link } from './link.js';
import type { WsClient } from '../protocol/ws-client.js';

// A connection that serves tunnels registered on the client's main connection by joining them:
// a lane (lanes.ts) with each tunnel's lane key, a sibling on another node (node-sibling.ts) with
// its member key. What it asked for, what it serves, and the Opened/Refused/Closed answers.

export class JoinedTunnels {
  /** tunnel ids served on this connection, and the key each joined with */
  readonly joined = new Map<string, string>();
  /** Opens awaiting Opened/Refused: request id → [tunnel id, key] */
  private readonly pending = new Map<number, [string, string]>();
  private nextReq = 1;

  constructor(readonly link: Link) {}

  /** An Open for each tunnel not joined with its key yet, nor asked for. */
  join(tunnels: readonly { id: string; key: string }[], openOf: (id: string, key: string) => OpenRequest): void {
    const asked = new Set([...this.pending.values()].map(([id]) => id));
    for (const { id, key } of tunnels) {
      if (this.joined.get(id) === key || asked.has(id)) continue;
      const reqId = this.nextReq++;
      this.pending.set(reqId, [id, key]);
      this.link.send([F.Open, reqId, openOf(id, key)]);
    }
  }

  /**
   * The answers to joins: true when `frame` was one. A refused join (the tunnel ended, moved, or
   * its main connection has not joined yet) is asked again by the next join; a tunnel Closed here
   * drops its streams on this connection (`dropStreams`).
   */
  answer(frame: Frame, dropStreams: (id: string) => void): boolean {
    switch (frame[0]) {
      case F.Opened: {
        const asked = this.pending.get(frame[1]);
        if (asked) {
          this.pending.delete(frame[1]);
          this.joined.set(asked[0], asked[1]);
        }
        return true;
      }
      case F.Refused:
        this.pending.delete(frame[1]);
        return true;
      case F.Closed:
        this.joined.delete(frame[1]);
        dropStreams(frame[1]);
        return true;
      default:
        return false;
    }
  }

  /** Close for each joined tunnel (the server sends no new stream on them here); forgets them. */
  leave(): void {
    for (const id of this.joined.keys()) this.link.send([F.Close, id]);
    this.joined.clear();
    this.pending.clear();
  }
}

/** Sends Hello on a new connection and waits for its Welcome (the shard it landed on, the
 *  cluster's nodes): null when anything else came, the connection closed, or `timeoutMs` passed. */
export function awaitWelcome(ws: WsClient, agent: string, timeoutMs: number): Promise<Welcome | null> {
  return new Promise((resolve) => {
    const done = (w: Welcome | null): void => {
      clearTimeout(timer);
      ws.off('message', onMessage);
      ws.off('close', onClose);
      resolve(w);
    };
    const onMessage = (m: Buffer): void => {
      try {
        const f = decodeFrame(m);
        done(f[0] === F.Welcome ? f[1] : null);
      } catch {
        done(null);
      }
    };
    const onClose = (): void => done(null);
    const timer = setTimeout(() => done(null), timeoutMs);
    ws.on('message', onMessage);
    ws.on('close', onClose);
    ws.send(encodeFrame([F.Hello, { v: PROTOCOL_VERSION, agent, rawHeads: true }]));
  });
}
