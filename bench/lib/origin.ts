// The local HTTP service every target forwards to. nginx (Debian's nginx-light, one worker,
// keep-alive without a request cap, static files with sendfile) when present, because it costs
// the shared cores least; otherwise a small Node origin (bench/origin/node-origin.ts). For the
// https scenario nginx also listens with TLS on a second port (same files, same settings); for
// the h2 scenario that listener offers h2 by ALPN and a third one speaks h2c (prior knowledge).
//
//   GET /small  14-byte body          GET /1m  1 MiB body          GET /big  64 MiB body (HOL bulk)
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { start, tempDir, type Proc } from './procs.js';
import { freePort, waitForHttp, waitForPort } from './net.js';
import { toolPath } from './tools.js';
import type { Certificate } from './tls.js';

export const SMALL_BODY = 'hello, burrow\n';
export const PATHS = {
  small: { path: '/small', bytes: SMALL_BODY.length },
  '1m': { path: '/1m', bytes: 1 << 20 },
  big: { path: '/big', bytes: 64 << 20 },
} as const;

export interface Origin {
  kind: 'nginx' | 'node';
  /** Plain HTTP. */
  port: number;
  /** HTTPS with the given certificate (nginx only), when asked for; with `h2`, ALPN offers h2 too. */
  tlsPort?: number;
  /** With `h2`: HTTP/2 in clear with prior knowledge (h2c), nothing else. */
  h2cPort?: number;
  proc: Proc;
}

/**
 * Starts the origin; with `tls`, nginx also serves the same files over HTTPS on `tlsPort`; with
 * `h2` as well, that listener offers h2 by ALPN and `h2cPort` serves h2c.
 */
export async function startOrigin(prefer: 'nginx' | 'node', tls?: Certificate, h2 = false): Promise<Origin> {
  const kind = prefer === 'nginx' && toolPath('nginx') ? 'nginx' : 'node';
  if (tls && kind !== 'nginx') throw new Error('the HTTPS origin is nginx: install nginx-light (and do not pass --origin node)');
  const port = await freePort();
  const tlsPort = tls ? await freePort() : undefined;
  const h2cPort = tls && h2 ? await freePort() : undefined;
  const proc = kind === 'nginx' ? startNginx(port, tls && tlsPort ? { ...tls, port: tlsPort } : undefined, h2cPort) : startNode(port);
  await waitForHttp({ port }, PATHS.small.path, PATHS.small.bytes, 10_000, `${kind} origin`);
  if (tlsPort) await waitForHttp({ port: tlsPort, tls: true }, PATHS.small.path, PATHS.small.bytes, 10_000, `${kind} origin (TLS)`);
  if (h2cPort) await waitForPort(h2cPort, 10_000, `${kind} origin (h2c)`);
  return { kind, port, tlsPort, h2cPort, proc };
}

function startNginx(port: number, tls?: Certificate & { port: number }, h2cPort?: number): Proc {
  const dir = tempDir('nginx');
  // Run as root, nginx's workers drop to nobody: they must be able to read the files.
  chmodSync(dir, 0o755);
  const www = join(dir, 'www');
  mkdirSync(www, { mode: 0o755 });
  writeFileSync(join(www, 'small'), SMALL_BODY);
  // Random bytes: nothing on the path may compress or dedupe them.
  writeFileSync(join(www, '1m'), randomBytes(PATHS['1m'].bytes));
  const chunk = randomBytes(1 << 20);
  writeFileSync(join(www, 'big'), Buffer.concat(Array.from({ length: PATHS.big.bytes >> 20 }, () => chunk)));
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `${nginxMain(dir, 1)}
http {
  access_log off;
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  # nginx closes a keep-alive connection after 1000 requests by default; wrk would then pay
  # reconnects the tunnels do not, so lift the cap.
  keepalive_requests 100000000;
  keepalive_timeout 300s;
${nginxTempPaths(dir)}
  server {
    listen 127.0.0.1:${port} reuseport backlog=4096;
    root ${www};
    location / { }
  }
${tls ? tlsServer(tls, www, h2cPort !== undefined) : ''}${h2cPort ? h2cServer(h2cPort, www) : ''}}
`,
  );
  return runNginx(dir, conf);
}

/** A bench nginx's main context: in the foreground, `workers` workers of 20,000 connections, its pid and error log in `dir`. */
export function nginxMain(dir: string, workers: number): string {
  return `worker_processes ${workers};
worker_rlimit_nofile 20000;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 20000; }`;
}

/** Every path nginx writes to, inside `dir` (an `http` block's lines): nothing outside the run's temp dir. */
export function nginxTempPaths(dir: string): string {
  return `  client_body_temp_path ${dir}/tmp-body;
  proxy_temp_path ${dir}/tmp-proxy;
  fastcgi_temp_path ${dir}/tmp-fcgi;
  uwsgi_temp_path ${dir}/tmp-uwsgi;
  scgi_temp_path ${dir}/tmp-scgi;`;
}

/** Debian's nginx on `conf`, in the foreground (the config says daemon off), with its prefix and error log in `dir`. */
export function runNginx(dir: string, conf: string): Proc {
  return start('nginx', '/usr/sbin/nginx', ['-e', join(dir, 'error.log'), '-p', dir, '-c', conf]);
}

/**
 * The same files over HTTPS: the visitor's TLS for direct, and for ssh -R, which only carries
 * the bytes. TLS 1.3 is named because nginx before 1.23.4 leaves it out of its default; the
 * cipher is left to nginx's default (the client's order in TLS 1.3), as burrowd leaves its own.
 */
function tlsServer(tls: Certificate & { port: number }, www: string, h2: boolean): string {
  return `  server {
    listen 127.0.0.1:${tls.port} ssl${h2 ? ' http2' : ''} reuseport backlog=4096;
    ssl_certificate ${tls.certFile};
    ssl_certificate_key ${tls.keyFile};
    ssl_protocols TLSv1.2 TLSv1.3;
    root ${www};
    location / { }
  }
`;
}

/** h2c with prior knowledge (nginx 1.22: `listen … http2` without ssl), the same files. */
function h2cServer(port: number, www: string): string {
  return `  server {
    listen 127.0.0.1:${port} http2 reuseport backlog=4096;
    root ${www};
    location / { }
  }
`;
}

function startNode(port: number): Proc {
  const script = fileURLToPath(new URL('../origin/node-origin.js', import.meta.url));
  return start('node-origin', process.execPath, [script, String(port)]);
}
