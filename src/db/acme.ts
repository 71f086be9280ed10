import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import type { Sql } from './sql.js';
import { serverSecret } from './server-secrets.js';

// ACME's rows (migration 010): accounts, certificates and HTTP-01 tokens, private keys sealed
// with AES-256-GCM under a key derived from the server secret `acme-keys`.

export interface StoredCert {
  name: string;
  names: string[];
  certPem: string;
  keyPem: string;
  notBefore: Date;
  notAfter: Date;
  ariId: string | null;
  failures: number;
}

export class AcmeStore {
  private sealKey: Buffer | null = null;

  constructor(readonly sql: Sql) {}

  private async key(): Promise<Buffer> {
    this.sealKey ??= Buffer.from(hkdfSync('sha256', await serverSecret(this.sql, 'acme-keys'), Buffer.alloc(0), 'burrow acme private keys', 32));
    return this.sealKey;
  }

  async seal(plain: string): Promise<Buffer> {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', await this.key(), iv);
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return Buffer.concat([iv, c.getAuthTag(), body]);
  }

  async open(sealed: Buffer): Promise<string> {
    const d = createDecipheriv('aes-256-gcm', await this.key(), sealed.subarray(0, 12));
    d.setAuthTag(sealed.subarray(12, 28));
    return Buffer.concat([d.update(sealed.subarray(28)), d.final()]).toString('utf8');
  }

  async account(directoryUrl: string): Promise<{ keyPem: string; accountUrl: string | null } | null> {
    const [row] = await this.sql<{ key_sealed: Buffer; account_url: string | null }[]>`select key_sealed, account_url from acme_accounts where directory_url = ${directoryUrl}`;
    return row ? { keyPem: await this.open(Buffer.from(row.key_sealed)), accountUrl: row.account_url } : null;
  }

  /** Keeps the first key stored for the directory (another node may have made one at the same time); returns the one kept. */
  async saveAccountKey(directoryUrl: string, keyPem: string): Promise<string> {
    await this.sql`insert into acme_accounts (directory_url, key_sealed) values (${directoryUrl}, ${await this.seal(keyPem)}) on conflict (directory_url) do nothing`;
    return (await this.account(directoryUrl))!.keyPem;
  }

  async saveAccountUrl(directoryUrl: string, url: string): Promise<void> {
    await this.sql`update acme_accounts set account_url = ${url} where directory_url = ${directoryUrl}`;
  }

  async certificate(name: string): Promise<StoredCert | null> {
    const rows = await this.sql<CertRow[]>`select name, names, cert_pem, key_sealed, not_before, not_after, ari_id, failures from acme_certificates where name = ${name}`;
    return rows[0] ? this.fromRow(rows[0]) : null;
  }

  async certificates(): Promise<StoredCert[]> {
    const rows = await this.sql<CertRow[]>`select name, names, cert_pem, key_sealed, not_before, not_after, ari_id, failures from acme_certificates order by name`;
    return Promise.all(rows.map((r) => this.fromRow(r)));
  }

  async saveCertificate(c: Omit<StoredCert, 'failures'>): Promise<void> {
    const sealed = await this.seal(c.keyPem);
    await this.sql`
      insert into acme_certificates (name, names, cert_pem, key_sealed, not_before, not_after, ari_id, failures, last_error, updated_at)
      values (${c.name}, ${c.names}, ${c.certPem}, ${sealed}, ${c.notBefore}, ${c.notAfter}, ${c.ariId}, 0, null, now())
      on conflict (name) do update set names = excluded.names, cert_pem = excluded.cert_pem, key_sealed = excluded.key_sealed,
        not_before = excluded.not_before, not_after = excluded.not_after, ari_id = excluded.ari_id, failures = 0, last_error = null, updated_at = now()`;
  }

  /** A failed renewal: counted on the certificate's row (shown by metrics, read by every node). */
  async recordFailure(name: string, error: string): Promise<void> {
    await this.sql`update acme_certificates set failures = failures + 1, last_error = ${error.slice(0, 1000)} where name = ${name}`;
  }

  async recordOrder(name: string, registeredDomain: string, userId: string | null): Promise<void> {
    await this.sql`delete from acme_orders where ordered_at < now() - interval '8 days'`;
    await this.sql`insert into acme_orders (name, registered_domain, user_id) values (${name}, ${registeredDomain}, ${userId})`;
  }

  async ordersThisWeek(by: { registeredDomain: string } | { userId: string }): Promise<number> {
    const [row] =
      'registeredDomain' in by
        ? await this.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where registered_domain = ${by.registeredDomain} and ordered_at > now() - interval '7 days'`
        : await this.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where user_id = ${by.userId} and ordered_at > now() - interval '7 days'`;
    return row!.n;
  }

  async addChallenge(token: string, keyAuthorization: string, name: string): Promise<void> {
    await this.sql`insert into acme_challenges (token, key_authorization, name, expires_at) values (${token}, ${keyAuthorization}, ${name}, now() + interval '1 hour') on conflict (token) do nothing`;
  }

  async removeChallenge(token: string): Promise<void> {
    await this.sql`delete from acme_challenges where token = ${token} or expires_at < now()`;
  }

  private async fromRow(r: CertRow): Promise<StoredCert> {
    return { name: r.name, names: r.names, certPem: r.cert_pem, keyPem: await this.open(Buffer.from(r.key_sealed)), notBefore: r.not_before, notAfter: r.not_after, ariId: r.ari_id, failures: r.failures };
  }
}

/** What a shard answers at /.well-known/acme-challenge/<token>, or null (any node, from the database). */
export async function challengeAnswer(sql: Sql, token: string): Promise<string | null> {
  if (!/^[A-Za-z0-9_-]{1,255}$/.test(token)) return null;
  const [row] = await sql<{ key_authorization: string }[]>`select key_authorization from acme_challenges where token = ${token} and expires_at > now()`;
  return row?.key_authorization ?? null;
}

interface CertRow {
  name: string;
  names: string[];
  cert_pem: string;
  key_sealed: Buffer;
  not_before: Date;
  not_after: Date;
  ari_id: string | null;
  failures: number;
}
