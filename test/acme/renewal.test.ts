import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { issue, makeCa } from '../helpers/certs.js';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { eventually } from '../helpers/deadline.js';
import { LongTimer, fittingWindow, renewAt, retryDelayMs } from '../../src/acme/renewal.js';
import { ariCertId } from '../../src/acme/cert-id.js';
import { csrDer } from '../../src/acme/csr.js';
import { newAccountKeyPem } from '../../src/acme/jws.js';
import { AcmeClient } from '../../src/acme/client.js';
import { CertManager } from '../../src/acme/manager.js';
import { migrate } from '../../src/db/migrate.js';
import { createLogger } from '../../src/log.js';
import { Registry } from 'prom-client';
import { isPublicSuffix, registeredDomain } from '../../src/acme/public-suffix.js';

// The renewal rule and its timer, the CSR and the ARI identifier checked by openssl, and ARI
// (RFC 9773) from a stub directory that offers renewalInfo (bookworm's Pebble does not; trixie's does).

const dir = mkdtempSync(join(tmpdir(), 'burrow-acme-renewal-'));
const ca = makeCa(dir, 'ari');
const issued = issue(dir, ca, 'leaf', 'ari.example.com', ['ari.example.com']);
const leafPem = readFileSync(issued.cert, 'utf8');
const log = createLogger('silent');

function openssl(args: string[], input?: string): string {
  return execFileSync('openssl', args, { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}

test('a third of the lifetime left: 90-day, 6-day and 90-second certificates', () => {
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  const day = 86_400_000;
  assert.is(renewAt(new Date(t0), new Date(t0 + 90 * day), null).getTime(), t0 + 60 * day);
  assert.is(renewAt(new Date(t0), new Date(t0 + 6 * day), null).getTime(), t0 + 4 * day);
  assert.is(renewAt(new Date(t0), new Date(t0 + 90_000), null).getTime(), t0 + 60_000);
});

test('an ARI window: a moment inside it, whatever the lifetime', () => {
  const start = new Date('2026-03-01T00:00:00Z');
  const end = new Date('2026-03-02T00:00:00Z');
  assert.is(renewAt(new Date(0), new Date(8.64e15), { start, end }, () => 0).getTime(), start.getTime());
  assert.is(renewAt(new Date(0), new Date(8.64e15), { start, end }, () => 0.5).getTime(), start.getTime() + 43_200_000);
});

test('an ARI window that closes after expiry is not followed; one already over still means now', () => {
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  const notAfter = new Date(t0 + 300_000);
  // Pebble's answer for a 5-minute certificate: 24 hours either side of two-thirds of its life.
  const generic = { start: new Date(t0 + 200_000 - 86_400_000), end: new Date(t0 + 200_000 + 86_400_000) };
  assert.is(fittingWindow(notAfter, generic), null);
  assert.is(renewAt(new Date(t0), notAfter, fittingWindow(notAfter, generic)).getTime(), t0 + 200_000);
  const inside = { start: new Date(t0 + 150_000), end: new Date(t0 + 250_000) };
  assert.is(fittingWindow(notAfter, inside), inside);
  const revoked = { start: new Date(t0 - 3_600_000), end: new Date(t0 - 1_800_000) };
  assert.is(fittingWindow(notAfter, revoked), revoked);
  assert.is(fittingWindow(notAfter, null), null);
});

test('retries back off, but never past a quarter of the time left', () => {
  const far = new Date(Date.now() + 365 * 86_400_000);
  assert.is(retryDelayMs(1, far), 30_000);
  assert.is(retryDelayMs(2, far), 60_000);
  assert.is(retryDelayMs(30, far), 6 * 3600_000);
  const soon = new Date(Date.now() + 40_000);
  assert.ok(retryDelayMs(5, soon) <= 10_000);
});

test('a five-year wait neither overflows setTimeout nor fires early; a short one fires on time', async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error): void => void warnings.push(w.name);
  process.on('warning', onWarning);
  let fired = false;
  const far = new LongTimer(new Date(Date.now() + 5 * 365 * 86_400_000), () => (fired = true));
  let soonAt = 0;
  const t0 = Date.now();
  new LongTimer(new Date(t0 + 150), () => (soonAt = Date.now()));
  await eventually(() => soonAt > 0, 2_000, 'the short timer');
  assert.ok(soonAt - t0 >= 150 && soonAt - t0 < 1_000, `fired after ${soonAt - t0} ms`);
  assert.not.ok(fired);
  far.cancel();
  process.off('warning', onWarning);
  assert.not.ok(warnings.includes('TimeoutOverflowWarning'), warnings.join(','));
});

