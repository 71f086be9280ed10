// Many idle burrow tunnels from one process, for the idle scenario (one CLI process per
// tunnel would cost gigabytes of client memory at 10k). Uses the same client library the CLI
// uses (src/client/tunnel-client.ts); each TunnelClient is its own control connection, as each
// `burrow http` would be.
//   node burrow-farm.js <repoRoot> <serverUrl> <token> <originPort> <count> [--no-siblings]
// Prints "registered N" as tunnels come up, "failed <reason>" on the first failure, and
// "lost N" when tunnels drop (reconnecting or closed); stays up, holding them, until killed.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [repoRoot, server, token, originPortText, countText, flag] = process.argv.slice(2);
/** the cluster scenario's tunnels live on one node only (no second connection on another) */
const siblings = flag !== '--no-siblings';
const originPort = Number(originPortText);
const count = Number(countText);
/** Concurrent registrations: enough to be quick, few enough not to look like a flood. */
const CONCURRENCY = 64;

interface TunnelClientLike {
  start(): Promise<{ id: string; url: string }>;
  on(event: string, fn: (...args: unknown[]) => void): unknown;
}
type TunnelClientCtor = new (opts: {
  server: string;
  token: string;
  type: 'http' | 'tcp';
  local: { host: string; port: number };
  siblings?: boolean;
}) => TunnelClientLike;

const mod = (await import(pathToFileURL(join(repoRoot!, 'dist', 'src', 'client', 'tunnel-client.js')).href)) as { TunnelClient: TunnelClientCtor };
const clients: TunnelClientLike[] = [];
let registered = 0;
let next = 0;
let reported = 0;
let lost = 0;
let lostReported = 0;

async function worker(): Promise<void> {
  while (next < count) {
    next++;
    const c = new mod.TunnelClient({ server: server!, token: token!, type: 'http', local: { host: '127.0.0.1', port: originPort }, siblings });
    c.on('error', () => undefined);
    // A tunnel that drops is no longer idle load; the harness refuses figures taken after one.
    c.on('reconnecting', () => lost++);
    c.on('closed', () => lost++);
    clients.push(c);
    await c.start();
    registered++;
  }
}

const timer = setInterval(() => {
  if (lost !== lostReported) {
    lostReported = lost;
    process.stdout.write(`lost ${lost}\n`);
  }
  if (registered !== reported) {
    reported = registered;
    process.stdout.write(`registered ${registered}\n`);
  }
}, 200);
try {
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, count) }, worker));
} catch (err) {
  process.stdout.write(`failed ${(err as Error).message.split('\n')[0]}\n`);
}
void timer;
