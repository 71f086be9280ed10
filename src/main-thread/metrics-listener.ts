import http from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { Config } from '../config.js';
import { problemOf, type ProblemCode } from '../errors.js';
import type { Logger } from '../log.js';
import type { MetricsText } from './metrics.js';

// --metrics-addr HOST:PORT: GET /metrics without a key, on a listener of its own (main thread),
// for a Prometheus that scrapes a private address. Nothing else is served there.
//
// Only for the Host names it is meant for: an IP address, localhost, or a name the server is
// configured or known by (`names`). Any other name is a browser on a page whose name an
// attacker pointed at this address (DNS rebinding), reading the metrics as a same-origin page.

/** Requests here are tiny: a slow or stuck client is cut early. */
const REQUEST_TIMEOUT_MS = 10_000;

export interface MetricsListener {
  /** The bound address (port 0 resolved). */
  host: string;
  port: number;
  close(): Promise<void>;
}

function problem(res: http.ServerResponse, code: ProblemCode, detail: string, headers: Record<string, string> = {}): void {
  const p = problemOf(code, detail);
  const body = JSON.stringify(p);
  res.writeHead(p.status, { 'content-type': 'application/problem+json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** The name of a Host header value: port, IPv6 brackets and a trailing dot taken off, lower case. */
function hostName(value: string): string {
  const v = value.trim().toLowerCase();
  const name = v.startsWith('[') ? v.slice(1, v.indexOf(']') < 0 ? v.length : v.indexOf(']')) : v.replace(/:\d*$/, '');
  return name.endsWith('.') ? name.slice(0, -1) : name;
}

/** Whether a request with this Host is for this listener (none: not a browser's, which always sends one). */
export function metricsHostAllowed(host: string | undefined, names: ReadonlySet<string>): boolean {
  if (host === undefined) return true;
  const name = hostName(host);
  return isIP(name) !== 0 || name === 'localhost' || names.has(name);
}

/** The names the server is configured or known by: its domain, base URL, node URL and machine name. */
export function metricsHostNames(config: Pick<Config, 'domain' | 'baseUrl' | 'nodeUrl'>): string[] {
  const names = [config.domain, hostname(), hostname().split('.')[0]!];
  for (const url of [config.baseUrl, config.nodeUrl]) {
    if (url) names.push(new URL(url).hostname);
  }
  return names.filter((n) => n !== '');
}

/** `names`: the host names besides IP addresses and localhost it answers for (lower case). */
export function listenMetrics(host: string, port: number, render: () => Promise<MetricsText>, log: Logger, names: readonly string[] = []): Promise<MetricsListener> {
  const known = new Set([host, ...names].map(hostName));
  const server = http.createServer((req, res) => {
    if (!metricsHostAllowed(req.headers.host, known)) {
      return problem(res, 'not-found', 'this listener serves metrics only under its IP address, localhost or the names the server is configured with');
    }
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics') return problem(res, 'not-found', `no such endpoint: ${req.method} ${path}; metrics are at /metrics`);
    if (req.method !== 'GET' && req.method !== 'HEAD') return problem(res, 'method-not-allowed', 'this path accepts GET', { allow: 'GET, HEAD' });
    render().then(
      ({ contentType, text }) => {
        res.writeHead(200, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) });
        res.end(req.method === 'HEAD' ? undefined : text);
      },
      (err: unknown) => {
        log.warn({ err }, 'metrics could not be collected');
        problem(res, 'unavailable', 'metrics could not be collected; try again shortly');
      },
    );
  });
  server.requestTimeout = REQUEST_TIMEOUT_MS;
  server.headersTimeout = REQUEST_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => {
      server.off('error', reject);
      server.on('error', (err) => log.error({ err }, 'metrics listener error'));
      const bound = server.address() as AddressInfo;
      resolve({
        host,
        port: bound.port,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      });
    });
  });
}
