// The main port before the shards bind it, and how start-up names it.
import { createServer } from 'node:net';
import type { Logger } from './log.js';

/**
 * Binds the port once without SO_REUSEPORT and lets it go. The shards bind it with
 * SO_REUSEPORT, which the kernel also grants when another process (a second burrowd) holds
 * the port the same way; this probe is refused by any listener already there.
 */
export function probePort(host: string, port: number): Promise<NodeJS.ErrnoException | null> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => resolve(err));
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve(null)));
  });
}

/**
 * Stops the start (exit 1) when the port is taken: a pino error and one line on stderr.
 * `release` closes what start-up has opened so far (the embedded database's files).
 */
export async function assertPortFree(host: string, port: number, log: Logger, release?: () => Promise<unknown>): Promise<void> {
  const err = await probePort(host, port);
  if (!err) return;
  const where = `port ${port} on ${host}`;
  const why =
    err.code === 'EADDRINUSE' ? `${where} is already in use (another burrowd or another program): stop it or choose another --port`
    : err.code === 'EACCES' ? `not permitted to listen on ${where} (ports below 1024 need privileges): choose another --port`
    : err.code === 'EADDRNOTAVAIL' ? `cannot listen on ${where}: no local interface has that address (--host)`
    : `cannot listen on ${where}: ${err.message}`;
  log.error({ host, port, code: err.code }, why);
  process.stderr.write(`burrowd: ${why}\n`);
  await release?.().catch((e: unknown) => log.error({ err: e }, 'error while stopping'));
  process.exit(1);
}

/**
 * The fetch standard's "bad ports" (https://fetch.spec.whatwg.org/#bad-port): browsers, and
 * fetch clients such as undici (the burrow CLI's), refuse to connect to them. burrowd refuses
 * to listen on one (its port serves browsers and the CLI) instead of starting and then being
 * "unreachable" for every client.
 */
const BROWSER_BLOCKED_PORTS = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110,
  111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532,
  540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061,
  6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);

export function browserBlockedPort(port: number): boolean {
  return BROWSER_BLOCKED_PORTS.has(port);
}

/** The bound address as a URL (IPv6 in brackets). */
export function listenAddress(host: string, port: number, tls = false): string {
  return `${tls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/**
 * What the bind address means, for the start-up line; '' for a specific public address. A
 * loopback bind (`npm start`, a first try) says how to listen publicly.
 */
export function bindScope(host: string): string {
  if (host === '0.0.0.0') return 'all IPv4 interfaces';
  if (host === '::') return 'all interfaces';
  if (host === 'localhost' || host === '::1' || /^127\./.test(host)) return 'this machine only; --host 0.0.0.0 listens on every interface';
  return '';
}
