import { test } from 'uvu';
import * as assert from 'uvu/assert';
import tls from 'node:tls';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { issue, makeCa } from '../helpers/certs.js';
import { peerCertificate } from '../helpers/https-visit.js';
import { loadCertificates, SniContexts } from '../../src/http/tls.js';

// Which certificate a handshake gets when --tls-dir files and ACME certificates sit side by
// side: the files first for the names they cover, ACME for the rest, and without --tls-cert the
// ACME certificate of <domain> as the default.

const dir = mkdtempSync(join(tmpdir(), 'burrow-acme-sni-'));
const ca = makeCa(dir, 'sni');
const sniDir = join(dir, 'sni');
mkdirSync(sniDir);
issue(sniDir, ca, '*.files.example.com', 'files', ['*.files.example.com']);
const acmeWildcard = issue(dir, ca, 'acme-wildcard', 'acme-wildcard', ['tunnel.example.com', '*.tunnel.example.com', '*.files.example.com']);
const acmeCustom = issue(dir, ca, 'acme-custom', 'acme-custom', ['shop.customer.org']);
const caPem = readFileSync(ca.cert, 'utf8');
const pem = (f: string): string => readFileSync(f, 'utf8');

test('--tls-dir first, then ACME exact and wildcard, then the ACME certificate of <domain> as the default', async () => {
  const contexts = new SniContexts(loadCertificates({ certFile: null, keyFile: null, dir: sniDir, acme: null }), 'tunnel.example.com');
  contexts.setIssued([
    { names: ['tunnel.example.com', '*.tunnel.example.com', '*.files.example.com'], certPem: pem(acmeWildcard.cert), keyPem: pem(acmeWildcard.key) },
    { names: ['shop.customer.org'], certPem: pem(acmeCustom.cert), keyPem: pem(acmeCustom.key) },
  ]);
  assert.ok(contexts.ready);
  const server = tls.createServer({ SNICallback: (name, cb) => cb(null, contexts.contextFor(name)), secureContext: contexts.contextFor('') }, (s) => s.end());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  try {
    const cn = async (name: string): Promise<string> => String((await peerCertificate(port, name, caPem)).subject.CN);
    assert.is(await cn('app.files.example.com'), 'files', 'a name the files cover: the file');
    assert.is(await cn('app.tunnel.example.com'), 'acme-wildcard');
    assert.is(await cn('shop.customer.org'), 'acme-custom');
    // No SNI match: the default, here ACME's certificate of the tunnel domain.
    assert.is(String((await peerCertificate(port, 'unknown.example.net', null)).subject.CN), 'acme-wildcard');
  } finally {
    server.close();
  }
});

test('an unusable ACME certificate is skipped and named; the others stay served', () => {
  const contexts = new SniContexts([], 'tunnel.example.com');
  assert.not.ok(contexts.ready, 'nothing to serve before the first certificate');
  const refused = contexts.setIssued([
    { names: ['shop.customer.org'], certPem: pem(acmeCustom.cert), keyPem: pem(acmeWildcard.key) },
    { names: ['tunnel.example.com'], certPem: pem(acmeWildcard.cert), keyPem: pem(acmeWildcard.key) },
  ]);
  assert.equal(refused, ['shop.customer.org']);
  assert.ok(contexts.ready);
});

test.after(() => rmSync(dir, { recursive: true, force: true }));

test.run();
