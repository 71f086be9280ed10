// Loopback helpers: free ports, readiness waits with deadlines, one-shot HTTP/1.1 and HTTP/2 probes.
import { createServer, connect, type Server, type AddressInfo } from 'node:net';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import http2 from 'node:http2';
import { sleep } from './procs.js';
import type { Endpoint } from '../targets/target.js';

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

/**
 * GET http(s)://127.0.0.1:port/path with the endpoint's Host header; resolves status, body
 * length and, over TLS, the negotiated protocol and cipher. The bench's certificate is
 * self-signed and only the bytes matter here, so it is not verified.
 */
export function probe(ep: Endpoint, path: string, timeoutMs: number): Promise<{ status: number; bytes: number; tls?: string }> {
  return new Promise((resolve, reject) => {
    const options = { host: LOOPBACK, port: ep.port, path, headers: ep.hostHeader ? { host: ep.hostHeader } : {}, agent: false };
    const onResponse = (res: IncomingMessage): void => {
      const socket = res.socket as TLSSocket;
      const cipher = ep.tls ? `${socket.getProtocol?.() ?? '?'} ${socket.getCipher?.()?.standardName ?? '?'}` : undefined;
      let bytes = 0;
      res.on('data', (c: Buffer) => (bytes += c.length));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, ...(cipher ? { tls: cipher } : {}) }));
      res.on('error', reject);
    };
    const req = ep.tls ? httpsRequest({ ...options, rejectUnauthorized: false }, onResponse) : httpRequest(options, onResponse);
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`probe of :${ep.port}${path} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/**
 * Retries probe until it answers 200 with the expected length, within the deadline; resolves
 * the negotiated TLS protocol and cipher (over TLS) for the results.
 */
export async function waitForHttp(ep: Endpoint, path: string, expectBytes: number, timeoutMs: number, what: string): Promise<string | undefined> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  for (;;) {
    try {
      const r = await probe(ep, path, 5_000);
      if (r.status === 200 && r.bytes === expectBytes) return r.tls;
      last = `status ${r.status}, ${r.bytes} bytes (want 200, ${expectBytes})`;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not serving ${path} after ${timeoutMs} ms (${last})`);
    await sleep(100);
  }
}

/**
 * GET over HTTP/2 (node:http2): TLS with ALPN h2 and SNI `host`, or h2c with prior knowledge,
 * connecting to 127.0.0.1:port whatever `host` is, with :authority `host`. Retries until the
 * answer is 200 with `expectBytes` of body, within the deadline: the h2 scenario's readiness
 * check, which also proves the endpoint speaks HTTP/2 and carries the body whole.
 */
export async function waitForH2(ep: { host: string; port: number; tls: boolean }, path: string, expectBytes: number, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  for (;;) {
    try {
      const r = await probeH2(ep, path, 5_000);
      if (r.status === 200 && r.bytes === expectBytes) return;
      last = `status ${r.status}, ${r.bytes} bytes (want 200, ${expectBytes})`;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not serving ${path} over ${ep.tls ? 'h2' : 'h2c'} after ${timeoutMs} ms (${last})`);
    await sleep(100);
  }
}

function probeH2(ep: { host: string; port: number; tls: boolean }, path: string, timeoutMs: number): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    // The bench's certificate is self-signed; only the protocol and the bytes matter here.
    const session = http2.connect(`${ep.tls ? 'https' : 'http'}://${ep.host}:${ep.port}`, {
      createConnection: () => (ep.tls ? tlsConnect({ host: LOOPBACK, port: ep.port, servername: ep.host, ALPNProtocols: ['h2'], rejectUnauthorized: false }) : connect({ host: LOOPBACK, port: ep.port })),
    });
    const timer = setTimeout(() => session.destroy(new Error(`h2 probe of :${ep.port}${path} timed out after ${timeoutMs} ms`)), timeoutMs);
    const finish = (err: Error | null, r?: { status: number; bytes: number }): void => {
      clearTimeout(timer);
      session.close();
      if (err) reject(err);
      else resolve(r!);
    };
    session.on('error', (err) => finish(err));
    const req = session.request({ ':path': path, ':authority': ep.host });
    let status = 0;
    let bytes = 0;
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => finish(null, { status, bytes }));
    req.on('error', (err) => finish(err));
  });
}