test('the CSR carries every name in subjectAltName and is signed by the key (openssl checks)', () => {
  const key = newAccountKeyPem();
  const der = csrDer(key, ['a.example.com', '*.a.example.com']);
  const pem = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE REQUEST-----\n`;
  const text = openssl(['req', '-noout', '-text', '-verify'], pem);
  assert.match(text, /DNS:a\.example\.com, DNS:\*\.a\.example\.com/);
  assert.match(text, /CN\s*=\s*a\.example\.com/);
});

test('the ARI certificate identifier is base64url(AKI).base64url(serial) as openssl reads them', () => {
  const x = new X509Certificate(leafPem);
  const aki = /keyid:([0-9A-F:]+)|([0-9A-F]{2}(?::[0-9A-F]{2})+)/.exec(openssl(['x509', '-noout', '-ext', 'authorityKeyIdentifier'], leafPem))!;
  const akiHex = (aki[1] ?? aki[2]!).replaceAll(':', '');
  let serial = x.serialNumber.toLowerCase();
  if (serial.length % 2) serial = `0${serial}`;
  if (/^[89a-f]/.test(serial)) serial = `00${serial}`;
  assert.is(ariCertId(x), `${Buffer.from(akiHex, 'hex').toString('base64url')}.${Buffer.from(serial, 'hex').toString('base64url')}`);
});

/** A directory that offers renewalInfo; `window` is what it suggests. */
async function ariStub(window: { start: string; end: string }): Promise<{ url: string; asked: string[]; close: () => Promise<void> }> {
  const asked: string[] = [];
  const server = http.createServer((req, res) => {
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    if (req.url === '/dir') {
      res.setHeader('content-type', 'application/json');
      return void res.end(JSON.stringify({ newNonce: `${base}/nonce`, newAccount: `${base}/account`, newOrder: `${base}/order`, renewalInfo: `${base}/renewal-info` }));
    }
    if (req.url?.startsWith('/renewal-info/')) {
      asked.push(req.url.slice('/renewal-info/'.length));
      res.setHeader('content-type', 'application/json');
      res.setHeader('retry-after', '21600');
      return void res.end(JSON.stringify({ suggestedWindow: window }));
    }
    res.statusCode = 404;
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/dir`, asked, close: () => new Promise((r) => server.close(() => r())) };
}

test('ARI: the client asks the directory for the window of this certificate', async () => {
  const stub = await ariStub({ start: '2030-01-01T00:00:00Z', end: '2030-01-03T00:00:00Z' });
  try {
    const client = new AcmeClient({ directoryUrl: stub.url, accountKeyPem: newAccountKeyPem() });
    const id = ariCertId(new X509Certificate(leafPem))!;
    const w = await client.renewalInfo(id);
    assert.equal(stub.asked, [id]);
    assert.is(w!.start.toISOString(), '2030-01-01T00:00:00.000Z');
    assert.is(w!.end.toISOString(), '2030-01-03T00:00:00.000Z');
    assert.is(w!.retryAfterS, 21600);
  } finally {
    await stub.close();
  }
});

