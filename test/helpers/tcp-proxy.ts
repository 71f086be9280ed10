import net from 'node:net';

// A TCP relay the test controls, between burrowd and its database: it passes bytes, refuses
// connections (stops listening and drops every open one: ECONNREFUSED / ECONNRESET), or
// freezes (relays nothing, accepts connections without connecting them upstream: a hung link).

interface Pair {
  client: net.Socket;
  upstream: net.Socket | null;
}

export class TcpProxy {
  private readonly pairs = new Set<Pair>();
  private frozen = false;
  private server: net.Server;

  private constructor(
    private target: { host: string; port: number },
    public port: number,
  ) {
    this.server = this.makeServer();
  }

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const p = new TcpProxy(target, 0);
    await p.listen();
    return p;
  }

  /** `url` with its host and port replaced by this proxy's. */
  urlFor(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  /** Connections are refused from now on; open ones are reset. */
  async refuse(): Promise<void> {
    // close() calls back only once every connection is gone: drop them first.
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    for (const p of this.pairs) this.drop(p);
    await closed;
  }

  /** New connections go to `target` from now on (a server that came back on another port). */
  retarget(target: { host: string; port: number }): void {
    this.target = target;
  }

  /** Nothing passes any more, in either direction; new connections hang. */
  freeze(): void {
    this.frozen = true;
    for (const p of this.pairs) {
      p.client.pause();
      p.upstream?.pause();
    }
  }

  /** Back to relaying: listens again on the same port, frozen connections go on. */
  async restore(): Promise<void> {
    if (!this.server.listening) {
      this.server = this.makeServer();
      await this.listen();
    }
    this.frozen = false;
    for (const p of this.pairs) {
      if (p.client.destroyed) this.drop(p);
      else if (!p.upstream) this.connectUpstream(p);
      else {
        p.client.resume();
        p.upstream.resume();
      }
    }
  }

  async close(): Promise<void> {
    const closed = this.server.listening ? new Promise<void>((r) => this.server.close(() => r())) : null;
    for (const p of this.pairs) this.drop(p);
    await closed;
  }

  private makeServer(): net.Server {
    return net.createServer((client) => {
      const p: Pair = { client, upstream: null };
      this.pairs.add(p);
      client.on('error', () => this.drop(p));
      client.on('close', () => this.drop(p));
      client.on('data', (d: Buffer) => p.upstream?.write(d));
      if (this.frozen) client.pause();
      else this.connectUpstream(p);
    });
  }

  private connectUpstream(p: Pair): void {
    const up = net.connect(this.target);
    p.upstream = up;
    up.on('data', (d: Buffer) => p.client.write(d));
    up.on('error', () => this.drop(p));
    up.on('close', () => this.drop(p));
    p.client.resume();
  }

  private drop(p: Pair): void {
    if (!this.pairs.delete(p)) return;
    p.client.resetAndDestroy();
    p.upstream?.destroy();
  }

  private listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.port, '127.0.0.1', () => {
        this.server.off('error', reject);
        this.port = (this.server.address() as net.AddressInfo).port;
        resolve();
      });
    });
  }
}
