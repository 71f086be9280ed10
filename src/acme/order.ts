import { generateKeyPairSync } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { AcmeError, retryAfter, type AcmeClient, type Authorization, type Order } from './client.js';
import { csrDer } from './csr.js';
import { dnsValue, keyAuthorization } from './jws.js';

// One certificate from order to chain (RFC 8555 §7.4): the order, each authorization's
// challenge put in place by a solver (DNS-01 through the hook, HTTP-01 from the database),
// the CA told, polled to the end, then finalize with a fresh key and download.

export interface Pending {
  /** The identifier (a wildcard's without its `*.`). */
  name: string;
  type: 'dns-01' | 'http-01';
  token: string;
  keyAuth: string;
  /** DNS-01: the TXT value at _acme-challenge.<name>. */
  dnsValue: string;
}

export interface Solver {
  /** The challenge type this solver answers for an identifier (a wildcard needs dns-01). */
  typeFor(name: string, wildcard: boolean): 'dns-01' | 'http-01';
  /** Puts every challenge in place and returns once the CA can see them. */
  present(challenges: Pending[]): Promise<void>;
  /** Takes them away again (errors are logged by the solver, not thrown). */
  cleanup(challenges: Pending[]): Promise<void>;
}

export interface Issued {
  certPem: string;
  keyPem: string;
}

const POLL_MS = 1_000;
const MAX_POLL_S = 10;
const POLL_DEADLINE_MS = 5 * 60_000;

export async function obtain(client: AcmeClient, names: string[], solver: Solver, replaces: string | null = null): Promise<Issued> {
  const { url, order } = await client.newOrder(names, replaces);
  const pending: Pending[] = [];
  const toRespond: string[] = [];
  for (const authzUrl of order.authorizations) {
    const authz = (await client.authorization(authzUrl)).body;
    if (authz.status === 'valid') continue;
    if (authz.status !== 'pending') throw new AcmeError(`the authorization of ${authz.identifier.value} is ${authz.status}`, 0, null);
    const type = solver.typeFor(authz.identifier.value, authz.wildcard === true);
    const ch = authz.challenges.find((c) => c.type === type);
    if (!ch) throw new AcmeError(`the CA offers no ${type} challenge for ${authz.identifier.value}`, 0, null);
    if (!/^[A-Za-z0-9_-]{1,255}$/.test(ch.token)) throw new AcmeError('the CA sent a malformed challenge token', 0, null);
    const keyAuth = keyAuthorization(client.account, ch.token);
    pending.push({ name: authz.identifier.value, type, token: ch.token, keyAuth, dnsValue: dnsValue(keyAuth) });
    toRespond.push(ch.url, authzUrl);
  }
  try {
    if (pending.length > 0) await solver.present(pending);
    for (let i = 0; i < toRespond.length; i += 2) await client.respond(toRespond[i]!);
    for (let i = 1; i < toRespond.length; i += 2) await waitAuthorization(client, toRespond[i]!);
  } finally {
    if (pending.length > 0) await solver.cleanup(pending);
  }
  let current = await waitOrder(client, url, (o) => o.status !== 'pending');
  if (current.status !== 'ready') throw new AcmeError(`the order is ${current.status}, not ready: ${problemText(current.error)}`, 0, null);
  const keyPem = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  current = await client.finalize(current, csrDer(keyPem, names));
  if (current.status !== 'valid') current = await waitOrder(client, url, (o) => o.status === 'valid' || o.status === 'invalid');
  if (current.status !== 'valid' || !current.certificate) throw new AcmeError(`the order ended ${current.status}: ${problemText(current.error)}`, 0, null);
  return { certPem: await client.download(current.certificate), keyPem };
}

async function waitAuthorization(client: AcmeClient, url: string): Promise<Authorization> {
  const until = Date.now() + POLL_DEADLINE_MS;
  for (;;) {
    const res = await client.authorization(url);
    const a = res.body;
    if (a.status === 'valid') return a;
    if (a.status !== 'pending') {
      const failed = a.challenges.find((c) => c.error !== undefined);
      throw new AcmeError(`${a.identifier.value}: the CA did not accept the challenge: ${problemText(failed?.error)}`, 0, null);
    }
    if (Date.now() > until) throw new AcmeError(`${a.identifier.value}: the CA did not decide in ${POLL_DEADLINE_MS / 1000} s`, 0, null);
    await sleep(Math.min(MAX_POLL_S * 1000, (retryAfter(res) ?? 0) * 1000 || POLL_MS));
  }
}

async function waitOrder(client: AcmeClient, url: string, done: (o: Order) => boolean): Promise<Order> {
  const until = Date.now() + POLL_DEADLINE_MS;
  for (;;) {
    const res = await client.getOrder(url);
    if (done(res.body) || res.body.status === 'invalid') return res.body;
    if (Date.now() > until) throw new AcmeError(`the order stayed ${res.body.status} for ${POLL_DEADLINE_MS / 1000} s`, 0, null);
    await sleep(Math.min(MAX_POLL_S * 1000, (retryAfter(res) ?? 0) * 1000 || POLL_MS));
  }
}

function problemText(p: unknown): string {
  const d = (p as { detail?: unknown } | undefined)?.detail;
  return typeof d === 'string' ? d.slice(0, 300) : 'no detail';
}
