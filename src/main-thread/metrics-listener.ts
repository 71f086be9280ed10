import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { problemOf, type ProblemCode } from '../errors.js';
import type { Logger } from '../log.js';
import type { MetricsText } from './metrics.js';

// --metrics-addr HOST:PORT: GET /metrics without a key, on a listener of its own (main thread),
// for a Prometheus that scrapes a private address. Nothing else is served there.

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

export function listenMetrics(host: string, port: number, render: () => Promise<MetricsText>, log: Logger): Promise<MetricsListener> {
  const server = http.createServer((req, res) => {
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
