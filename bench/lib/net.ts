// Loopback helpers: free ports, readiness waits with deadlines, a one-shot HTTP probe.
import { createServer, connect, type Server, type AddressInfo } from 'node:net';
import { request } from 'node:http';
import { sleep } from './procs.js';

export const LOOPBACK = '127.0.0.1';

/** A port the kernel just handed out on loopback (closed again, so a small race is possible). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, LOOPBACK, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** `count` distinct free loopback ports: all held open at once while picking, so none repeats. */
export async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Server>((resolve, reject) => {
          const srv = createServer();
          srv.on('error', reject);
          srv.listen(0, LOOPBACK, () => resolve(srv));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as AddressInfo).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

function tryConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: LOOPBACK, port });
    s.setTimeout(1_000);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
    s.once('timeout', () => {
      s.destroy();
      resolve(false);
    });
  });
}

export async function waitForPort(port: number, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await tryConnect(port))) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} on port ${port}`);
    await sleep(50);
  }
}

/** GET http://127.0.0.1:port/path with an optional Host header; resolves status and body length. */
export function probe(
  port: number,
  path: string,
  hostHeader: string | undefined,
  timeoutMs: number,
): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: LOOPBACK, port, path, headers: hostHeader ? { host: hostHeader } : {}, agent: false },
      (res) => {
        let bytes = 0;
        res.on('data', (c: Buffer) => (bytes += c.length));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes }));
        res.on('error', reject);
      },
    );
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`probe of :${port}${path} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/** Retries probe until it answers 200 with the expected length, within the deadline. */
export async function waitForHttp(
  port: number,
  path: string,
  hostHeader: string | undefined,
  expectBytes: number,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  for (;;) {
    try {
      const r = await probe(port, path, hostHeader, 5_000);
      if (r.status === 200 && r.bytes === expectBytes) return;
      last = `status ${r.status}, ${r.bytes} bytes (want 200, ${expectBytes})`;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not serving ${path} after ${timeoutMs} ms (${last})`);
    await sleep(100);
  }
}
