import { request, type Dispatcher } from 'undici';
import { accountKey, externalAccountBinding, jws, type AccountKey } from './jws.js';

// A small RFC 8555 client: directory, nonces, account, order, authorization, challenge,
// finalize, download, and RFC 9773 renewal information. Each call is one request (retried once
// on badNonce); the steps are put together by order.ts. Everything the CA sends is bounded.

const MAX_BODY = 1 << 20;
const REQUEST_TIMEOUT_MS = 30_000;

export interface Directory {
  newNonce: string;
  newAccount: string;
  newOrder: string;
  renewalInfo?: string;
  meta?: { externalAccountRequired?: boolean; termsOfService?: string };
}

export interface Order {
  status: 'pending' | 'ready' | 'processing' | 'valid' | 'invalid';
  authorizations: string[];
  finalize: string;
  certificate?: string;
  error?: unknown;
}

export interface Challenge {
  type: string;
  url: string;
  token: string;
  status: string;
  error?: unknown;
}

export interface Authorization {
  identifier: { type: string; value: string };
  status: 'pending' | 'valid' | 'invalid' | 'deactivated' | 'expired' | 'revoked';
  challenges: Challenge[];
  wildcard?: boolean;
}

/** An answer of the CA that is not what was asked: its problem document, if any, in `detail`. */
export class AcmeError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly type: string | null,
  ) {
    super(message);
  }
}

interface Answer<T> {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: T;
  text: string;
}

export interface ClientOptions {
  directoryUrl: string;
  accountKeyPem: string;
  /** Known from an earlier newAccount; found again otherwise. */
  accountUrl?: string | null;
  /** Tests: an agent trusting the test CA's TLS certificate. */
  dispatcher?: Dispatcher;
}

export class AcmeClient {
  readonly account: AccountKey;
  accountUrl: string | null;
  private dir: Directory | null = null;
  private nonces: string[] = [];

  constructor(private readonly opts: ClientOptions) {
    this.account = accountKey(opts.accountKeyPem);
    this.accountUrl = opts.accountUrl ?? null;
  }

  async directory(): Promise<Directory> {
    if (this.dir) return this.dir;
    const res = await this.http<Directory>('GET', this.opts.directoryUrl);
    if (res.status !== 200 || typeof res.body?.newOrder !== 'string' || typeof res.body.newNonce !== 'string' || typeof res.body.newAccount !== 'string') {
      throw new AcmeError(`${this.opts.directoryUrl} is not an ACME directory (HTTP ${res.status})`, res.status, null);
    }
    this.dir = res.body;
    return this.dir;
  }

  /** Registers (or finds) the account of this key; returns its URL. */
  async register(email: string | null, eab: { kid: string; hmac: string } | null): Promise<string> {
    const dir = await this.directory();
    const payload: Record<string, unknown> = { termsOfServiceAgreed: true };
    if (email) payload.contact = [`mailto:${email}`];
    if (eab) payload.externalAccountBinding = externalAccountBinding(this.account, eab.kid, eab.hmac, dir.newAccount);
    const res = await this.post<{ status?: string }>(dir.newAccount, payload, false);
    const location = header(res, 'location');
    if ((res.status !== 200 && res.status !== 201) || !location) throw new AcmeError(`newAccount answered HTTP ${res.status} without an account URL`, res.status, null);
    this.accountUrl = location;
    return location;
  }

  async newOrder(names: string[], replaces: string | null): Promise<{ url: string; order: Order }> {
    const dir = await this.directory();
    const payload: Record<string, unknown> = { identifiers: names.map((value) => ({ type: 'dns', value })) };
    if (replaces && dir.renewalInfo) payload.replaces = replaces;
    let res: Answer<Order>;
    try {
      res = await this.post<Order>(dir.newOrder, payload);
    } catch (err) {
      // An earlier replacement order that failed already claimed `replaces` (RFC 9773 alreadyReplaced;
      // Pebble answers 409): the renewal goes on as a plain order rather than never.
      const replaced = err instanceof AcmeError && (err.type === 'urn:ietf:params:acme:error:alreadyReplaced' || err.status === 409);
      if (!replaced || !payload.replaces) throw err;
      delete payload.replaces;
      res = await this.post<Order>(dir.newOrder, payload);
    }
    const url = header(res, 'location');
    if (res.status !== 201 || !url || !Array.isArray(res.body?.authorizations)) throw new AcmeError(`newOrder answered HTTP ${res.status}`, res.status, null);
    return { url, order: res.body };
  }

  async getOrder(url: string): Promise<Answer<Order>> {
    return this.post<Order>(url, null);
  }

  async authorization(url: string): Promise<Answer<Authorization>> {
    return this.post<Authorization>(url, null);
  }

  /** Tells the CA the challenge is ready to be checked. */
  async respond(challengeUrl: string): Promise<void> {
    await this.post(challengeUrl, {});
  }

