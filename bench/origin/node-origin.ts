// Fallback HTTP origin when nginx is not installed: serves the same three paths as the nginx
// origin from memory, keep-alive, no logging. Run as its own process: `node node-origin.js PORT`.
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';

const port = Number(process.argv[2]);
const small = Buffer.from('hello, burrow\n');
const oneMiB = randomBytes(1 << 20);
const BIG_MIB = 64;

const server = createServer((req, res) => {
  switch (req.url) {
    case '/small':
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': small.length });
      res.end(small);
      return;
    case '/1m':
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': oneMiB.length });
      res.end(oneMiB);
      return;
    case '/big': {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': oneMiB.length * BIG_MIB });
      let sent = 0;
      // Honour backpressure: write the next MiB only when the socket drained the last one.
      const next = (): void => {
        while (sent < BIG_MIB) {
          sent++;
          if (sent === BIG_MIB) {
            res.end(oneMiB);
            return;
          }
          if (!res.write(oneMiB)) {
            res.once('drain', next);
            return;
          }
        }
      };
      next();
      return;
    }
    default:
      res.writeHead(404).end();
  }
});
server.keepAliveTimeout = 300_000;
server.headersTimeout = 301_000;
server.requestTimeout = 0;
server.maxRequestsPerSocket = 0;
server.on('connection', (s) => s.setNoDelay(true));
server.listen(port, '127.0.0.1');
