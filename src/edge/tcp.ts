import net from 'node:net';
import { ApiError } from '../errors.js';
import { CreditMeter, SendWindow, StreamEnds } from '../protocol/flow-control.js';
import type { ResetCode, ResponseHead } from '../protocol/frames.js';
import type { TunnelActor } from './tunnel.js';
import type { Downstream, Upstream } from './stream.js';
import { admitTcpVisitor, type AccessGate } from './access.js';
import { edgeCounters } from './metrics.js';

// TCP tunnels: the owning shard listens on the tunnel's public port (a port of
// --tcp-port-range) and relays each accepted connection as one stream.
//
//   visitor socket ─data─▶ TcpVisitor ─Upstream─▶ TunnelStream ─Data frames─▶ client ─▶ local
//   visitor socket ◀write─ TcpVisitor ◀Downstream─ TunnelStream ◀──────────── client ◀── local
//
// Half-close both ways: a visitor FIN becomes End, an End from the client becomes FIN
// (allowHalfOpen). Flow control (protocol/flow-control.ts): a SendWindow pauses the socket when
// the stream's window is spent; a CreditMeter reports bytes written to the visitor once the
// socket took them (write() under its high-water mark, or on 'drain').

class TcpVisitor implements Downstream {
  up: Upstream | null = null;
  /** set by a carrier that keeps state per stream (a link to another node) */
  onDone: (() => void) | null = null;
  private readonly window: SendWindow;
  private readonly meter = new CreditMeter(this);
  /** local = visitor → client (the visitor's FIN), peer = client → visitor (the client's End). */
  private readonly ends = new StreamEnds(this);

  reportCredit(bytes: number): void {
    this.up?.credit(bytes);
  }

  streamFinished(): void {
    this.onDone?.();
  }

  constructor(private readonly sock: net.Socket) {
    this.window = new SendWindow(sock);
    sock.on('data', (b: Buffer) => {
      this.up?.data(b);
      this.window.spend(b.byteLength);
    });
    sock.on('end', () => {
      if (!this.ends.endLocal()) return;
      this.up?.end();
      this.ends.settle();
    });
    sock.on('drain', () => this.meter.drained());
    sock.on('error', () => undefined);
    sock.on('close', () => {
      if (this.ends.finish()) this.up?.reset('visitor-gone');
    });
  }

  response(_head: ResponseHead): void {}

  data(bytes: Uint8Array): void {
    if (this.ends.done) return;
    this.meter.wrote(bytes.byteLength, this.sock.write(bytes));
  }

  end(): void {
    if (this.ends.endPeer() !== 'ok') return;
    this.sock.end();
    this.ends.settle();
  }

  reset(_code: ResetCode): void {
    if (!this.ends.finish()) return;
    this.sock.resetAndDestroy();
  }

  credit(bytes: number): void {
    this.window.grant(bytes);
  }
}

function listenOn(host: string, port: number): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer({ allowHalfOpen: true, noDelay: true, pauseOnConnect: false });
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}

/** Throws the refusal of a TCP Open this server can never serve (disabled, port off range). */
export function checkTcpRequest(range: { min: number; max: number } | null, requested: number | null): asserts range is { min: number; max: number } {
  if (!range) throw new ApiError('bad-request', 'TCP tunnels are disabled on this server (--tcp-port-range off)');
  if (requested !== null && (!Number.isInteger(requested) || requested < range.min || requested > range.max)) {
    throw new ApiError('bad-request', `remote port ${requested} is outside ${range.min}-${range.max}`);
  }
}

/** Binds the requested port, or a free one of the range. */
export async function bindTcpPort(host: string, range: { min: number; max: number } | null, requested: number | null): Promise<net.Server> {
  checkTcpRequest(range, requested);
  if (requested !== null) {
    try {
      return await listenOn(host, requested);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new ApiError('conflict', `remote port ${requested} is in use`);
      throw err;
    }
  }
  const span = range.max - range.min + 1;
  const first = Math.floor(Math.random() * span);
  for (let i = 0; i < Math.min(span, 200); i++) {
    const port = range.min + ((first + i * 7919) % span);
    try {
      return await listenOn(host, port);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' && (err as NodeJS.ErrnoException).code !== 'EACCES') throw err;
    }
  }
  throw new ApiError('unavailable', `no free port in ${range.min}-${range.max}`);
}

/** Serves visitor connections of a tcp tunnel until the tunnel closes. */
export function serveTcp(server: net.Server, actor: TunnelActor, gate: AccessGate | null = null): void {
  const close = relayTcp(server, (head, visitor) => actor.openStream(head, visitor), gate);
  actor.onClose = close;
}

/** The stream a TCP visitor's connection becomes (a tunnel here, or a link to the node holding it). */
export type TcpOpener = (head: { kind: 'tcp'; remote: string }, visitor: Downstream & { onDone: (() => void) | null }) => Upstream | null;

/** Relays each accepted connection as a stream opened by `open`; the returned function stops it all. */
export function relayTcp(server: net.Server, open: TcpOpener, gate: AccessGate | null = null): () => void {
  const sockets = new Set<net.Socket>();
  server.on('connection', (sock) => {
    // Before any stream exists: a refused address is reset and the client never hears of it.
    if (!admitTcpVisitor(gate, sock)) return;
    sock.setNoDelay(true);
    sockets.add(sock);
    sock.once('close', () => sockets.delete(sock));
    const visitor = new TcpVisitor(sock);
    const up = open({ kind: 'tcp', remote: `${sock.remoteAddress}:${sock.remotePort}` }, visitor);
    if (!up) {
      sock.destroy();
      return;
    }
    visitor.up = up;
    edgeCounters.tcpConnections++;
  });
  return () => {
    server.close();
    for (const s of sockets) s.destroy();
  };
}
