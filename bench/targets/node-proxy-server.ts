// The node-proxy target's process: a plain reverse proxy written with node:http and nothing
// else — the floor any tunnel written in Node must beat (bench/README.md "Targets").
//   node node-proxy-server.js <originPort> [<certFile> <keyFile>]
// Listens on 127.0.0.1 (a port the kernel picks; with a certificate, HTTPS: TLS ends here, as
// it does at burrowd --tls-cert) and forwards every request with http.request over a
// keep-alive Agent to 127.0.0.1:<originPort> (plain HTTP). Prints "listening <port>" on stdout
// once it accepts connections.
//
//   load tool ──HTTP(S)──▶ node-proxy :port ──HTTP, keep-alive pool──▶ origin
//
// What it does per request is what every HTTP tunnel has to do at least once: parse the
// visitor's request, drop hop-by-hop headers, add X-Forwarded-For/-Proto/-Host (burrowd adds
// them too, src/protocol/http-headers.ts), send it upstream on a pooled connection, stream the
// body both ways with backpressure (pipe), and copy the status and headers back.
import { createServer as createHttpServer, request, Agent, type IncomingMessage, type ServerResponse, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';

const [originPortText, certFile, keyFile] = process.argv.slice(2);
const ORIGIN_HOST = '127.0.0.1';
const ORIGIN_PORT = Number(originPortText);
if (!Number.isInteger(ORIGIN_PORT) || ORIGIN_PORT < 1 || ORIGIN_PORT > 65535) {
  console.error('usage: node node-proxy-server.js <originPort> [<certFile> <keyFile>]');
  process.exit(2);
}
const tls = certFile !== undefined && keyFile !== undefined;

/**
 * Upstream connections: kept alive and reused; up to 256 per origin (the bench's highest
 * connection count, so no request waits for a free socket); Nagle off like every other hop.
 */
const agent = new Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 256, noDelay: true });

/** RFC 9110 §7.6.1: meaningful for one connection only, never forwarded. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-authenticate', 'proxy-authorization']);

function endToEnd(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  // Plus whatever the Connection header names as hop-by-hop for this message.
  const named = String(headers.connection ?? '')
    .toLowerCase()
    .split(',')
    .map((s) => s.trim());
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || named.includes(name)) continue;
    out[name] = value;
  }
  return out;
}

function handle(req: IncomingMessage, res: ServerResponse): void {
  const headers = endToEnd(req.headers);
  const peer = req.socket.remoteAddress ?? '';
  const xff = req.headers['x-forwarded-for'];
  headers['x-forwarded-for'] = xff ? `${Array.isArray(xff) ? xff.join(', ') : xff}, ${peer}` : peer;
  headers['x-forwarded-proto'] = tls ? 'https' : 'http';
  if (req.headers.host) headers['x-forwarded-host'] = req.headers.host;

  const upstream = request({ host: ORIGIN_HOST, port: ORIGIN_PORT, method: req.method, path: req.url, headers, agent }, (up) => {
    res.writeHead(up.statusCode ?? 502, up.statusMessage, endToEnd(up.headers));
    up.pipe(res);
    up.on('error', () => res.destroy());
  });
  upstream.on('error', (err) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = `bad gateway: ${err.message}\n`;
    res.writeHead(502, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  // The visitor went away mid-response: stop pulling from the origin (the socket is not reused).
  res.on('close', () => {
    if (!res.writableFinished) upstream.destroy();
  });
  req.pipe(upstream);
}

// noDelay is Node's default for servers already; spelled out, as on the Agent.
const server = tls ? createHttpsServer({ cert: readFileSync(certFile), key: readFileSync(keyFile), noDelay: true }, handle) : createHttpServer({ noDelay: true }, handle);
// wrk keeps its connections through a run; pauses between warm-up and run must not close them.
server.keepAliveTimeout = 65_000;
server.on('clientError', (_err, socket) => socket.destroy());
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`);
});
for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.on(sig, () => {
    server.close();
    agent.destroy();
    process.exit(0);
  });
}
