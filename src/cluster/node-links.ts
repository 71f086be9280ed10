import { createHmac, timingSafeEqual } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { PortLike } from '../actors/actor.js';
import type { Logger } from '../log.js';
import type { StreamHead } from '../protocol/frames.js';
import type { WsConnection } from '../protocol/ws-connection.js';
import { WsClient } from '../protocol/ws-client.js';
import { Mesh } from '../edge/mesh.js';
import type { Upstream } from '../edge/stream.js';
import type { ClusterLinks, LinkDownstream } from '../edge/shard-context.js';

// Links between nodes (one shard's side). A visitor reaching this node for a tunnel whose
// client is connected to another node is carried over a link to that node's --node-url:
//
//   node B shard j                                          node A, whichever shard the kernel picks
//   TunnelVisitor ─▶ NodeLinks.open ─▶ Mesh (x-open …) ═WebSocket═▶ accept ─▶ Mesh ─▶ openHere:
//                                                                   the tunnel or its lane here,
//                                                                   else the shard mesh to its owner
//
// The link carries the shard mesh's own messages (x-open, x-data, x-credit, …: src/edge/mesh.ts),
// msgpack-batched by a Mailbox, one WebSocket message per batch, and bulk x-data as raw
// messages of their own whose bytes are written as they are (LinkPort.postParts): the credit stays end to end
// from the visitor at B to the client at A, so no node in the middle buffers for a slow peer.
// A link is dialled on first use and kept; a lost link resets its streams (502 to those
// visitors) and the next visitor dials again.

export const LINK_PATH = '/cluster/v1/link';
/** A mesh batch: tells flush early at 64 KiB, plus one message's bytes. */
const MAX_LINK_MESSAGE_BYTES = 8 * 1024 * 1024;
const DIAL_TIMEOUT_MS = 5_000;
/** Both ends ping a link this often; one silent for LINK_SILENT_MS is lost. */
const LINK_PING_MS = 2_000;
const LINK_SILENT_MS = 6_000;

/** How long one link token is presented; a node accepts the windows either side too (clock skew). */
export const LINK_TOKEN_WINDOW_MS = 10 * 60_000;

/**
 * The token of time window `window` (Date.now() / LINK_TOKEN_WINDOW_MS, floored): derived from the
 * cluster's shared secret (server_secrets). Its version changes with the link's messages (v3: raw
 * x-data), so a node of another version refuses the link (401) instead of failing on its messages.
 */
export function linkToken(secret: Uint8Array, window: number): string {
  return createHmac('sha256', secret).update(`burrow cluster link v3 ${window}`).digest('base64url');
}

/**
 * The tokens of links between nodes. Each is derived from the shared secret and a ten-minute
 * window, so a token that leaked (a log, a proxy's trace) opens no link past the next window:
 * a node presents the current window's token and accepts the previous, current and next one.
 * Established links stay; only dialling needs a token.
 */
export class LinkTokens {
  constructor(
    private readonly secret: Uint8Array,
    private readonly now: () => number = Date.now,
  ) {}

  private window(): number {
    return Math.floor(this.now() / LINK_TOKEN_WINDOW_MS);
  }

  /** What this node presents now. */
  current(): string {
    return linkToken(this.secret, this.window());
  }

  /** Constant-time check of a link's Authorization header against the windows accepted now. */
  authorized(authorization: string | undefined): boolean {
    const w = this.window();
    let ok = false;
    // Every window is compared, so the time taken does not tell which matched.
    for (const d of [-1, 0, 1]) ok = linkAuthorized(authorization, linkToken(this.secret, w + d)) || ok;
    return ok;
  }
}

