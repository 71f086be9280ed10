// The local HTTP service every target forwards to. nginx (Debian's nginx-light, one worker,
// keep-alive without a request cap, static files with sendfile) when present, because it costs
// the shared cores least; otherwise a small Node origin (bench/origin/node-origin.ts).
//
//   GET /small  14-byte body          GET /1m  1 MiB body          GET /big  64 MiB body (HOL bulk)
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { start, tempDir, type Proc } from './procs.js';
import { freePort, waitForHttp } from './net.js';
import { toolPath } from './tools.js';

export const SMALL_BODY = 'hello, burrow\n';
export const PATHS = {
  small: { path: '/small', bytes: SMALL_BODY.length },
  '1m': { path: '/1m', bytes: 1 << 20 },
  big: { path: '/big', bytes: 64 << 20 },
} as const;

export interface Origin {
  kind: 'nginx' | 'node';
  port: number;
  proc: Proc;
}

export async function startOrigin(prefer: 'nginx' | 'node'): Promise<Origin> {
  const kind = prefer === 'nginx' && toolPath('nginx') ? 'nginx' : 'node';
  const port = await freePort();
  const proc = kind === 'nginx' ? startNginx(port) : startNode(port);
  await waitForHttp(port, PATHS.small.path, undefined, PATHS.small.bytes, 10_000, `${kind} origin`);
  return { kind, port, proc };
}

function startNginx(port: number): Proc {
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
    `worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 20000; }
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
  client_body_temp_path ${dir}/tmp-body;
  proxy_temp_path ${dir}/tmp-proxy;
  fastcgi_temp_path ${dir}/tmp-fcgi;
  uwsgi_temp_path ${dir}/tmp-uwsgi;
  scgi_temp_path ${dir}/tmp-scgi;
  server {
    listen 127.0.0.1:${port} reuseport backlog=4096;
    root ${www};
    location / { }
  }
}
`,
  );
  return start('nginx', '/usr/sbin/nginx', ['-e', join(dir, 'error.log'), '-p', dir, '-c', conf]);
}

function startNode(port: number): Proc {
  const script = fileURLToPath(new URL('../origin/node-origin.js', import.meta.url));
  return start('node-origin', process.execPath, [script, String(port)]);
}
