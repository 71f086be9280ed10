import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { buildServerCommand, configFromOptions, LETS_ENCRYPT } from '../../src/config.js';

// The ACME flags: --acme-email turns it on (HTTPS without --tls-cert), the rest need it, and
// bad values are refused with a message an operator can act on.

function parse(argv: string[]) {
  const cmd = buildServerCommand().exitOverride();
  cmd.parse(argv, { from: 'user' });
  return configFromOptions(cmd.opts());
}

function refused(argv: string[], why: RegExp): void {
  try {
    parse(argv);
    assert.unreachable(`${argv.join(' ')} should be refused`);
  } catch (err) {
    assert.match((err as Error).message, why);
  }
}

test('--acme-email: HTTPS with ACME certificates, Let\'s Encrypt by default, https base URL, --http-port allowed', () => {
  const c = parse(['--domain', 'tunnel.example.com', '--port', '443', '--http-port', '80', '--acme-email', 'ops@example.com']);
  assert.ok(c.tls);
  assert.is(c.tls.certFile, null);
  assert.equal(c.tls.acme, { directoryUrl: LETS_ENCRYPT, email: 'ops@example.com', eab: null, dnsHook: null, resolvers: null });
  assert.is(c.baseUrl, 'https://tunnel.example.com:443');
  assert.is(c.httpPort, 80);
});

test('--acme-ca, external account binding, hook and resolvers', () => {
  const c = parse([
    '--acme-email', 'ops@example.com', '--acme-ca', 'https://acme-staging-v02.api.letsencrypt.org/directory', '--acme-eab-kid', 'kid-1', '--acme-eab-hmac', 'c2VjcmV0LWtleQ',
    '--acme-dns-hook', '/usr/local/bin/dns-hook', '--dns-resolver', '127.0.0.1:8053,[::1]:53,192.0.2.1',
  ]);
  const a = c.tls!.acme!;
  assert.is(a.directoryUrl, 'https://acme-staging-v02.api.letsencrypt.org/directory');
  assert.equal(a.eab, { kid: 'kid-1', hmac: 'c2VjcmV0LWtleQ' });
  assert.is(a.dnsHook, '/usr/local/bin/dns-hook');
  assert.equal(a.resolvers, [{ host: '127.0.0.1', port: 8053 }, { host: '::1', port: 53 }, { host: '192.0.2.1', port: 53 }]);
});

test('--tls-dir with ACME needs no --tls-cert; its files still come first (SniContexts)', () => {
  const c = parse(['--acme-email', 'ops@example.com', '--tls-dir', '/etc/burrow/certs']);
  assert.is(c.tls!.dir, '/etc/burrow/certs');
  assert.is(c.tls!.certFile, null);
});

test('bad combinations and values are refused', () => {
  refused(['--acme-dns-hook', '/x'], /need --acme-email/);
  refused(['--acme-email', 'not-an-address'], /not an email address/);
  refused(['--acme-email', 'ops@example.com', '--acme-ca', 'http://ca.example/dir'], /https:\/\//);
  refused(['--acme-email', 'ops@example.com', '--acme-eab-kid', 'k'], /go together/);
  refused(['--acme-email', 'ops@example.com', '--dns-resolver', 'ns1.example.com:53'], /not IP:PORT/);
  refused(['--tls-dir', '/etc/burrow/certs'], /needs a default certificate/);
  refused(['--http-port', '80'], /--acme-email/);
});

test.run();