  async finalize(order: Order, csr: Buffer): Promise<Order> {
    return (await this.post<Order>(order.finalize, { csr: csr.toString('base64url') })).body;
  }

  async download(certificateUrl: string): Promise<string> {
    const res = await this.post<unknown>(certificateUrl, null, true, 'application/pem-certificate-chain');
    if (!res.text.includes('-----BEGIN CERTIFICATE-----')) throw new AcmeError('the certificate download is not a PEM chain', res.status, null);
    return res.text;
  }

  /** RFC 9773: the CA's suggested renewal window, or null where the directory offers none. */
  async renewalInfo(certId: string): Promise<{ start: Date; end: Date; retryAfterS: number | null } | null> {
    const dir = await this.directory();
    if (!dir.renewalInfo) return null;
    const res = await this.http<{ suggestedWindow?: { start?: string; end?: string } }>('GET', `${dir.renewalInfo.replace(/\/$/, '')}/${certId}`);
    const w = res.body?.suggestedWindow;
    const start = new Date(String(w?.start));
    const end = new Date(String(w?.end));
    if (res.status !== 200 || Number.isNaN(start.getTime()) || Number.isNaN(end.getTime()) || end < start) return null;
    return { start, end, retryAfterS: retryAfter(res) };
  }

  private async nonce(): Promise<string> {
    const kept = this.nonces.pop();
    if (kept) return kept;
    const res = await this.http('HEAD', (await this.directory()).newNonce);
    const n = header(res, 'replay-nonce');
    if (!n) throw new AcmeError('the CA gave no nonce', res.status, null);
    return n;
  }

  /** A signed POST (payload null: POST-as-GET); a badNonce answer is retried once with the nonce it carried. */
  private async post<T>(url: string, payload: unknown | null, byKid = true, accept = 'application/json'): Promise<Answer<T>> {
    if (byKid && !this.accountUrl) throw new Error('ACME: no account yet');
    for (let attempt = 0; ; attempt++) {
      const body = jws(this.account, { nonce: await this.nonce(), url, ...(byKid ? { kid: this.accountUrl! } : {}) }, payload);
      const res = await this.http<T>('POST', url, JSON.stringify(body), accept);
      const problem = res.body as { type?: string; detail?: string } | null;
      if (res.status < 400) return res;
      if (problem?.type === 'urn:ietf:params:acme:error:badNonce' && attempt === 0) continue;
      throw new AcmeError(`${problem?.detail ?? `HTTP ${res.status}`}${problem?.type ? ` (${problem.type.replace('urn:ietf:params:acme:error:', '')})` : ''}`, res.status, problem?.type ?? null);
    }
  }

  private async http<T>(method: 'GET' | 'HEAD' | 'POST', url: string, body?: string, accept = 'application/json'): Promise<Answer<T>> {
    const u = new URL(url);
    if (u.protocol !== 'https:' && !(u.protocol === 'http:' && isLoopback(u.hostname))) throw new AcmeError(`${url}: an ACME CA is reached over https`, 0, null);
    let res: Dispatcher.ResponseData;
    try {
      res = await request(url, {
        method,
        body,
        headers: { ...(body ? { 'content-type': 'application/jose+json' } : {}), accept, 'user-agent': 'burrowd-acme' },
        headersTimeout: REQUEST_TIMEOUT_MS,
        bodyTimeout: REQUEST_TIMEOUT_MS,
        ...(this.opts.dispatcher ? { dispatcher: this.opts.dispatcher } : {}),
      });
    } catch (err) {
      throw new AcmeError(`cannot reach the ACME CA at ${u.origin}: ${(err as Error).message}`, 0, null);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_BODY) {
        res.body.destroy();
        throw new AcmeError(`${url}: answer larger than ${MAX_BODY} bytes`, res.statusCode, null);
      }
      chunks.push(chunk);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    const n = header({ headers: res.headers }, 'replay-nonce');
    if (n && /^[A-Za-z0-9_-]{1,255}$/.test(n)) this.nonces = [n];
    let parsed: unknown = null;
    if (/json/.test(String(res.headers['content-type'] ?? ''))) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = null;
      }
    }
    return { status: res.statusCode, headers: res.headers, body: parsed as T, text };
  }
}

function header(res: { headers: Record<string, string | string[] | undefined> }, name: string): string | null {
  const v = res.headers[name];
  return typeof v === 'string' ? v : Array.isArray(v) ? (v[0] ?? null) : null;
}

/** Retry-After in seconds (delta or HTTP date), or null. */
export function retryAfter(res: { headers: Record<string, string | string[] | undefined> }): number | null {
  const v = header(res, 'retry-after');
  if (!v) return null;
  if (/^\d+$/.test(v)) return Number(v);
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, Math.round((at - Date.now()) / 1000));
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '[::1]' || /^127\./.test(host);
}
