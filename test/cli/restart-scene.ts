import { createServer, type Server } from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { spawnBurrow, tempDir } from './harness.js';

/**
 * What the reconnect tests share: a burrowd the test stops and starts again on the same port and
 * database (`first`, then `second`), a local web service, a config home, and the `burrow` child.
 */
export class RestartScene {
  first!: TestServer;
  second: TestServer | null = null;
  home!: { dir: string; remove: () => void };
  web!: Server;
  child: ReturnType<typeof spawnBurrow> | null = null;

  async setUp(): Promise<void> {
    this.first = await startServer();
    this.home = tempDir();
    this.web = createServer((req, res) => res.end(`ok ${req.url}`));
    await new Promise<void>((r) => this.web.listen(0, '127.0.0.1', r));
  }

  /** The restart: a new burrowd on the first one's port and database (stop the first before). */
  async startSecond(): Promise<TestServer> {
    this.second = await startServer({ db: this.first.db, args: ['--port', String(this.first.port)] });
    return this.second;
  }

  get webPort(): number {
    return (this.web.address() as { port: number }).port;
  }

  async tearDown(): Promise<void> {
    this.child?.kill('SIGKILL');
    this.web?.close();
    await this.second?.stop();
    await this.first?.stop().catch(() => null);
    this.home?.remove();
  }
}
