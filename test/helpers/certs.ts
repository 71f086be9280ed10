import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
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
