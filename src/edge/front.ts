import net from 'node:net';
import tls from 'node:tls';
import { createRequire } from 'node:module';
import type { Logger } from '../log.js';
import { canonicalIp } from '../http/client-address.js';
import type { SniContexts } from '../http/tls.js';
import { CidrSet } from '../protocol/cidr.js';
import { parseProxyHeader, V2_MAX } from '../protocol/proxy-header.js';
import { DEFAULT_TERMS, DISCARD, FrontConnection, type ConnectionTerms, type FrontHost } from './front-connection.js';
import type { ConnectionLimits } from './front-limits.js';
import type { H2Front } from './h2-front.js';

// The public port of one shard: node:net (node:tls with --tls-cert), shared by every shard
// through SO_REUSEPORT, so the kernel spreads connections over the shards' loops.
//
//   kernel ─accept─▶ descriptor budget (front-limits.ts) ─▶ [PROXY header (--proxy-protocol)]
//          ─▶ per-address cap on the client's address ─▶ [TLS: SNI context] ─▶ FrontConnection
//
// The per-address cap counts the address the front knows the client by for the connection's
// whole life: the socket's peer, or under --proxy-protocol the header's source (the socket's
// peer is then the load balancer, shared by every client). X-Forwarded-For (--trust-proxy)
// comes per request, after the connection is counted, so a trusted proxy's connections are
// not counted per address at all: capping them would cap every client behind it together.
//
// SO_REUSEPORT: `reusePort: true` on Node ≥ 22.12; on older Node a descriptor made by
// node-unix-socket's binding is passed to listen({ fd }) (Node has no other way to set the
// option, and worker threads cannot share a listening handle). Where neither is there (Node 20
// off linux-x64), burrowd runs one shard (src/main.ts).

/** A PROXY header must arrive within this long, and a TLS handshake finish within the same again. */
const HANDSHAKE_TIMEOUT_MS = 5_000;

/** Answers every request of a connection that sent no PROXY header where one is expected. */
const NO_PROXY_HEADER = (log: Logger): FrontHost => ({
  log,
  exchange(_conn, _head, res) {
    res.closeAfter();
    res.problem('bad-request', 'this listener expects a PROXY protocol header (--proxy-protocol) before the request');
    return DISCARD;
  },
});

export interface FrontOptions {
  host: string;
  port: number;
  /** TLS contexts (--tls-cert, --tls-dir), or null for plain HTTP. */
  tls: SniContexts | null;
  /** --proxy-protocol: each connection starts with a PROXY v1/v2 header naming the client. */
  proxyProtocol: boolean;
  /** --proxy-protocol-from: the peers allowed to send one (empty: any). */
  proxyFrom?: CidrSet;
  log: Logger;
  host_: FrontHost;
  /** The shard's connection counts (shared by its fronts), or null: no caps. */
  limits?: ConnectionLimits | null;
  /** --first-byte-timeout, --send-timeout. */
  timeouts?: Pick<ConnectionTerms, 'firstByteTimeoutMs' | 'sendTimeoutMs'>;
  /** HTTP/2 for tunnel traffic (edge/h2-front.ts): ALPN `h2` with TLS, the h2c preface on a plain port; null: HTTP/1.x only. */
  h2?: H2Front | null;
}

/** RFC 9113 §3.4: an h2c connection with prior knowledge opens with these 24 bytes. */
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/** True where Node's listen() takes `reusePort` (22.12 and later). */
export function nativeReusePort(): boolean {
  const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
  return major > 22 || (major === 22 && minor >= 12);
}

/**
 * Older Node: a socket with SO_REUSEPORT from node-unix-socket's prebuilt binding (its
 * linux-x64-gnu build, the only one the registry carries), or null where it does not load.
 */
type ReuseportBinding = { socketNewSoReuseportFd(domain: 'ipv4' | 'ipv6', port: number, host: string): number };
export function reuseportBinding(): ReuseportBinding | null {
  try {
    return createRequire(import.meta.url)(`node-unix-socket-${process.platform}-${process.arch}-gnu`) as ReuseportBinding;
  } catch {
    return null;
  }
}

