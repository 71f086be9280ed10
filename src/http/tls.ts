import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createSecureContext } from 'node:tls';
import type { AppOptions, TemplatedApp } from '@trufflesuite/uws-js-unofficial';
import type { TlsConfig } from '../config.js';
import type { Uws } from './uws-loader.js';

// TLS on the one port (uWS SSLApp). Certificates are files: --tls-cert/--tls-key is the default
// (no SNI, or a name no pair matches), --tls-dir adds NAME.crt/NAME.key pairs served for the SNI
// name NAME (wildcards like *.example.org allowed). SIGHUP rebuilds the App from the files and
// lets it take the port (ARCHITECTURE.md "TLS"), so routes are recorded once and replayed.

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

function optionsOf(p: CertPair): AppOptions {
  return { cert_file_name: p.certFile, key_file_name: p.keyFile };
}

type RouteMethod = 'get' | 'post' | 'put' | 'del' | 'patch' | 'head' | 'options' | 'any' | 'connect' | 'trace' | 'ws';
const METHODS: RouteMethod[] = ['get', 'post', 'put', 'del', 'patch', 'head', 'options', 'any', 'connect', 'trace', 'ws'];

/**
 * Stands in for the App while features install their routes, and replays them on every App built
 * later: the first one, each SNI name's router (uWS keeps one per server name), and the App a
 * certificate reload builds.
 */
export class RouteRecorder {
  private readonly calls: [RouteMethod, unknown[]][] = [];
  readonly app: TemplatedApp;

  constructor() {
    const target: Record<string, unknown> = {};
    for (const m of METHODS) {
      target[m] = (...args: unknown[]) => {
        this.calls.push([m, args]);
        return this.app;
      };
    }
    this.app = target as unknown as TemplatedApp;
  }

  replay(app: TemplatedApp): void {
    for (const [m, args] of this.calls) (app[m] as (...a: unknown[]) => unknown).apply(app, args);
  }
}

/**
 * A plain App (no TLS) or an SSLApp with every certificate, all carrying the recorded routes.
 * `withServerNames` false leaves the SNI pairs out (uWS prints two debug lines on stdout for each
 * name it routes, so the first App of a start skips them until burrowd has written its own lines).
 */
export function buildApp(uws: Uws, routes: RouteRecorder, pairs: CertPair[] | null, withServerNames = true): TemplatedApp {
  if (pairs === null) {
    const app = uws.App();
    routes.replay(app);
    return app;
  }
  const [main, ...named] = pairs;
  const app = uws.SSLApp(optionsOf(main!));
  routes.replay(app);
  if (!withServerNames || named.length === 0) return app;
  for (const p of named) {
    app.addServerName(p.serverName!, optionsOf(p));
    app.domain(p.serverName!);
    routes.replay(app);
  }
  app.domain(''); // back to the default router (no server name is empty)
  return app;
}
