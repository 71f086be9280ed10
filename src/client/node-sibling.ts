import { F, PROTOCOL_VERSION, type OpenRequest } from '../protocol/frames.js';
import { Link, type StreamOpener } from './link.js';
import { JoinedTunnels, awaitWelcome } from './joined-connection.js';
import { settled } from './settle.js';
import type { WsClient } from '../protocol/ws-client.js';

// A client's second connection in a cluster: its tunnels are served from two nodes, so a node
// that dies takes no tunnel down with it.
//
//   main connection: Welcome{node, nodes} → want(); Opened{memberKey} per tunnel → refresh()
//   sibling: a connection to another node of `nodes` → Hello → Welcome{node, nodes}
//            → Open{…, id, member: memberKey} per tunnel: one more member of the same client
//   the server sends each visitor's stream to the client's nearest member, so both connections
//   carry streams; each answers on its own connection (link.ts)
//   sibling lost: its streams die (the edge sends a bodiless idempotent request again through
//            the other connection; others get 502) and another node is tried after RETRY_MS; main lost: the sibling serves on while the main connection comes back
//            (and joins with the same memberKey, src/client/tunnel-client.ts)
//   the sibling on the main connection's own node (the load balancer sent the main there):
//            it moves to another node.

export interface SiblingHost {
  /** An authenticated control WebSocket to the node at `url`. */
  connectTo(url: string): Promise<WsClient>;
  /** The registered tunnels a second connection joins: their ids, member keys and Opens. */
  memberTunnels(): { id: string; key: string; open: OpenRequest }[];
  openStream: StreamOpener;
  /** Streams of `link` are over (the sibling is lost), or those of tunnel `id`. */
  dropStreams(link: Link, id?: string): void;
  /** The node URLs among `urls` this client may send its key to. */
  dialable(urls: string[]): string[];
}

const RETRY_MS = 1_000;
/** Longest a sibling that moves waits for its streams to finish. */
const RETIRE_MS = 10_000;
/** Alone in a cluster (no other node named yet): Welcome is asked again this often. */
const PROBE_MS = 3_000;
const PING_MS = 5_000;
/** Silent this long (heartbeats unanswered), the sibling is dead. */
const SILENT_MS = 15_000;
const AGENT = `burrow-client/${PROTOCOL_VERSION} sibling`;

export class NodeSibling {
  private link: Link | null = null;
  /** the tunnels the sibling joined (and asked to) on `link` */
  private tunnels: JoinedTunnels | null = null;
  /** the node the sibling is connected (or connecting) to */
  private node: string | null = null;
  private connecting = false;
  /** the main connection's node, and the cluster's others as the last Welcome named them */
  private mainNode: string | null = null;
  private nodes: string[] = [];
  private retry: NodeJS.Timeout | null = null;
  private pinger: NodeJS.Timeout | null = null;
  private stopped = false;
  private turn = 0;

  constructor(private readonly host: SiblingHost) {}

  /** The nodes this client knows of (the main connection may come back through one of them). */
  known(): string[] {
    return [...new Set([...(this.mainNode ? [this.mainNode] : []), ...this.nodes])];
  }

  /** The main connection's Welcome: its node and the other nodes (absent: not a cluster). */
  want(mainNode: string | undefined, nodes: string[] | undefined): void {
    if (this.stopped) return;
    this.mainNode = mainNode ?? null;
    if (nodes) this.nodes = nodes;
    if (!mainNode || this.nodes.filter((n) => n !== mainNode).length === 0) return;
    this.ensure();
  }

  /** A tunnel was (re)registered with a member key (the main connection joined): join it on the sibling now. */
  refresh(): void {
    // On the main connection's own node the sibling guards against nothing: it moves, the new
    // one first (the main connection holds the tunnel meanwhile), the old one once its streams end.
    if (this.link && this.node === this.mainNode) this.retire();
    if (this.link) this.join();
    else this.ensure();
  }

  links(): Link[] {
    return this.link ? [this.link] : [];
  }

