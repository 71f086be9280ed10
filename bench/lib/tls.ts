// The https scenario's certificate: one throwaway self-signed ECDSA P-256 certificate for
// localhost, *.localhost, *.bench.localhost and 127.0.0.1, made with openssl in the run's temp
// dir (removed on exit). nginx's TLS listener and burrowd's --tls-cert use the same one, so every target does
// the same handshake and signs with the same key type; wrk does not verify certificates, the
// burrow CLI trusts this one with --ca.
import { join } from 'node:path';
import { run, tempDir } from './procs.js';
import { toolPath } from './tools.js';

/**
 * A burrowd domain its wildcard covers for HTTP/2 (h2 scenario): burrowd answers a stream 421
 * unless the certificate covers its :authority by Node's rules (tls.checkServerIdentity), which
 * take no wildcard over a single label (`*.localhost`), as a real `*.tunnels.example.com` is.
 */
export const WILDCARD_DOMAIN = 'bench.localhost';

export interface Certificate {
  certFile: string;
  keyFile: string;
}

let made: Promise<Certificate> | null = null;

/** The run's certificate, made on first use. */
export function benchCertificate(): Promise<Certificate> {
  made ??= makeCertificate();
  return made;
}

async function makeCertificate(): Promise<Certificate> {
  const openssl = toolPath('openssl');
  if (!openssl) throw new Error('openssl not installed (apt-get install -y openssl)');
  const dir = tempDir('tls');
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  // prettier-ignore
  const res = await run('openssl', openssl, [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', keyFile, '-out', certFile, '-days', '2', '-subj', '/CN=localhost',
    '-addext', `subjectAltName=DNS:localhost,DNS:*.localhost,DNS:*.${WILDCARD_DOMAIN},IP:127.0.0.1`,
  ], 30_000);
  if (res.code !== 0) throw new Error(`openssl req failed (${res.code}): ${res.stderr.trim()}`);
  return { certFile, keyFile };
}
