// The floor: a plain reverse proxy written with node:http (node-proxy-server.ts), one process
// per exposed service, no tunnel. Any tunnel written in Node parses the visitor's request and
// sends it on to the origin at least once, as this does; what burrow spends above it is what
// its tunnel (framing, multiplexing, the second hop through the CLI) costs.
//
//   load tool ──HTTP──▶ node-proxy :port ──HTTP, keep-alive pool──▶ origin
//   load tool ──HTTPS──▶ node-proxy :port (TLS ends here, the run's certificate) ──HTTP──▶ origin
//
// HTTP only: it has no TCP forwarding and no idle tunnels, so tcp, idle and churn leave it out
// (HTTP_ONLY_TARGETS in target.ts).
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { stop, waitForOutput, descendants } from '../lib/procs.js';
import { startNode, withoutProbeLines, type ProbeSettings, type Probed } from '../lib/probes.js';
import { Unavailable, type Target } from './target.js';
import type { Certificate } from '../lib/tls.js';

const START_TIMEOUT_MS = 10_000;

export function nodeProxyTarget(opts: { tls?: Certificate; probes?: ProbeSettings } = {}): Target {
  const serverJs = fileURLToPath(new URL('./node-proxy-server.js', import.meta.url));
  if (!existsSync(serverJs)) throw new Unavailable('node-proxy', `not built: ${serverJs} missing (npx tsc -p .)`);
  const proxies: Probed[] = [];

  return {
    name: 'node-proxy',
    terminatesTls: opts.tls !== undefined,
    describe: `node ${process.version} bench/targets/node-proxy-server.ts: one process per exposed service, http${opts.tls ? 's' : ''}.createServer on 127.0.0.1${opts.tls ? ' with <tmp>/cert.pem (TLS ends here)' : ''} → http.request to the plain origin over an Agent({ keepAlive: true, maxSockets: 256, noDelay: true }), req.pipe(upstream), status and headers copied back and the body piped (hop-by-hop headers dropped, X-Forwarded-For/-Proto/-Host added)`,
    async expose(kind, originPort) {
      if (kind !== 'http') throw new Error('node-proxy is an HTTP reverse proxy: no TCP forwarding');
      const probed = startNode('node-proxy', [serverJs, String(originPort), ...(opts.tls ? [opts.tls.certFile, opts.tls.keyFile] : [])], opts.probes);
      proxies.push(probed);
      const port = await waitForOutput(probed.proc, 'stdout', (t) => /^listening (\d+)$/m.exec(withoutProbeLines(t))?.[1], START_TIMEOUT_MS, 'its listening port');
      return { port: Number(port), ...(opts.tls ? { tls: true } : {}) };
    },
    // The proxy is the whole "server side"; there is no client side (clientPids: none).
    serverPids: () => proxies.filter((p) => p.proc.isRunning()).flatMap((p) => [p.proc.pid, ...descendants(p.proc.pid)]),
    clientPids: () => [],
    probes: () => ({ server: proxies.filter((p) => p.proc.isRunning()), client: [] }),
    closeTunnels: async () => {
      await Promise.all(proxies.splice(0).map((p) => stop(p.proc)));
    },
    close: async () => {
      await Promise.all(proxies.splice(0).map((p) => stop(p.proc)));
    },
  };
}
