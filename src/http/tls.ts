import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import type { TlsConfig } from '../config.js';

// TLS on the one port, ended by the front (node:tls). Certificates are files: --tls-cert/--tls-key
// is the default (no SNI, or a name no pair matches), --tls-dir adds NAME.crt/NAME.key pairs served
// for the SNI name NAME (wildcards like *.example.org allowed). SIGHUP reads them again.

export interface CertPair {
  /** null: the default certificate. */
  serverName: string | null;
  certFile: string;
  keyFile: string;
}

/** A server name a file may be named after: DNS labels, optionally a leading `*.`. */
const SERVER_NAME = /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

/**
 * Every certificate of the config, each checked the way the TLS library will use it (PEM that
 * parses, a key that belongs to the certificate). Throws one Error naming the file at fault.
 */
export function loadCertificates(tls: TlsConfig): CertPair[] {
  const pairs: CertPair[] = [{ serverName: null, certFile: tls.certFile, keyFile: tls.keyFile }];
  if (tls.dir !== null) {
    let names: string[];
    try {
      names = readdirSync(tls.dir);
    } catch (err) {
      throw new Error(`--tls-dir ${tls.dir}: ${(err as Error).message}`);
    }
    for (const file of names.filter((n) => n.endsWith('.crt')).sort()) {
      const serverName = file.slice(0, -'.crt'.length).toLowerCase();
      if (!SERVER_NAME.test(serverName)) throw new Error(`${join(tls.dir, file)}: "${serverName}" is not a server name (NAME.crt, e.g. app.example.org.crt or *.example.org.crt)`);
      const keyFile = join(tls.dir, `${file.slice(0, -'.crt'.length)}.key`);
      if (!names.includes(`${file.slice(0, -'.crt'.length)}.key`)) throw new Error(`${join(tls.dir, file)} has no key: expected ${keyFile}`);
      pairs.push({ serverName, certFile: join(tls.dir, file), keyFile });
    }
  }
  for (const p of pairs) checkPair(p);
  return pairs;
}

function checkPair(p: CertPair): void {
  const read = (file: string, what: string): Buffer => {
    try {
      return readFileSync(file);
    } catch (err) {
      throw new Error(`cannot read the TLS ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  const cert = read(p.certFile, 'certificate');
  const key = read(p.keyFile, 'key');
  if (!cert.includes('-----BEGIN CERTIFICATE-----')) throw new Error(`${p.certFile} is not a PEM certificate (no "BEGIN CERTIFICATE" block)`);
  if (!/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(key.toString('latin1'))) throw new Error(`${p.keyFile} is not a PEM private key (no "BEGIN … PRIVATE KEY" block)`);
  try {
    createSecureContext({ cert, key });
  } catch (err) {
    const msg = (err as Error).message;
    if (/key values mismatch/i.test(msg)) throw new Error(`${p.keyFile} is not the key of ${p.certFile}`);
    if (/PEM|ASN1|DECODER|bad base64|no start line/i.test(msg)) throw new Error(`${p.certFile} / ${p.keyFile}: cannot be parsed (${msg})`);
    throw new Error(`${p.certFile} / ${p.keyFile}: ${msg}`);
  }
}

/**
 * The TLS contexts of the front, chosen per handshake by SNI: an exact --tls-dir name, then a
 * wildcard one, then the default (--tls-cert). SIGHUP swaps the whole set at once.
 */
export class SniContexts {
  private contexts = new Map<string, SecureContext>();

  constructor(pairs: CertPair[]) {
    this.set(pairs);
  }

  /** New handshakes get these; connections already open keep theirs. */
  set(pairs: CertPair[]): void {
    const contexts = new Map<string, SecureContext>();
    for (const p of pairs) contexts.set(p.serverName ?? '', createSecureContext({ cert: readFileSync(p.certFile), key: readFileSync(p.keyFile), minVersion: 'TLSv1.2' }));
    this.contexts = contexts;
  }

  contextFor(name: string): SecureContext {
    const n = name.toLowerCase();
    const exact = n === '' ? undefined : this.contexts.get(n);
    if (exact) return exact;
    const dot = n.indexOf('.');
    const wildcard = dot > 0 ? this.contexts.get(`*${n.slice(dot)}`) : undefined;
    return wildcard ?? this.contexts.get('')!;
  }
}
