import { Mailbox, RAW_TAG, type PortLike } from '../actors/actor.js';
import { assertNever } from '../errors.js';
import type { Logger } from '../log.js';
import { StreamEnds } from '../protocol/flow-control.js';
import { type ResetCode, type ResponseHead, type StreamHead } from '../protocol/frames.js';
import type { TunnelMesh } from '../protocol/tunnel-messages.js';
import type { Downstream, Upstream } from './stream.js';

// Cross-shard ingress. The kernel spreads public connections over all shards, but a tunnel's
// streams live on the shard holding its control connection (the owner). A request landing on
// another shard (the ingress) becomes mesh messages:
//
//   ingress shard                                        owner shard
//   TunnelVisitor ─▶ MeshUpstream ──x-open/x-data/x-end──▶ MeshDownstream ◀─▶ TunnelStream ─▶ client
//   TunnelVisitor ◀───────── x-response/x-data/x-end/x-reset/x-credit ◀─┘
//
// Credit stays end to end (x-credit carries the visitor's and the client's consumption), so the
// owner never buffers for a slow visitor and the ingress never buffers for a slow client.
//
// Bulk x-data (RAW_DATA_MIN_BYTES and more) travels beside the msgpack batches as a raw message
// (Mailbox.postRaw): RAW_TAG, the xid as a signed 48-bit integer, then the bytes. msgpack would
// copy them into its buffer and the batch again into the transferred one; raw, a MessagePort
// copies them once and a cluster link's WebSocket not at all. Smaller ones stay in the batch,
// where many of them cost one postMessage.

/** x-data from this size on is sent raw (a visitor's or a client's socket reads are up to 64 KiB). */
const RAW_DATA_MIN_BYTES = 8 * 1024;
/** RAW_TAG and the xid (6 bytes: xids count up past 2^31 in a long-lived shard). */
const RAW_DATA_HEAD_BYTES = 7;

/** One stream's bytes toward `peer` (`xid` signed as the message's). */
function sendData(peer: Peer, xid: number, bytes: Uint8Array): void {
  if (bytes.byteLength < RAW_DATA_MIN_BYTES) {
    peer.mailbox.tell({ type: 'x-data', xid, bytes });
    return;
  }
  const head = Buffer.allocUnsafe(RAW_DATA_HEAD_BYTES);
  head[0] = RAW_TAG;
  head.writeIntBE(xid, 1, 6);
  peer.mailbox.postRaw(head, bytes);
}

/** One peer shard: its mailbox and the streams shared with it in both roles. */
class Peer {
  /** streams whose visitor is here (by our xid) */
  readonly outgoing = new Map<number, Downstream>();
  /** streams whose tunnel is here (by the peer's xid) */
  readonly incoming = new Map<number, Incoming>();
  constructor(readonly mailbox: Mailbox<TunnelMesh, TunnelMesh>) {}
}

/**
 * Owner-side proxy of a remote visitor. Messages toward the ingress carry the negated xid:
 * both shards number their own visitors from 1, so the sign tells which side's stream it is.
 */
class Incoming implements Downstream {
  up: Upstream | null = null;
  /** set by whoever carries this stream on (a cluster link's stream relayed to another shard) */
  onDone: (() => void) | null = null;
  /** local = client → visitor (x-end we send), peer = visitor → client; over: forgotten by the peer map. */
  readonly ends = new StreamEnds(this);
  constructor(
    private readonly peer: Peer,
    private readonly xid: number,
  ) {}
  streamFinished(): void {
    this.peer.incoming.delete(this.xid);
    this.onDone?.();
  }
  response(head: ResponseHead): void {
    this.peer.mailbox.tell({ type: 'x-response', xid: -this.xid, head });
  }
  data(bytes: Uint8Array): void {
    sendData(this.peer, -this.xid, bytes);
  }
  end(trailers?: string[]): void {
    if (!this.ends.endLocal()) return;
    this.peer.mailbox.tell({ type: 'x-end', xid: -this.xid, ...(trailers ? { trailers } : {}) });
    this.ends.settle();
  }
  reset(code: ResetCode, vanished?: boolean): void {
    this.ends.finish();
    this.peer.mailbox.tell({ type: 'x-reset', xid: -this.xid, code, ...(vanished ? { vanished } : {}) });
  }
  credit(bytes: number): void {
    this.peer.mailbox.tell({ type: 'x-credit', xid: -this.xid, bytes });
  }
  /** x-end from the visitor */
  visitorEnd(): void {
    if (this.ends.endPeer() !== 'ok') return;
    this.up?.end();
    this.ends.settle();
  }
}

/** Ingress-side proxy of a remote tunnel stream. */
class MeshUpstream implements Upstream {
  constructor(
    private readonly peer: Peer,
    private readonly xid: number,
    private readonly log: Logger,
  ) {}
  /** The visitor adapter's deferred work threw: this stream ends, the shard goes on. */
  fault(err: unknown): void {
    this.log.error({ err, xid: this.xid }, 'mesh: visitor stream failed; stream reset');
    this.reset('protocol');
  }
  data(bytes: Uint8Array): void {
    sendData(this.peer, this.xid, bytes);
  }
  end(): void {
    this.peer.mailbox.tell({ type: 'x-end', xid: this.xid });
  }
  reset(code: ResetCode): void {
    this.peer.outgoing.delete(this.xid);
    this.peer.mailbox.tell({ type: 'x-reset', xid: this.xid, code });
  }
  credit(bytes: number): void {
    // Already batched by the visitor adapter's CreditMeter: one mesh message per report.
    this.peer.mailbox.tell({ type: 'x-credit', xid: this.xid, bytes });
  }
}

