// TCP origin for the idle scenario: accepts connections and holds them open without reading
// or writing. Prints its port as the first stdout line, then "held N" (connections open now)
// whenever that changed (at most every 200 ms), so the harness can wait — by polling the output file —
// until every proxied connection has reached it. Run: `node tcp-sink.js`.
import { createServer, type Socket } from 'node:net';

const held = new Set<Socket>();
const server = createServer((s) => {
  held.add(s);
  s.on('error', () => {});
  s.on('close', () => held.delete(s));
});
server.maxConnections = 100_000;
server.listen(0, '127.0.0.1', 4096, () => {
  const addr = server.address();
  process.stdout.write(`${typeof addr === 'object' && addr ? addr.port : 0}\n`);
});
let reported = 0;
setInterval(() => {
  if (held.size !== reported) {
    reported = held.size;
    process.stdout.write(`held ${reported}\n`);
  }
}, 200);
