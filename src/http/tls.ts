import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import type { TlsConfig } from '../config.js';

// TLS on the one port, ended by the front (node:tls). Certificates are files: --tls-cert/--tls-key
// is the default (no SNI, or a name no pair matches), --tls-dir adds NAME.crt/NAME.key pairs served
// for the SNI name NAME (wildcards like *.example.org allowed). SIGHUP reads them again. Beside
// them, the certificates burrowd got by ACME (src/acme/), for the names the files do not cover;
// without --tls-cert the ACME certificate of <domain> is the default.

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
  const pairs: CertPair[] = tls.certFile && tls.keyFile ? [{ serverName: null, certFile: tls.certFile, keyFile: tls.keyFile }] : [];
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

/** A certificate got by ACME, served for each of its names (`*.x` as a wildcard). */
export interface IssuedPair {
  names: string[];
  certPem: string;
  keyPem: string;
}

/**
 * The TLS contexts of the front, chosen per handshake by SNI: an exact --tls-dir name, a
 * wildcard one, then an exact ACME name, a wildcard one, then the default (--tls-cert, else the
 * ACME certificate of <domain>). SIGHUP swaps the files' set, a new ACME certificate the other.
 */
export class SniContexts {
  private files = new Map<string, SecureContext>();
  private issued = new Map<string, SecureContext>();

  constructor(
    pairs: CertPair[],
    private readonly domain: string | null = null,
    /** A name neither the files nor ACME cover (it gets the default): ACME may want to issue it. */
    private readonly onMiss: ((name: string) => void) | null = null,
  ) {
    this.set(pairs);
  }

  /** New handshakes get these; connections already open keep theirs. */
  set(pairs: CertPair[]): void {
    const contexts = new Map<string, SecureContext>();
    for (const p of pairs) contexts.set(p.serverName ?? '', createSecureContext({ cert: readFileSync(p.certFile), key: readFileSync(p.keyFile), minVersion: 'TLSv1.2' }));
    this.files = contexts;
  }

  /** The ACME certificates, all at once; an unusable one is skipped (and named in the result). */
  setIssued(certs: IssuedPair[]): string[] {
    const contexts = new Map<string, SecureContext>();
    const refused: string[] = [];
    for (const c of certs) {
      let ctx: SecureContext;
      try {
        ctx = createSecureContext({ cert: c.certPem, key: c.keyPem, minVersion: 'TLSv1.2' });
      } catch {
        refused.push(c.names[0] ?? '?');
        continue;
      }
      for (const n of c.names) contexts.set(n.toLowerCase(), ctx);
    }
    this.issued = contexts;
    return refused;
  }

  /** Whether a handshake would get a certificate at all (without --tls-cert: once ACME gave one). */
  get ready(): boolean {
    return this.defaultContext() !== undefined;
  }

  private defaultContext(): SecureContext | undefined {
    return this.files.get('') ?? (this.domain ? this.issued.get(this.domain) : undefined) ?? this.issued.values().next().value;
  }

  contextFor(name: string): SecureContext {
    const n = name.toLowerCase();
    const dot = n.indexOf('.');
    const wild = dot > 0 ? `*${n.slice(dot)}` : null;
    for (const map of [this.files, this.issued]) {
      const exact = n === '' ? undefined : map.get(n);
      if (exact) return exact;
      const wildcard = wild ? map.get(wild) : undefined;
      if (wildcard) return wildcard;
    }
    if (n !== '') this.onMiss?.(n);
    return this.defaultContext()!;
  }
}
