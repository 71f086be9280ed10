import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Test certificates made with the openssl CLI (.ci/run installs it where it is missing): a CA
// of the test's own and certificates it signs, P-256 keys, valid for two days.

export interface Ca {
  cert: string;
  key: string;
}

export interface Issued {
  cert: string;
  key: string;
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

export function makeCa(dir: string, name: string): Ca {
  const cert = join(dir, `${name}.ca.crt`);
  const key = join(dir, `${name}.ca.key`);
  openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', `/CN=${name} test CA`]);
  return { cert, key };
}

/** A certificate for `cn` with these subject alternative names (DNS names; IPs as "IP:…"). */
export function issue(dir: string, ca: Ca, file: string, cn: string, sans: string[]): Issued {
  const cert = join(dir, `${file}.crt`);
  const key = join(dir, `${file}.key`);
  const csr = join(dir, `${file}.csr`);
  const ext = join(dir, `${file}.ext`);
  openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${cn}`]);
  writeFileSync(ext, `subjectAltName=${sans.map((s) => (s.startsWith('IP:') ? s : `DNS:${s}`)).join(',')}\n`);
  openssl(['x509', '-req', '-in', csr, '-CA', ca.cert, '-CAkey', ca.key, '-CAcreateserial', '-out', cert, '-days', '2', '-extfile', ext]);
  return { cert, key };
}

/**
 * The certificates of a TLS test in a temporary folder: a CA, a certificate for DOMAIN,
 * *.DOMAIN and 127.0.0.1 (the default) and one for *.sni.test in `sniDir` (for --tls-dir).
 */
export function tlsFixture(prefix: string, domain: string): { tmp: { dir: string; remove: () => void }; certs: string; sniDir: string; ca: Ca; main: Issued; caPem: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const tmp = { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
  const certs = join(tmp.dir, 'certs');
  const sniDir = join(tmp.dir, 'sni');
  mkdirSync(certs);
  mkdirSync(sniDir);
  const ca = makeCa(certs, 'burrow');
  const main = issue(certs, ca, 'server', domain, [domain, `*.${domain}`, 'IP:127.0.0.1']);
  issue(sniDir, ca, '*.sni.test', 'sni.test', ['*.sni.test']);
  return { tmp, certs, sniDir, ca, main, caPem: readFileSync(ca.cert, 'utf8') };
}
