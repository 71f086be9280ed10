import type { OpenRequest, Welcome } from '../protocol/frames.js';
import type { Link, StreamOpener } from './link.js';
import { ClientConnection, type ConnectionOwner, type JoinHost, type JoinKey } from './joined-connection.js';
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

/** A tunnel the sibling joins: its id, member key, and the Open it was registered with. */
export interface MemberTunnel extends JoinKey {
  open: OpenRequest;
}

export interface SiblingHost extends JoinHost {
  /** An authenticated control WebSocket to the node at `url`. */
  connectTo(url: string): Promise<WsClient>;
  /** The registered tunnels a second connection joins: their ids, member keys and Opens. */
  memberTunnels(): MemberTunnel[];
  /** The node URLs among `urls` this client may send its key to. */
  dialable(urls: string[]): string[];
}

const RETRY_MS = 1_000;
/** Longest a sibling that moves waits for its streams to finish. */
const RETIRE_MS = 10_000;
/** Alone in a cluster (no other node named yet): Welcome is asked again this often. */
const PROBE_MS = 3_000;
const WELCOME_TIMEOUT_MS = 5_000;

type Sibling = ClientConnection<MemberTunnel>;

/**
 * The sibling's policy: which node to dial (another than the main connection's, in turn), when
 * to try again (RETRY_MS after a loss; PROBE_MS while the cluster has no other node), when to
 * move (it shares the main connection's node) and when to stop. The connection is a ClientConnection.
 */
export class NodeSibling implements ConnectionOwner<MemberTunnel> {
  /** the current connection; null while none (connecting, waiting to retry, stopped) */
  private conn: Sibling | null = null;
  /** the node the sibling is connected (or connecting) to */
  private node: string | null = null;
  private connecting = false;
  /** the main connection's node, and the cluster's others as the last Welcome named them */
  private mainNode: string | null = null;
  private nodes: string[] = [];
  private retry: NodeJS.Timeout | null = null;
  private stopped = false;
  private turn = 0;
  readonly openStream: StreamOpener;

  constructor(private readonly host: SiblingHost) {
    this.openStream = host.openStream;
  }

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
    if (this.conn && this.node === this.mainNode) this.retire();
    if (this.conn) this.join(this.conn);
    else this.ensure();
  }

  links(): Link[] {
    return this.conn ? [this.conn.link] : [];
  }

  /** The client stops: Close for each joined tunnel (the server sends no new stream), then, once
   *  its streams ended (a pool member leaving) or at once (`graceMs` 0), the connection ends. */
  async stop(graceMs = 0): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    const conn = this.conn;
    this.conn = null;
    if (!conn) return;
    conn.leave();
    if (graceMs > 0) await conn.drained(graceMs);
    conn.close(1000, 'client stopped');
    conn.link.abortStreams();
  }

  private ensure(): void {
    if (this.stopped || this.conn || this.connecting || this.retry) return;
    if (this.host.memberTunnels().length === 0) return;
    const candidates = this.nodes.filter((n) => n !== this.mainNode);
    if (candidates.length === 0) return this.probe();
    const node = candidates[this.turn++ % candidates.length]!;
    this.node = node;
    this.dial(node, (ws) => {
      if (this.stopped) return ws.destroy();
      this.conn = new ClientConnection(ws, 'sibling', this);
      this.join(this.conn);
    });
  }

  /** A cluster of one node so far: ask its Welcome again later (another node may have joined). */
  private probe(): void {
    if (this.stopped || this.retry || !this.mainNode) return;
    const node = this.mainNode;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.dial(node, async (ws) => {
        // Its Welcome names the nodes (welcome() below); then it goes.
        const probe = new ClientConnection(ws, 'sibling', this);
        this.connecting = true;
        await probe.welcome(WELCOME_TIMEOUT_MS);
        probe.close(1000, 'nodes read');
        this.connecting = false;
        this.ensure();
      });
    }, PROBE_MS);
    this.retry.unref();
  }

  /** Connects to `node`: `then` takes the connection; a failure tries again after RETRY_MS. */
  private dial(node: string, then: (ws: WsClient) => void): void {
    this.connecting = true;
    this.host.connectTo(node).then(
      (ws) => {
        this.connecting = false;
        then(ws);
      },
      () => {
        this.connecting = false;
        this.later();
      },
    );
  }

  private later(): void {
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.ensure();
    }, RETRY_MS);
    this.retry.unref();
  }

  private join(conn: Sibling): void {
    conn.join(this.host.memberTunnels(), (t) => ({ ...t.open, id: t.id, member: t.key, lane: null }));
  }

  /** This node's view of the cluster (any of the sibling's connections): the main connection's may be out of date. */
  welcome(_c: Sibling, w: Welcome): void {
    if (w.nodes) this.nodes = this.host.dialable([...new Set([...w.nodes, ...(w.node ? [w.node] : [])])]);
  }

  /** The current connection is gone: its streams with it; another node after RETRY_MS. */
  lost(conn: Sibling): void {
    if (this.conn !== conn) return;
    this.conn = null;
    this.node = null;
    this.host.dropStreams(conn.link);
    conn.destroy();
    this.later();
  }

  /** Tunnel `id` ended on this connection (the current one or one retiring): its streams here are over. */
  closed(conn: Sibling, id: string): void {
    this.host.dropStreams(conn.link, id);
  }

  /** Revoked: the main connection hears the same and decides. Shutting down: another node. */
  fatal(conn: Sibling): void {
    conn.close(1000, 'sibling closed');
  }

  /** Leaves this node gracefully: Close for each tunnel (the server sends no new stream), the connection ends once its streams did. */
  private retire(): void {
    const conn = this.conn!;
    this.conn = null;
    this.node = null;
    conn.leave();
    void conn.drained(RETIRE_MS).then(() => {
      this.host.dropStreams(conn.link);
      conn.close(1000, 'sibling moved to another node');
    });
  }
}