  /** The client stops: Close for each joined tunnel (the server sends no new stream), then, once
   *  its streams ended (a pool member leaving) or at once (`graceMs` 0), the connection ends. */
  async stop(graceMs = 0): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    if (this.pinger) clearInterval(this.pinger);
    const link = this.link;
    this.link = null;
    if (!link) return;
    this.tunnels?.leave();
    this.tunnels = null;
    if (graceMs > 0) await settled(() => link.streams.size === 0 || link.ws.isClosed, graceMs);
    link.ws.close(1000, 'client stopped');
    link.abortStreams();
  }

  private ensure(): void {
    if (this.stopped || this.link || this.connecting || this.retry) return;
    if (this.host.memberTunnels().length === 0) return;
    const candidates = this.nodes.filter((n) => n !== this.mainNode);
    if (candidates.length === 0) return this.probe();
    const node = candidates[this.turn++ % candidates.length]!;
    this.connecting = true;
    this.node = node;
    this.host.connectTo(node).then(
      (ws) => {
        this.connecting = false;
        if (this.stopped) return ws.destroy();
        this.adopt(ws);
      },
      () => {
        this.connecting = false;
        this.later();
      },
    );
  }

  /** A cluster of one node so far: ask its Welcome again later (another node may have joined). */
  private probe(): void {
    if (this.stopped || this.retry || !this.mainNode) return;
    const node = this.mainNode;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.connecting = true;
      this.host.connectTo(node).then(
        async (ws) => {
          const nodes = (await awaitWelcome(ws, AGENT, PING_MS))?.nodes;
          ws.close(1000, 'nodes read');
          this.connecting = false;
          if (nodes) this.nodes = this.host.dialable(nodes);
          this.ensure();
        },
        () => {
          this.connecting = false;
          this.later();
        },
      );
    }, PROBE_MS);
    this.retry.unref();
  }

  private later(): void {
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.ensure();
    }, RETRY_MS);
    this.retry.unref();
  }

  private adopt(ws: WsClient): void {
    const link = new Link(ws);
    this.link = link;
    this.tunnels = new JoinedTunnels(link);
    ws.on('message', (m) => this.onMessage(link, m));
    ws.on('close', () => {
      if (this.link === link) this.lost();
    });
    link.send([F.Hello, { v: PROTOCOL_VERSION, agent: AGENT, rawHeads: true }]);
    if (this.pinger) clearInterval(this.pinger);
    this.pinger = setInterval(() => {
      if (Date.now() - link.lastSeenMs > SILENT_MS) return link.ws.destroy();
      link.send([F.Ping, Date.now()]);
    }, PING_MS);
    this.pinger.unref();
    this.join();
  }

  private join(): void {
    if (!this.link || !this.tunnels) return;
    const tunnels = this.host.memberTunnels();
    const opens = new Map(tunnels.map((t) => [t.id, t.open]));
    this.tunnels.join(tunnels, (id, key) => ({ ...opens.get(id)!, id, member: key, lane: null }));
  }

  /** The connection is gone: its streams with it; another node after RETRY_MS. */
  private lost(): void {
    const link = this.link;
    this.link = null;
    this.node = null;
    if (this.pinger) clearInterval(this.pinger);
    this.pinger = null;
    if (link) {
      this.host.dropStreams(link);
      link.ws.destroy();
    }
    this.tunnels = null;
    this.later();
  }

  /** Leaves this node gracefully: Close for each tunnel (the server sends no new stream), the connection ends once its streams did. */
  private retire(): void {
    const link = this.link!;
    this.link = null;
    this.node = null;
    if (this.pinger) clearInterval(this.pinger);
    this.pinger = null;
    this.tunnels?.leave();
    this.tunnels = null;
    void settled(() => link.streams.size === 0 || link.ws.isClosed, RETIRE_MS).then(() => {
      this.host.dropStreams(link);
      link.ws.close(1000, 'sibling moved to another node');
    });
  }

  private onMessage(link: Link, m: Buffer): void {
    const frame = link.receive(m, this.host.openStream);
    if (!frame) return;
    // A join's answer, on the sibling's current connection (a retiring one's are over).
    if (link === this.link && this.tunnels?.answer(frame, (id) => this.host.dropStreams(link, id))) return;
    switch (frame[0]) {
      case F.Welcome:
        // This node's view of the cluster: the main connection's may be out of date.
        if (frame[1].nodes) this.nodes = this.host.dialable([...new Set([...frame[1].nodes, ...(frame[1].node ? [frame[1].node] : [])])]);
        return;
      case F.Opened:
      case F.Refused:
        return;
      case F.Closed:
        this.host.dropStreams(link, frame[1]);
        return;
      case F.Fatal:
        // Revoked: the main connection hears the same and decides. Shutting down: another node.
        link.ws.close(1000, 'sibling closed');
        return;
      case F.GoAway:
        return;
      default:
        link.ws.close(1002, `frame type ${frame[0]} is not expected on a sibling connection`);
        return;
    }
  }
}
