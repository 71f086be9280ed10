import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import type { Dispatcher } from 'undici';
import { CliError, EXIT } from './errors.js';
import { verificationProblem } from '../client/tls-verify.js';
import { isLoopbackName, lookupLoopbackNames } from '../protocol/loopback-names.js';

// Which certificates the CLI trusts: the system's CAs (Node's bundled roots) plus --ca FILE
// (env BURROW_CA, or a context's `ca`), for the API, login and the control WebSocket alike.
// A failed verification says which host, what failed, and what to do.

/** The PEM bundle to verify with, or undefined for the defaults (no --ca). */
export function trustedCas(caFile: string | null): string[] | undefined {
  if (caFile === null) return undefined;
  let pem: string;
  try {
    pem = readFileSync(caFile, 'utf8');
  } catch (err) {
    throw new CliError(EXIT.usage, 'cannot read CA file', `${caFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, 'give --ca (or BURROW_CA) the path of a PEM certificate');
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
    throw new CliError(EXIT.usage, 'not a CA certificate', `${caFile} holds no PEM certificate ("BEGIN CERTIFICATE")`, 'give --ca the PEM file of the CA that signed the server\'s certificate');
  }
  // `ca` replaces Node's roots, so they are listed too: --ca adds a CA, it does not narrow trust.
  return [...rootCertificates, pem];
}

const dispatchers = new Map<string, Dispatcher>();

/**
 * An undici dispatcher trusting --ca as well and resolving names under .localhost to loopback
 * (protocol/loopback-names.ts); undefined when neither is needed (the default one serves).
 */
async function dispatcherFor(caFile: string | null, url: URL): Promise<Dispatcher | undefined> {
  const ca = trustedCas(caFile);
  // `localhost` itself the system resolves; only names under it need ours.
  const loopback = url.hostname.toLowerCase() !== 'localhost' && isLoopbackName(url.hostname);
  if (!ca && !loopback) return undefined;
  const key = `${caFile ?? ''}\n${loopback}`;
  let d = dispatchers.get(key);
  if (!d) {
    const { Agent } = await import('undici');
    d = new Agent({ connect: { ...(ca ? { ca } : {}), ...(loopback ? { lookup: lookupLoopbackNames } : {}) } });
    dispatchers.set(key, d);
  }
  return d;
}

export interface FetchInit {
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
}

/**
 * fetch for the CLI's HTTP requests, trusting --ca as well. Without --ca (and a name under
 * .localhost) it is Node's own fetch (the same undici, built in): loading the npm undici costs
 * more than the rest of a CLI start, so it loads only when its Agent is needed.
 */
export async function fetchTrusting(caFile: string | null, url: string | URL, init: FetchInit): Promise<Response> {
  const dispatcher = await dispatcherFor(caFile, new URL(url));
  if (!dispatcher) return fetch(url, init);
  const undici = await import('undici');
  return (await undici.fetch(url, { ...init, dispatcher })) as unknown as Response;
}

/** A CliError (exit 1) for a certificate the CLI refused, or null when `err` is something else. */
export function tlsError(server: string, err: unknown): CliError | null {
  const what = verificationProblem(err);
  if (what === null) return null;
  let host = server;
  try {
    host = new URL(server).host;
  } catch {
    /* keep the text */
  }
  return new CliError(
    EXIT.error,
    'TLS verification failed',
    `${host}: ${what}`,
    'if the server uses a private CA, pass its certificate with --ca FILE (or BURROW_CA, or `burrow context create NAME --server URL --ca FILE`); otherwise check the server\'s certificate and the --server name',
  );
}
