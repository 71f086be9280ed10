// The intermediaries the probe puts in front of the same origin:
//
//   visitor ──▶ burrowd :port (Host: <id>.localhost) ══ control WebSocket ══▶ burrow http CLI ──▶ origin
//   visitor ──▶ nginx :port  proxy_pass, proxy_http_version 1.1, Connection ""            ──▶ origin
//   visitor ──▶ nginx :port2 proxy_pass with nginx's defaults (HTTP/1.0 upstream)          ──▶ origin
//
// burrow starts exactly as the bench's burrow target does (bench/targets/burrow.ts: the real
// burrowd on the embedded database, one `burrow http` CLI); nginx is Debian's nginx-light with a
// generated config, one worker, every temp path in the run's temp dir.
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { burrowTarget } from '../targets/burrow.js';
import { stop, tempDir } from '../lib/procs.js';
import { nginxTempPaths, runNginx } from '../lib/origin.js';
import { freePorts, waitForPort } from '../lib/net.js';

export interface Subject {
  name: string;
  describe: string;
  port: number;
  /** The Host a visitor sends to reach the origin through it. */
  host: string;
  close(): Promise<void>;
}

export async function startBurrow(repoRoot: string, originPort: number): Promise<Subject> {
  const t = await burrowTarget({ name: 'burrow', repoRoot });
  try {
    const ep = await t.expose('http', originPort);
    return { name: 'burrow', describe: t.describe, port: ep.port, host: ep.hostHeader ?? 'localhost', close: () => t.close() };
  } catch (err) {
    await t.close();
    throw err;
  }
}

/** One nginx, two server blocks: the recommended HTTP/1.1 upstream and nginx's defaults. */
export async function startNginx(originPort: number): Promise<Subject[]> {
  const dir = tempDir('nginx-conformance');
  // Run as root, nginx's worker drops to nobody: it must reach its temp paths.
  chmodSync(dir, 0o755);
  const [p11, p10] = await freePorts(2);
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
${nginxTempPaths(dir)}
  server {
    listen 127.0.0.1:${p11};
    location / {
      proxy_pass http://127.0.0.1:${originPort};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
  server {
    listen 127.0.0.1:${p10};
    location / {
      proxy_pass http://127.0.0.1:${originPort};
    }
  }
}
`,
  );
  const proc = runNginx(dir, conf);
  await waitForPort(p11!, 10_000, 'nginx');
  await waitForPort(p10!, 10_000, 'nginx');
  let stopped: Promise<void> | null = null;
  const close = () => (stopped ??= stop(proc));
  return [
    { name: 'nginx', describe: `nginx (Debian nginx-light): proxy_pass http://127.0.0.1:<origin>; proxy_http_version 1.1; proxy_set_header Connection "";`, port: p11!, host: 'localhost', close },
    { name: 'nginx-1.0', describe: 'nginx (Debian nginx-light): proxy_pass http://127.0.0.1:<origin>; (its defaults: HTTP/1.0 upstream, Connection: close)', port: p10!, host: 'localhost', close },
  ];
}