export class Mesh {
  private readonly peers = new Map<number, Peer>();
  private nextXid = 1;

  constructor(
    private readonly log: Logger,
    /** Opens a stream on a tunnel of this shard (a link's: of this node); null when it is not here. */
    private readonly openLocal: (tunnelId: string, head: StreamHead, down: Downstream & { onDone: (() => void) | null }) => Upstream | null,
  ) {}

  /** Cross-shard streams held here in both roles (GET /readyz?detail=1). */
  get streamCount(): number {
    let n = 0;
    for (const p of this.peers.values()) n += p.outgoing.size + p.incoming.size;
    return n;
  }

  /** A (new) port to `shard` (a MessagePort, or a cluster link: src/cluster/node-links.ts).
   *  A replaced port means that peer restarted: its streams are lost. */
  attach(shard: number, port: PortLike): void {
    this.detach(shard);
    const mailbox = new Mailbox<TunnelMesh, TunnelMesh>(port, { batchTells: true });
    const peer = new Peer(mailbox);
    const receive = (msg: TunnelMesh): void => {
      // Mailbox drops a tell's exception silently: end that one stream instead, logged.
      try {
        this.receive(peer, msg);
      } catch (err) {
        this.fault(peer, msg, err);
      }
    };
    mailbox.handle(receive);
    mailbox.onRaw((raw) => {
      // Thrown to the port: a cluster link that sends this is broken, and is closed.
      if (raw.byteLength < RAW_DATA_HEAD_BYTES) throw new Error(`a raw mesh message of ${raw.byteLength} bytes, shorter than its head`);
      const xid = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).readIntBE(1, 6);
      receive({ type: 'x-data', xid, bytes: raw.subarray(RAW_DATA_HEAD_BYTES) });
    });
    this.peers.set(shard, peer);
  }

  detach(shard: number): void {
    const old = this.peers.get(shard);
    if (!old) return;
    this.peers.delete(shard);
    old.mailbox.close('peer shard restarted');
    for (const d of old.outgoing.values()) d.reset('closing', true);
    for (const u of old.incoming.values()) u.up?.reset('visitor-gone');
    old.outgoing.clear();
    old.incoming.clear();
  }

  /** Ingress side: a visitor request for a tunnel on `shard`. Null when no port to it exists. */
  open(shard: number, tunnelId: string, head: StreamHead, down: Downstream & { onDone: (() => void) | null }): Upstream | null {
    const peer = this.peers.get(shard);
    if (!peer) return null;
    const xid = this.nextXid++;
    peer.outgoing.set(xid, down);
    down.onDone = () => peer.outgoing.delete(xid);
    peer.mailbox.tell({ type: 'x-open', xid, tunnelId, head });
    return new MeshUpstream(peer, xid, this.log);
  }

  /** A stream callback threw on a mesh message: reset that stream on both shards. */
  private fault(peer: Peer, msg: TunnelMesh, err: unknown): void {
    this.log.error({ err, type: msg.type, xid: msg.xid }, 'mesh: stream handler failed; stream reset');
    if (msg.xid < 0) {
      peer.outgoing.delete(-msg.xid);
      peer.mailbox.tell({ type: 'x-reset', xid: -msg.xid, code: 'visitor-gone' });
      return;
    }
    const inc = peer.incoming.get(msg.xid);
    peer.incoming.delete(msg.xid);
    peer.mailbox.tell({ type: 'x-reset', xid: -msg.xid, code: 'protocol' });
    try {
      inc?.up?.reset('visitor-gone');
    } catch {
      // already failing: the control connection's own guard ends it
    }
  }

  private receive(peer: Peer, msg: TunnelMesh): void {
    if (msg.type === 'x-open') {
      const inc = new Incoming(peer, msg.xid);
      const up = this.openLocal(msg.tunnelId, msg.head, inc);
      if (!up) {
        peer.mailbox.tell({ type: 'x-reset', xid: -msg.xid, code: 'no-tunnel', vanished: true });
        return;
      }
      inc.up = up;
      if (msg.head.kind === 'http' && msg.head.end) inc.ends.endPeer();
      peer.incoming.set(msg.xid, inc);
      return;
    }
    if (msg.xid < 0) {
      // toward a visitor of this shard
      const out = peer.outgoing.get(-msg.xid);
      if (!out) return;
      switch (msg.type) {
        case 'x-response':
          return out.response(msg.head);
        case 'x-data':
          return out.data(msg.bytes);
        case 'x-end':
          return out.end(msg.trailers);
        case 'x-reset':
          peer.outgoing.delete(-msg.xid);
          return out.reset(msg.code, msg.vanished === true);
        case 'x-credit':
          return out.credit(msg.bytes);
        default:
          return assertNever(msg);
      }
    }
    // toward a tunnel of this shard
    const inc = peer.incoming.get(msg.xid);
    if (!inc?.up) return;
    switch (msg.type) {
      case 'x-data':
        return inc.up.data(msg.bytes);
      case 'x-end':
        return inc.visitorEnd();
      case 'x-reset':
        inc.ends.finish();
        return inc.up.reset(msg.code);
      case 'x-credit':
        return inc.up.credit(msg.bytes);
      case 'x-response':
        this.log.warn({ xid: msg.xid }, 'mesh: response toward a tunnel, ignored');
        return;
      default:
        return assertNever(msg);
    }
  }
}