/** Constant-time check of a link's Authorization header against one token. */
export function linkAuthorized(authorization: string | undefined, token: string): boolean {
  const given = Buffer.from(authorization ?? '');
  const expected = Buffer.from(`Bearer ${token}`);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * A Mailbox port over a link's WebSocket. Posts made while the link is being dialled wait in
 * order (bounded by the streams' credit windows, as any mesh message); 'close' when it is lost.
 */
class LinkPort extends EventEmitter implements PortLike {
  private ws: WsConnection | null = null;
  private waiting: Uint8Array[] = [];
  private closed = false;
  private heartbeat: NodeJS.Timeout | null = null;

  postMessage(value: unknown): void {
    if (this.closed || !(value instanceof Uint8Array)) return;
    if (this.ws) this.ws.send(value);
    else this.waiting.push(value);
  }

  /** A raw message (bulk x-data): the payload goes to the socket as it is, not copied. */
  postParts(head: Uint8Array, payload: Uint8Array): void {
    if (this.closed) return;
    if (this.ws) this.ws.sendParts(head, payload);
    else this.waiting.push(Buffer.concat([head, payload]));
  }

  connected(ws: WsConnection): void {
    if (this.closed) return ws.close(1001, 'link no longer wanted');
    this.ws = ws;
    ws.on('message', (m) => {
      try {
        this.emit('message', m);
      } catch {
        // a batch that does not decode: the peer is broken, and so is this link (its streams reset)
        this.close();
      }
    });
    ws.once('close', () => this.lost());
    for (const m of this.waiting) ws.send(m);
    this.waiting = [];
    // A partition sends no FIN: a link silent for LINK_SILENT_MS is lost (its streams are reset
    // and sent again elsewhere where they can be, and its node is avoided).
    this.heartbeat = setInterval(() => {
      if (Date.now() - ws.lastSeenMs > LINK_SILENT_MS) ws.destroy();
      else ws.ping();
    }, LINK_PING_MS);
    this.heartbeat.unref();
  }

  lost(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.closed) return;
    this.closed = true;
    this.waiting = [];
    this.emit('close');
  }

  close(): void {
    this.ws?.close(1001, 'node shutting down');
    this.lost();
  }
}

export class NodeLinks implements ClusterLinks {
  private readonly mesh: Mesh;
  /** dialled links by peer URL, and their mesh peer number */
  private readonly dialled = new Map<string, { index: number; port: LinkPort }>();
  private readonly ports = new Map<number, LinkPort>();
  private nextIndex = 1;

  constructor(
    private readonly log: Logger,
    private readonly tokens: LinkTokens,
    /** Opens a stream on a tunnel of this node (its shard, a lane here, or the shard mesh); null when none. */
    openHere: (tunnelId: string, head: StreamHead, down: LinkDownstream) => Upstream | null,
    /** A dialled link failed or was lost (`up` false), or was established (true). */
    private readonly health: (url: string, up: boolean) => void = () => undefined,
  ) {
    this.mesh = new Mesh(log.child({ part: 'links' }), openHere);
  }

  /** Streams over links, both roles (GET /readyz?detail=1). */
  get streamCount(): number {
    return this.mesh.streamCount;
  }

  get linkCount(): number {
    return this.ports.size;
  }

  /** A visitor here for a tunnel on the node at `url`. */
  open(url: string, tunnelId: string, head: StreamHead, down: LinkDownstream): Upstream | null {
    const link = this.dialled.get(url) ?? this.dial(url);
    return this.mesh.open(link.index, tunnelId, head, down);
  }

  private dial(url: string): { index: number; port: LinkPort } {
    const port = new LinkPort();
    // Before attach's listener, which resets the link's streams: a visitor asked again must not
    // find this link, nor its node, as a choice.
    port.once('close', () => {
      if (this.dialled.get(url) === link) this.dialled.delete(url);
      this.health(url, false);
    });
    const link = this.attach(port);
    this.dialled.set(url, link);
    const target = new URL(LINK_PATH, url).toString();
    WsClient.connect(target, { authorization: `Bearer ${this.tokens.current()}` }, MAX_LINK_MESSAGE_BYTES, DIAL_TIMEOUT_MS).then(
      (ws) => {
        port.connected(ws);
        this.health(url, true);
      },
      (err: unknown) => {
        this.log.warn({ err: (err as Error).message, peer: url }, 'cluster: link to a node failed; its visitors here get 502');
        port.lost();
      },
    );
    return link;
  }

  /** A link another node dialled to this one (its 101 written by the caller). */
  accept(ws: WsConnection): void {
    const port = new LinkPort();
    this.attach(port);
    port.connected(ws);
  }

  private attach(port: LinkPort): { index: number; port: LinkPort } {
    const index = this.nextIndex++;
    this.ports.set(index, port);
    this.mesh.attach(index, port);
    port.once('close', () => {
      this.ports.delete(index);
      this.mesh.detach(index);
    });
    return { index, port };
  }

  closeAll(): void {
    for (const p of [...this.ports.values()]) p.close();
  }
}
