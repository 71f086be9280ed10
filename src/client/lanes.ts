import { Link, type StreamOpener } from './link.js';
import { ClientConnection, type ConnectionOwner, type JoinHost, type JoinKey } from './joined-connection.js';
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
export interface LaneHost extends JoinHost {
  /** A new authenticated control WebSocket to the same server. */
  connect(): Promise<WsClient>;
  /** The live http tunnels that take lanes: their ids and lane keys. */
  laneTunnels(): JoinKey[];
}

/** How often lanes are checked (missing shards connected, tunnels joined). */
const LANE_TICK_MS = 5_000;
const WELCOME_TIMEOUT_MS = 5_000;

type Lane = ClientConnection<JoinKey>;

/**
 * The lanes' policy: which connections to make (one per shard other than the main connection's,
 * the kernel choosing), when (once the tunnels have visitors, then every LANE_TICK_MS while one
 * is missing) and when a round gives up (2 × shards connects). Each lane is a ClientConnection.
 */
export class LaneSet implements ConnectionOwner<JoinKey> {
  /** shard → its lane */
  private readonly lanes = new Map<number, Lane>();
  /** The main connection's shard and the shard count; null: no lanes (one shard, old server, stopped). */
  private target: { main: number; shards: number } | null = null;
  private awake = false;
  private filling = false;
  private timer: NodeJS.Timeout | null = null;
  readonly openStream: StreamOpener;

  constructor(private readonly host: LaneHost) {
    this.openStream = host.openStream;
  }

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

  /** Close on every lane for each tunnel it joined: the server sends no new stream there. */
  leave(): void {
    for (const lane of this.lanes.values()) lane.leave();
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

  private join(lane: Lane, tunnels: JoinKey[]): void {
    lane.join(tunnels, (t) => ({ type: 'http', id: t.id, lane: t.key }));
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
        const lane: Lane = new ClientConnection(ws, 'lane', this);
        const shard = (await lane.welcome(WELCOME_TIMEOUT_MS))?.shard ?? null;
        const t = this.target;
        if (shard === null || !t || shard === t.main || shard >= t.shards || this.lanes.has(shard) || lane.isClosed) {
          lane.close(1000, 'lane not needed');
          continue;
        }
        this.lanes.set(shard, lane);
        this.join(lane, this.host.laneTunnels());
      }
    } finally {
      this.filling = false;
    }
  }

  /** A lane ended (lost, refused, not needed, or the lanes stop): its streams with it; the next round opens another. */
  lost(lane: Lane): void {
    for (const [shard, l] of this.lanes) if (l === lane) this.lanes.delete(shard);
    this.host.dropStreams(lane.link);
    lane.destroy();
  }

  /** Tunnel `id` ended on this lane: its streams here are over. */
  closed(lane: Lane, id: string): void {
    this.host.dropStreams(lane.link, id);
  }

  /** Revoked, shutting down (Fatal, GoAway): the main connection hears the same and decides; this lane goes. */
  fatal(lane: Lane): void {
    lane.close(1000, 'lane closed');
  }

  goAway(lane: Lane): void {
    this.fatal(lane);
  }
}