/** Whether every shard can listen on the public port (else burrowd runs one shard). */
export function sharedPortSupported(): boolean {
  return nativeReusePort() || reuseportBinding() !== null;
}

export class Front {
  private readonly server: net.Server;
  private readonly live = new Set<net.Socket>();

  private constructor(private readonly opts: FrontOptions) {
    this.server = net.createServer({ noDelay: true, allowHalfOpen: true }, (socket) => this.accept(socket));
    this.server.on('error', (err) => opts.log.error({ err }, 'public listener failed'));
  }

  /** Listens on host:port beside the other shards; the port must be fixed (main picks it). */
  static listen(opts: FrontOptions): Promise<Front> {
    const front = new Front(opts);
    return new Promise((resolve, reject) => {
      const done = (): void => {
        front.server.off('error', reject);
        resolve(front);
      };
      front.server.once('error', reject);
      if (nativeReusePort()) {
        front.server.listen({ host: opts.host, port: opts.port, backlog: 4096, reusePort: true } as net.ListenOptions, done);
        return;
      }
      const binding = reuseportBinding();
      if (!binding) {
        // One shard (main saw to it): a plain listen is all it needs.
        front.server.listen({ host: opts.host, port: opts.port, backlog: 4096 }, done);
        return;
      }
      let fd: number;
      try {
        fd = binding.socketNewSoReuseportFd(net.isIPv4(opts.host) ? 'ipv4' : 'ipv6', opts.port, opts.host);
      } catch (err) {
        reject(err as Error);
        return;
      }
      front.server.listen({ fd, backlog: 4096 }, done);
    });
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /** Stops accepting (a drain); open connections go on until they end. */
  stopAccepting(): void {
    this.server.close();
  }

  /** Every connection at once (the end of a shutdown). */
  destroyAll(): void {
    for (const s of this.live) s.destroy();
  }

  get connections(): number {
    return this.live.size;
  }

  private accept(socket: net.Socket): void {
    const limits = this.opts.limits ?? null;
    const admission = limits?.admitSocket() ?? 'open';
    socket.on('error', () => socket.destroy());
    // Out of descriptors for the public port: closed before it costs anything more.
    if (admission === 'full') return void socket.destroy();
    this.live.add(socket);
    socket.on('close', () => {
      this.live.delete(socket);
      limits?.releaseSocket();
    });
    const terms: ConnectionTerms = { ...DEFAULT_TERMS, ...this.opts.timeouts, limits, reserveOnly: admission === 'reserve' };
    const peer = canonicalIp(socket.remoteAddress ?? '');
    if (!this.opts.proxyProtocol) {
      if (!this.admitPeer(socket, peer)) return;
      return this.secure(socket, peer, terms);
    }
    if (this.opts.proxyFrom && !this.opts.proxyFrom.empty && !this.opts.proxyFrom.has(peer)) {
      this.opts.log.debug({ peer }, 'PROXY header from a peer not in --proxy-protocol-from: closed');
      return void socket.destroy();
    }
    this.readProxyHeader(socket, peer, terms);
  }

  /** Counts the connection for its client's address group; false (and closed) when that group is at its cap. */
  private admitPeer(socket: net.Socket, peer: string): boolean {
    const limits = this.opts.limits;
    if (!limits) return true;
    const group = limits.admitPeer(peer);
    if (group === false) {
      this.opts.log.debug({ peer }, 'too many open connections from this address: closed');
      socket.destroy();
      return false;
    }
    if (group !== null) socket.once('close', () => limits.releasePeer(group));
    return true;
  }

  /** --proxy-protocol: the client's address is the header's; the TLS or HTTP bytes follow it. */
  private readProxyHeader(socket: net.Socket, peer: string, terms: ConnectionTerms): void {
    let seen: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => socket.destroy(), HANDSHAKE_TIMEOUT_MS);
    socket.once('close', () => clearTimeout(timer));
    const onData = (chunk: Buffer): void => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const parsed = parseProxyHeader(seen.subarray(0, V2_MAX));
      if (parsed.kind === 'more') return;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.pause();
      if (parsed.kind === 'invalid') {
        // debug, not info: anyone who reaches the port can send these.
        this.opts.log.debug({ peer, why: parsed.why }, 'malformed PROXY header: connection closed');
        return void socket.destroy();
      }
      // No header at all: whatever it sends is answered 400 (its client address is unknown).
      const rest = parsed.kind === 'header' ? seen.subarray(parsed.length) : seen;
      if (rest.length > 0) socket.unshift(rest);
      const client = parsed.kind === 'header' && parsed.source ? canonicalIp(parsed.source.ip) : peer;
      if (!this.admitPeer(socket, client)) return;
      if (parsed.kind === 'none') return this.secure(socket, peer, terms, NO_PROXY_HEADER(this.opts.log));
      this.secure(socket, client, terms);
    };
    socket.on('data', onData);
  }

  private secure(socket: net.Socket, peer: string, terms: ConnectionTerms, host: FrontHost = this.opts.host_): void {
    const contexts = this.opts.tls;
    // A connection without its PROXY header is answered 400 by HTTP/1.1 alone.
    const h2 = host === this.opts.host_ ? (this.opts.h2 ?? null) : null;
    if (!contexts) {
      if (h2) return this.sniffPreface(socket, peer, terms, host, h2);
      new FrontConnection(socket, peer, host, terms);
      socket.resume();
      return;
    }
    const secure = new tls.TLSSocket(socket, {
      isServer: true,
      secureContext: contexts.contextFor(''),
      SNICallback: (name, cb) => cb(null, contexts.contextFor(name)),
      ...(h2 ? { ALPNCallback: ({ servername, protocols }: { servername: string; protocols: string[] }) => h2.alpn(servername, protocols) } : { ALPNProtocols: ['http/1.1'] }),
    });
    this.live.add(secure);
    secure.on('close', () => this.live.delete(secure));
    const timer = setTimeout(() => secure.destroy(), HANDSHAKE_TIMEOUT_MS);
    secure.on('error', () => {
      clearTimeout(timer);
      secure.destroy();
    });
    secure.once('secure', () => {
      clearTimeout(timer);
      if (h2 && secure.alpnProtocol === 'h2') return h2.serve(secure, peer);
      new FrontConnection(secure, peer, host, terms);
    });
    // The TLS layer reads the raw socket itself (bytes a PROXY header read left were taken in
    // by the TLSSocket's constructor): resuming the raw socket here would steal them.
  }

  /**
   * A plain port: a connection whose first bytes are the HTTP/2 preface is h2c with prior
   * knowledge (an `Upgrade: h2c` is never honoured: http-headers.ts), anything else HTTP/1.x.
   * The bytes read to decide go back to the socket for whoever reads it next.
   */
  private sniffPreface(socket: net.Socket, peer: string, terms: ConnectionTerms, host: FrontHost, h2: H2Front): void {
    let seen: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => socket.destroy(), terms.firstByteTimeoutMs);
    const onData = (chunk: Buffer): void => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const n = Math.min(seen.length, H2_PREFACE.length);
      const preface = seen.subarray(0, n).equals(H2_PREFACE.subarray(0, n));
      if (preface && seen.length < H2_PREFACE.length) return;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      socket.pause();
      socket.unshift(seen);
      if (preface) return h2.serve(socket, peer);
      new FrontConnection(socket, peer, host, terms);
      socket.resume();
    };
    const onClose = (): void => clearTimeout(timer);
    // The visitor's FIN before it said which protocol: no request to answer (allowHalfOpen
    // would keep the socket, and its slot, open otherwise).
    const onEnd = (): void => void socket.destroy();
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onClose);
    socket.resume();
  }
}