test('ARI: where the directory offers it, the renewal timer lands in its window, not at the lifetime rule', async () => {
  // Inside the leaf's two days, well before the lifetime rule's point (two-thirds of them).
  const leaf = new X509Certificate(leafPem);
  const from = Date.parse(leaf.validFrom);
  const life = Date.parse(leaf.validTo) - from;
  const window = { start: new Date(from + life * 0.25).toISOString(), end: new Date(from + life * 0.3).toISOString() };
  const stub = await ariStub(window);
  let db: TestDatabase | null = null;
  let m: CertManager | null = null;
  try {
    db = await startDatabase();
    await migrate(db.sql, log);
    m = new CertManager({ sql: db.sql, log, acme: { directoryUrl: stub.url, email: 'ops@example.com', eab: null, dnsHook: null, resolvers: null }, domain: 'ari.example.com', say: () => undefined, onChange: async () => undefined });
    const x = new X509Certificate(leafPem);
    await m.store.saveCertificate({ name: 'ari.example.com', names: ['ari.example.com'], certPem: leafPem, keyPem: readFileSync(issued.key, 'utf8'), notBefore: new Date(x.validFrom), notAfter: new Date(x.validTo), ariId: ariCertId(x) });
    await m.start();
    const at = (await eventually(() => m!.nextAttempt('ari.example.com'), 5_000, 'a renewal timer'))!;
    assert.ok(at.getTime() >= Date.parse(window.start) && at.getTime() <= Date.parse(window.end), at.toISOString());
    assert.ok(stub.asked.length >= 1);
  } finally {
    await m?.stop();
    await db?.stop();
    await stub.close();
  }
});

test('a renewal that fails (the CA unreachable): counted by name, overdue raised, retried with backoff, the old certificate kept', async () => {
  let db: TestDatabase | null = null;
  let m: CertManager | null = null;
  try {
    db = await startDatabase();
    await migrate(db.sql, log);
    const registry = new Registry();
    m = new CertManager({ sql: db.sql, log, acme: { directoryUrl: 'https://127.0.0.1:1/dir', email: 'ops@example.com', eab: null, dnsHook: '/bin/false', resolvers: null }, domain: 'ari.example.com', say: () => undefined, onChange: async () => undefined, registry });
    const x = new X509Certificate(leafPem);
    // Stored as if issued long ago: past its renewal point now.
    await m.store.saveCertificate({ name: 'ari.example.com', names: ['ari.example.com', '*.ari.example.com'], certPem: leafPem, keyPem: readFileSync(issued.key, 'utf8'), notBefore: new Date(Date.now() - 86_400_000 * 30), notAfter: new Date(x.validTo), ariId: null });
    await m.start();
    await eventually(async () => /burrow_cert_renewal_overdue\{name="ari\.example\.com"\} 1/.test(await registry.metrics()), 10_000, 'the overdue metric');
    const text = await registry.metrics();
    assert.match(text, /burrow_cert_renewal_failures_total\{name="ari\.example\.com"\} 1/);
    assert.match(text, /burrow_cert_expiry_seconds\{name="ari\.example\.com"\} \d+/);
    const next = m.nextAttempt('ari.example.com')!;
    const wait = next.getTime() - Date.now();
    assert.ok(wait > 1_000 && wait <= 30_000, `next attempt in ${wait} ms`);
    const [row] = await db.sql<{ failures: number; last_error: string; cert_pem: string }[]>`select failures, last_error, cert_pem from acme_certificates where name = 'ari.example.com'`;
    assert.is(row!.failures, 1);
    assert.match(row!.last_error, /cannot reach the ACME CA/);
    assert.is(row!.cert_pem, leafPem, 'the old certificate stays served');
  } finally {
    await m?.stop();
    await db?.stop();
  }
});

test('public suffixes: registered domains and names no user may claim', () => {
  assert.is(registeredDomain('a.b.example.co.uk'), 'example.co.uk');
  assert.is(registeredDomain('app.example.com'), 'example.com');
  assert.is(registeredDomain('x.user.github.io'), 'user.github.io');
  assert.ok(isPublicSuffix('co.uk'));
  assert.ok(isPublicSuffix('com'));
  assert.ok(isPublicSuffix('github.io'));
  assert.not.ok(isPublicSuffix('example.com'));
});

test.after(() => rmSync(dir, { recursive: true, force: true }));

test.run();
