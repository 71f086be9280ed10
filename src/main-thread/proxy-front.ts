import net from 'node:net';
import tls from 'node:tls';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../log.js';
import type { CertPair } from '../http/tls.js';
import { canonicalIp } from '../http/client-address.js';
import { encodeProxyV2, parseProxyHeader, V2_MAX, type ProxySource } from '../protocol/proxy-header.js';

// --proxy-protocol: the public port is this front's, in the main thread. It reads the PROXY
// header (v1 or v2) a load balancer writes first, terminates TLS when --tls-cert is set, and
// relays the connection to a shard over its unix socket, prefixed with a v2 header that names
// the client (uWS parses v2 only, and only inside TLS, where no load balancer puts it).
//
//   balancer ─TCP─▶ ProxyFront (PROXY v1|v2 → [TLS]) ─unix socket─▶ shard uWS App (PROXY v2 → HTTP)
//
// A connection that does not start with a PROXY header is relayed without one: the shard
// answers its request with 400 (requireClientAddress). A malformed header closes it at once.

/** The header must have arrived by then, and the TLS handshake finished by the same again. */
const HEADER_TIMEOUT_MS = 5_000;
/** Shards tried for one connection before it is given up (one may be restarting). */
const CONNECT_ATTEMPTS = 3;

export interface FrontOptions {
  host: string;
  port: number;
  /** Certificates to terminate TLS with (default first), or null for plain HTTP. */
  certificates: CertPair[] | null;
  /** Unix socket paths of the shards, one per shard index. */
  shardPaths: string[];
  log: Logger;
}

export class ProxyFront {
  private readonly server: net.Server;
  private contexts = new Map<string, tls.SecureContext>();
  private readonly live = new Set<net.Socket>();
  private next = 0;

  private constructor(private readonly opts: FrontOptions) {
    this.server = net.createServer({ noDelay: true }, (socket) => this.accept(socket));
    if (opts.certificates) this.setCertificates(opts.certificates);
  }

  static listen(opts: FrontOptions): Promise<ProxyFront> {
    const front = new ProxyFront(opts);
    return new Promise((resolve, reject) => {
      front.server.once('error', reject);
      front.server.listen({ host: opts.host, port: opts.port, backlog: 4096 }, () => {
        front.server.off('error', reject);
        front.server.on('error', (err) => opts.log.error({ err }, 'PROXY front listener failed'));
        resolve(front);
      });
    });
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /** SIGHUP: new handshakes get these; connections already open keep theirs. */
  setCertificates(pairs: CertPair[]): void {
    const contexts = new Map<string, tls.SecureContext>();
    for (const p of pairs) {
      contexts.set(p.serverName ?? '', tls.createSecureContext({ cert: readFileSync(p.certFile), key: readFileSync(p.keyFile) }));
    }
    this.contexts = contexts;
  }

  private contextFor(name: string): tls.SecureContext {
    const n = name.toLowerCase();
    const exact = this.contexts.get(n);
    if (exact && n !== '') return exact;
    const dot = n.indexOf('.');
    const wildcard = dot > 0 ? this.contexts.get(`*${n.slice(dot)}`) : undefined;
    return wildcard ?? this.contexts.get('')!;
  }

  /** Stops accepting; open connections end with the shards' (a drain closes them). */
  stopAccepting(): void {
    this.server.close();
  }

  /** Every relayed connection at once (the end of a shutdown). */
  destroyAll(): void {
    for (const s of this.live) s.destroy();
  }

  private accept(socket: net.Socket): void {
    this.live.add(socket);
    socket.on('close', () => this.live.delete(socket));
    socket.on('error', () => socket.destroy());
    const peer: ProxySource = { ip: canonicalIp(socket.remoteAddress ?? ''), port: socket.remotePort ?? 0 };
    let seen: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => {
      this.opts.log.debug({ peer: peer.ip }, 'no PROXY header in time: closing');
      socket.destroy();
    }, HEADER_TIMEOUT_MS);
    socket.on('close', () => clearTimeout(timer));
    const onData = (chunk: Buffer): void => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const parsed = parseProxyHeader(seen.subarray(0, V2_MAX));
      if (parsed.kind === 'more') return;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.pause();
      if (parsed.kind === 'invalid') {
        // debug, not info: anyone who reaches the port can send these.
        this.opts.log.debug({ peer: peer.ip, why: parsed.why }, 'malformed PROXY header: connection closed');
        return void socket.destroy();
      }
      // No header: relayed bare, so the shard answers 400 (its client address is unknown).
      const source = parsed.kind === 'header' ? parsed.source ?? peer : null;
      const rest = parsed.kind === 'header' ? seen.subarray(parsed.length) : seen;
      if (this.contexts.size === 0) return this.relay(socket, source, rest);
      // TLS bytes already read go back to the socket, where the TLS layer reads them first.
      if (rest.length > 0) socket.unshift(rest);
      this.terminateTls(socket, source);
    };
    socket.on('data', onData);
  }

  private terminateTls(raw: net.Socket, source: ProxySource | null): void {
    const secure = new tls.TLSSocket(raw, {
      isServer: true,
      secureContext: this.contextFor(''),
      SNICallback: (name, cb) => cb(null, this.contextFor(name)),
      ALPNProtocols: ['http/1.1'],
    });
    this.live.add(secure);
    secure.on('close', () => this.live.delete(secure));
    const timer = setTimeout(() => secure.destroy(), HEADER_TIMEOUT_MS);
    secure.on('close', () => clearTimeout(timer));
    secure.on('error', (err) => {
      clearTimeout(timer);
      this.opts.log.debug({ err: err.message }, 'TLS failed at the PROXY front');
      secure.destroy();
    });
    secure.once('secure', () => {
      clearTimeout(timer);
      secure.pause();
      this.relay(secure, source, Buffer.alloc(0));
    });
  }

  private relay(client: net.Socket, source: ProxySource | null, first: Buffer): void {
    const dest: ProxySource = { ip: canonicalIp(client.localAddress ?? '127.0.0.1'), port: client.localPort ?? 0 };
    const tryShard = (attempt: number): void => {
      const path = this.opts.shardPaths[this.next++ % this.opts.shardPaths.length]!;
      const up = net.connect({ path });
      up.once('error', (err) => {
        if (!client.destroyed && attempt + 1 < Math.min(CONNECT_ATTEMPTS, this.opts.shardPaths.length + 1)) return tryShard(attempt + 1);
        this.opts.log.warn({ err: err.message }, 'no shard took a connection from the PROXY front');
        client.destroy();
      });
      up.once('connect', () => {
        up.removeAllListeners('error');
        if (client.destroyed) return void up.destroy();
        up.on('error', () => client.destroy());
        client.on('close', () => up.destroy());
        up.on('close', () => client.destroy());
        if (source) up.write(encodeProxyV2(source, dest));
        if (first.length > 0) up.write(first);
        client.pipe(up);
        up.pipe(client);
        client.resume();
      });
    };
    tryShard(0);
  }
}

/**
 * The shards' unix sockets, in a directory only this user can enter (a local process must not
 * forge client addresses): one path per shard, and `remove` for the end of a shutdown.
 */
export function shardSockets(workers: number): { paths: string[]; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'burrowd-front-'));
  return {
    paths: Array.from({ length: workers }, (_, i) => join(dir, `shard-${i}.sock`)),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
