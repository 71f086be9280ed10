import { F, PROTOCOL_VERSION } from '../protocol/frames.js';
import { Link, type StreamOpener } from './link.js';
import { JoinedTunnels, awaitWelcome } from './joined-connection.js';
import type { WsClient } from '../protocol/ws-client.js';

// Lanes (the protocol is in src/protocol/frames.ts): on a server of several shards, the client
// holds one more control connection on each shard other than its main connection's, so a
// visitor's stream is served by the shard the kernel gave the visitor instead of being relayed
// across threads to the tunnel's own shard.
//
//   main connection: Welcome{shard, shards} → want(); Opened{laneKey} per http tunnel
//   first stream on the main connection → wake(): from then on, every LANE_TICK_MS and at once,
//     connect until each other shard holds a lane (the kernel picks a connection's shard: one
//     that lands on a covered shard is closed; at most 2 × shards connects per round)
//   each lane: Hello → Welcome{shard} → Open{type:'http', id, lane: laneKey} per tunnel
//   a lane lost, refused or closed: its streams die (those visitors get 502, as on any lost
//     connection; later ones go through the tunnel's shard) and the next round opens it again
//   the main connection lost: stop() closes every lane.
//
// A tunnel that never had a visitor opens no lane: an idle tunnel costs one connection.

/** What the lanes need from their TunnelClient. */
export interface LaneHost {
  /** A new authenticated control WebSocket to the same server. */
  connect(): Promise<WsClient>;
  /** The live http tunnels that take lanes: their ids and lane keys. */
  laneTunnels(): { id: string; key: string }[];
  openStream: StreamOpener;
  /** Streams of `link` are over: all of them (the lane is lost), or those of tunnel `id`. */
  dropStreams(link: Link, id?: string): void;
}

/** How often lanes are checked (missing shards connected, tunnels joined). */
const LANE_TICK_MS = 5_000;
const WELCOME_TIMEOUT_MS = 5_000;
const AGENT = `burrow-client/${PROTOCOL_VERSION} lane`;

class Lane extends JoinedTunnels {
  constructor(
    link: Link,
    readonly shard: number,
  ) {
    super(link);
  }
}

export class LaneSet {
  private readonly lanes = new Map<number, Lane>();
  /** The main connection's shard and the shard count; null: no lanes (one shard, old server, stopped). */
  private target: { main: number; shards: number } | null = null;
  private awake = false;
  private filling = false;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly host: LaneHost) {}

  /** The main connection's Welcome: lanes are worth having on a server of several shards. */
  want(main: number | undefined, shards: number | undefined): void {
    this.stop();
    if (main === undefined || shards === undefined || shards < 2) return;
    this.target = { main, shards };
  }

  /** The tunnels carry traffic: open the lanes (once; later calls cost a check). */
  wake(): void {
    if (this.awake || !this.target) return;
    this.awake = true;
    this.timer = setInterval(() => this.tick(), LANE_TICK_MS);
    this.timer.unref();
    this.tick();
  }

  /** A tunnel was (re)registered with a lane key: join it on the lanes now, not at the next tick. */
  refresh(): void {
    if (this.awake) this.tick();
  }

  /** Every live lane's link (a tunnel's streams may be on any of them). */
  links(): Link[] {
    return [...this.lanes.values()].map((l) => l.link);
  }

  /** Lanes the server has not been heard on within `limitMs` are dead: closed. */
  dropSilent(nowMs: number, limitMs: number): void {
    for (const l of this.lanes.values()) if (nowMs - l.link.lastSeenMs > limitMs) l.link.ws.destroy();
  }

  /** The main connection ended (or the client stops): every lane closes with its streams. */
  stop(): void {
    this.target = null;
    this.awake = false;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const l of [...this.lanes.values()]) this.lost(l);
  }

  private tick(): void {
    const tunnels = this.host.laneTunnels();
    if (tunnels.length === 0) return;
    for (const lane of this.lanes.values()) this.join(lane, tunnels);
    void this.fill();
  }

  private join(lane: Lane, tunnels: { id: string; key: string }[]): void {
    lane.join(tunnels, (id, key) => ({ type: 'http', id, lane: key }));
  }

  private missing(): number {
    return this.target ? this.target.shards - 1 - this.lanes.size : 0;
  }

  /** Connects until every other shard has a lane, within one round's bound. */
  private async fill(): Promise<void> {
    if (this.filling) return;
    this.filling = true;
    try {
      for (let i = 0; this.target && i < 2 * this.target.shards && this.missing() > 0; i++) {
        let ws: WsClient;
        try {
          ws = await this.host.connect();
        } catch {
          return; // the next tick tries again
        }
        const shard = (await awaitWelcome(ws, AGENT, WELCOME_TIMEOUT_MS))?.shard ?? null;
        const t = this.target;
        if (shard === null || !t || shard === t.main || shard >= t.shards || this.lanes.has(shard)) {
          ws.close(1000, 'lane not needed');
          continue;
        }
        this.adopt(ws, shard);
      }
    } finally {
      this.filling = false;
    }
  }

  private adopt(ws: WsClient, shard: number): void {
    const lane = new Lane(new Link(ws), shard);
    this.lanes.set(shard, lane);
    ws.on('message', (m) => this.onMessage(lane, m));
    ws.on('close', () => this.lost(lane));
    this.join(lane, this.host.laneTunnels());
  }

  private lost(lane: Lane): void {
    if (this.lanes.get(lane.shard) === lane) this.lanes.delete(lane.shard);
    this.host.dropStreams(lane.link);
    lane.link.ws.destroy();
  }

  private onMessage(lane: Lane, m: Buffer): void {
    const frame = lane.link.receive(m, this.host.openStream);
    if (!frame || lane.answer(frame, (id) => this.host.dropStreams(lane.link, id))) return;
    switch (frame[0]) {
      case F.Fatal:
      case F.GoAway:
        // Revoked, shutting down: the main connection hears the same and decides; this lane goes.
        lane.link.ws.close(1000, 'lane closed');
        return;
      case F.Welcome:
        return;
      default:
        lane.link.ws.close(1002, `frame type ${frame[0]} is not expected on a lane`);
        return;
    }
  }
}
