import net from 'node:net';
import { ApiError } from '../errors.js';
import { INITIAL_WINDOW_BYTES, type ResetCode, type ResponseHead } from '../protocol/frames.js';
import type { TunnelActor } from './tunnel.js';
import type { Downstream, Upstream } from './stream.js';

// TCP tunnels: the owning shard listens on the tunnel's public port (a port of
// --tcp-port-range) and relays each accepted connection as one stream.
//
//   visitor socket ─data─▶ TcpVisitor ─Upstream─▶ TunnelStream ─Data frames─▶ client ─▶ local
//   visitor socket ◀write─ TcpVisitor ◀Downstream─ TunnelStream ◀──────────── client ◀── local
//
// Half-close both ways: a visitor FIN becomes End, an End from the client becomes FIN
// (allowHalfOpen). Credit: the socket is paused when the stream's window is spent; bytes
// written to the visitor are reported consumed once the socket took them (write() under its
// high-water mark, or on 'drain').

class TcpVisitor implements Downstream {
  up: Upstream | null = null;
  private window = INITIAL_WINDOW_BYTES;
  private paused = false;
  private unreported = 0;
  private done = false;

  constructor(private readonly sock: net.Socket) {
    sock.on('data', (b: Buffer) => {
      this.up?.data(b);
      this.window -= b.byteLength;
      if (this.window <= 0 && !this.paused) {
        this.paused = true;
        sock.pause();
      }
    });
    sock.on('end', () => this.up?.end());
    sock.on('drain', () => {
      const n = this.unreported;
      this.unreported = 0;
      if (n > 0) this.up?.credit(n);
    });
    sock.on('error', () => undefined);
    sock.on('close', () => {
      if (!this.done) {
        this.done = true;
        this.up?.reset('visitor-gone');
      }
    });
  }

  response(_head: ResponseHead): void {}

  data(bytes: Uint8Array): void {
    if (this.done) return;
    // Copy: the frame's buffer is reused once this call returns.
    if (this.sock.write(Buffer.from(bytes))) this.up?.credit(bytes.byteLength);
    else this.unreported += bytes.byteLength;
  }

  end(): void {
    if (this.done) return;
    this.sock.end();
  }

  reset(_code: ResetCode): void {
    if (this.done) return;
    this.done = true;
    this.sock.resetAndDestroy();
  }

  credit(bytes: number): void {
    this.window += bytes;
    if (this.paused && this.window > 0) {
      this.paused = false;
      this.sock.resume();
    }
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
export function serveTcp(server: net.Server, actor: TunnelActor): void {
  const sockets = new Set<net.Socket>();
  server.on('connection', (sock) => {
    sock.setNoDelay(true);
    sockets.add(sock);
    sock.once('close', () => sockets.delete(sock));
    const visitor = new TcpVisitor(sock);
    const up = actor.openStream({ kind: 'tcp', remote: `${sock.remoteAddress}:${sock.remotePort}` }, visitor);
    if (!up) {
      sock.destroy();
      return;
    }
    visitor.up = up;
  });
  actor.onClose = () => {
    server.close();
    for (const s of sockets) s.destroy();
  };
}
