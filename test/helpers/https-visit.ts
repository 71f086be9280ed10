import https from 'node:https';
import http from 'node:http';
import tls from 'node:tls';
import { createHash } from 'node:crypto';
import { withDeadline } from './fixtures.js';

// A visitor over TLS for the TLS tests: one request as `servername` (SNI and Host), verified
// against `ca`, answering the status, the start of the body, its sha256 and the certificate's CN.

export interface HttpsGot {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** the start of the body as text */
  body: string;
  /** sha256 of the whole body */
  sha: string;
  subject: string;
}

export function httpsGet(port: number, servername: string, path: string, opts: { ca: string; agent?: https.Agent; body?: Buffer; headers?: Record<string, string> }): Promise<HttpsGot> {
  return withDeadline(
    new Promise<HttpsGot>((resolve, reject) => {
      const req = https.request({
        host: '127.0.0.1', port, servername, path, headers: { host: servername, ...opts.headers },
        method: opts.body ? 'POST' : 'GET',
        ca: opts.ca, agent: opts.agent ?? false,
      });
      req.on('error', reject);
      req.on('response', (res) => {
        const subject = (res.socket as tls.TLSSocket).getPeerCertificate().subject?.CN ?? '';
        const body = createHash('sha256');
        let text = '';
        res.on('data', (d: Buffer) => {
          body.update(d);
          if (text.length < 4096) text += d.toString('utf8');
        });
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text, sha: body.digest('hex'), subject: String(subject) }));
        res.on('aborted', () => reject(new Error(`${opts.body ? 'POST' : 'GET'} https://${servername}${path}: the response was cut short`)));
      });
      req.end(opts.body);
    }),
    60_000,
    `${opts.body ? 'POST' : 'GET'} https://${servername}${path}`,
  );
}

/** A MiB that is not all one byte, so a lost or shifted TLS record shows in its hash. */
export const MIB = Buffer.alloc(1 << 20, 'burrow tls bulk ');
export const MIB_SHA = createHash('sha256').update(MIB).digest('hex');

/** The bulk routes of a test's local service: GET /mib sends MIB, POST /sha answers the body's sha256. */
export function bulkRoute(req: http.IncomingMessage, res: http.ServerResponse): boolean {
  if (req.url === '/mib') {
    res.end(MIB);
    return true;
  }
  if (req.url === '/sha') {
    const h = createHash('sha256');
    req.on('data', (d: Buffer) => h.update(d));
    req.on('end', () => res.end(h.digest('hex')));
    return true;
  }
  return false;
}

/** The certificate a fresh handshake as `servername` gets on 127.0.0.1:port: verified against `ca`, or (no ca) whatever it is. */
export function peerCertificate(port: number, servername: string, ca: string | null): Promise<tls.PeerCertificate> {
  return withDeadline(
    new Promise((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port, servername, ...(ca ? { ca } : { rejectUnauthorized: false }) }, () => {
        const c = s.getPeerCertificate();
        s.destroy();
        resolve(c);
      });
      s.on('error', reject);
    }),
    10_000,
    `handshake as ${servername}`,
  );
}
