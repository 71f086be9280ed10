// The bare relay: the floor under a Node tunnel. Two processes per exposed service, as a
// tunnel has: an edge (relay-edge.ts) that takes visitors and one TCP control connection, and
// a client (relay-client.ts) that dials the edge and the origin. 9-byte frame heads, bytes
// passed through untouched, llhttp only to find where a message ends, writes to the control
// connection coalesced once per turn of the event loop (relay-frames.ts).
//
//   load tool ──HTTP──▶ relay-edge :port ══ one TCP connection, Open/Data/End frames ══▶ relay-client ──keep-alive pool──▶ origin
//
// Whatever a Node tunnel does beyond this (access rules, limits, flow control, the inspector,
// a WebSocket, TLS) is its own cost: burrowd against the edge and the CLI against the client.
// HTTP only (HTTP_ONLY_TARGETS in target.ts).
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { stop, waitForOutput, descendants } from '../lib/procs.js';
import { startNode, withoutProbeLines, type ProbeSettings, type Probed } from '../lib/probes.js';
import { Unavailable, type Target } from './target.js';

const START_TIMEOUT_MS = 10_000;

export function relayTarget(opts: { probes?: ProbeSettings } = {}): Target {
  const edgeJs = fileURLToPath(new URL('./relay-edge.js', import.meta.url));
  const clientJs = fileURLToPath(new URL('./relay-client.js', import.meta.url));
  for (const f of [edgeJs, clientJs]) if (!existsSync(f)) throw new Unavailable('relay', `not built: ${f} missing (npx tsc -p .)`);
  const edges: Probed[] = [];
  const clients: Probed[] = [];
  const running = (ps: Probed[]) => ps.filter((p) => p.proc.isRunning());
  // under perf, the node process is perf's child
  const pids = (ps: Probed[]) => running(ps).flatMap((p) => [p.proc.pid, ...descendants(p.proc.pid)]);
  const out = (t: string) => withoutProbeLines(t);

  return {
    name: 'relay',
    describe: `node ${process.version} bench/targets/relay-edge.ts + relay-client.ts (+ relay-frames.ts): per exposed service an edge process (visitors on 127.0.0.1, one TCP control connection) and a client process (dials the edge and the origin, a keep-alive pool to the origin); a stream per request, 9-byte frame heads (type, stream id, length), bytes untouched, src/protocol/http1-parser.ts (llhttp) only to find where each request and answer ends, control writes corked for one event-loop turn; no flow control beyond pausing origins while 1 MiB waits on the control connection`,
    async expose(kind, originPort) {
      if (kind !== 'http') throw new Error('the relay forwards HTTP only');
      const edge = startNode('relay-edge', [edgeJs], opts.probes);
      edges.push(edge);
      const control = await waitForOutput(edge.proc, 'stdout', (t) => /^control (\d+)$/m.exec(out(t))?.[1], START_TIMEOUT_MS, 'its control port');
      const port = await waitForOutput(edge.proc, 'stdout', (t) => /^listening (\d+)$/m.exec(out(t))?.[1], START_TIMEOUT_MS, 'its visitor port');
      const client = startNode('relay-client', [clientJs, control, String(originPort)], opts.probes);
      clients.push(client);
      await waitForOutput(client.proc, 'stdout', (t) => (/^connected$/m.test(out(t)) ? true : null), START_TIMEOUT_MS, 'its control connection');
      return { port: Number(port) };
    },
    serverPids: () => pids(edges),
    clientPids: () => pids(clients),
    probes: () => ({ server: running(edges), client: running(clients) }),
    closeTunnels: async () => {
      await Promise.all(clients.splice(0).map((p) => stop(p.proc)));
      await Promise.all(edges.splice(0).map((p) => stop(p.proc)));
    },
    close: async () => {
      await Promise.all(clients.splice(0).map((p) => stop(p.proc)));
      await Promise.all(edges.splice(0).map((p) => stop(p.proc)));
    },
  };
}
