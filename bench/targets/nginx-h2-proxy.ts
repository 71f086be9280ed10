// The h2 scenario's yardstick: nginx as an HTTP/2 → HTTP/1.1 reverse proxy, which is what a
// user puts in front of an HTTP/1.1 service to give visitors HTTP/2, and what burrowd's h2 front
// does too (HTTP/2 visitors, HTTP/1.1 toward the service). Debian's nginx (1.22: `listen … http2`),
// its own process apart from the origin's so its CPU is its own:
//
//   h2load ──TLS, ALPN h2──▶ nginx proxy ──HTTP/1.1, keep-alive pool──▶ nginx origin
//   h2load ──h2c (prior knowledge)──▶ nginx proxy ──HTTP/1.1──▶ nginx origin
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePorts, waitForHttp, waitForPort } from '../lib/net.js';
import { nginxMain, nginxTempPaths, runNginx, PATHS } from '../lib/origin.js';
import { tempDir, type Proc } from '../lib/procs.js';
import type { Certificate } from '../lib/tls.js';

export interface NginxH2Proxy {
  proc: Proc;
  tlsPort: number;
  h2cPort: number;
  describe: string;
}

/** Starts the proxy with `workers` worker processes (the shard count burrowd runs with). */
export async function startNginxH2Proxy(originPort: number, cert: Certificate, workers: number): Promise<NginxH2Proxy> {
  const dir = tempDir('nginx-h2-proxy');
  chmodSync(dir, 0o755);
  const [tlsPort, h2cPort] = (await freePorts(2)) as [number, number];
  // Upstream: a keep-alive pool (HTTP/1.1, no Connection header), no cap on requests per
  // connection (as for the origin); answers streamed as they come (proxy_buffering off: a
  // buffered 1 MiB answer would go through a temp file).
  const location = `    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_buffer_size 64k;
      proxy_buffers 8 64k;
    }`;
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `${nginxMain(dir, workers)}
http {
  access_log off;
  tcp_nodelay on;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
${nginxTempPaths(dir)}
  upstream origin {
    server 127.0.0.1:${originPort};
    keepalive 1024;
    keepalive_requests 100000000;
  }
  server {
    listen 127.0.0.1:${tlsPort} ssl http2 reuseport backlog=4096;
    ssl_certificate ${cert.certFile};
    ssl_certificate_key ${cert.keyFile};
    ssl_protocols TLSv1.2 TLSv1.3;
${location}
  }
  server {
    listen 127.0.0.1:${h2cPort} http2 reuseport backlog=4096;
${location}
  }
}
`,
  );
  const proc = runNginx(dir, conf);
  try {
    await waitForHttp({ port: tlsPort, tls: true }, PATHS.small.path, PATHS.small.bytes, 10_000, 'nginx h2 proxy (TLS)');
    await waitForPort(h2cPort, 10_000, 'nginx h2 proxy (h2c)');
  } catch (err) {
    // nginx says why on stderr (a refused directive): more use than "connection refused".
    const said = proc.stderr().trim().split('\n').pop();
    throw new Error(`${(err as Error).message}${said ? `; nginx: ${said}` : ''}`);
  }
  return {
    proc,
    tlsPort,
    h2cPort,
    describe: `Debian's nginx, ${workers} worker${workers === 1 ? '' : 's'} (burrowd's shard count), \`listen … ssl http2\` (same certificate, TLS 1.2 and 1.3) and \`listen … http2\` (h2c), \`proxy_pass\` to the origin's HTTP/1.1 port over an upstream keep-alive pool (\`proxy_http_version 1.1\`, \`keepalive 1024\`, no request cap), \`proxy_buffering off\` with 64 KiB buffers`,
  };
}
