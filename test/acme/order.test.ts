import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { X509Certificate } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { startPebble, type Pebble } from '../helpers/pebble.js';
import { migrate } from '../../src/db/migrate.js';
import { connect, type Sql } from '../../src/db/sql.js';
import { createLogger } from '../../src/log.js';
import { CertManager, type ManagerOptions } from '../../src/acme/manager.js';
import { parseResolvers } from '../../src/acme/dns-wait.js';
import type { AcmeConfig } from '../../src/config.js';

// The ACME manager against Pebble, in process: the tunnel wildcard by DNS-01 through a hook (and
// by a record a person creates), what a failing hook or CA leaves behind, and nodes racing for
// one name on one database (exactly one order; every node hears of the result).

const log = createLogger('silent');
let pebble: Pebble;
let db: TestDatabase;
const extraPools: Sql[] = [];
const managers: CertManager[] = [];

function acmeConfig(over: Partial<AcmeConfig> = {}): AcmeConfig {
  return { directoryUrl: pebble.directoryUrl, email: 'ops@example.com', eab: null, dnsHook: pebble.hook, resolvers: parseResolvers(pebble.dnsServer), ...over };
}

/** A manager as one node runs it, on a pool of its own (another node: another pool). */
function manager(domain: string, over: Partial<ManagerOptions> = {}, acme: Partial<AcmeConfig> = {}): CertManager {
  const sql = connect(db.url, { max: 4, applicationName: 'burrow-test-acme' });
  extraPools.push(sql);
  const m = new CertManager({ sql, log, acme: acmeConfig(acme), domain, say: () => undefined, onChange: async () => undefined, dispatcher: pebble.dispatcher, dnsPollMs: 100, ...over });
  managers.push(m);
  return m;
}

async function orders(name: string): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where name = ${name}`;
  return row!.n;
}

test.before(async () => {
  pebble = await startPebble();
  db = await startDatabase();
  await migrate(db.sql, log);
});

test.after(async () => {
  for (const m of managers) await m.stop();
  for (const s of extraPools) await s.end({ timeout: 1 });
  await db.stop();
  await pebble.stop();
});

test('the tunnel wildcard by DNS-01 through the hook: <domain> and *.<domain>, chained to the CA, key sealed at rest, ordered once', async () => {
  const m = manager('tunnel.example.com');
  await m.start();
  const cert = await m.wildcard();
  const x = new X509Certificate(cert.certPem);
  assert.match(x.subjectAltName ?? '', /DNS:tunnel\.example\.com/);
  assert.match(x.subjectAltName ?? '', /DNS:\*\.tunnel\.example\.com/);
  // The chain ends at Pebble's root: the intermediate is in the PEM, signed by the root.
  const chain = cert.certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)!;
  assert.ok(chain.length >= 2, 'leaf and intermediate');
  const root = new X509Certificate(await pebble.root());
  assert.ok(new X509Certificate(chain[chain.length - 1]!).verify(root.publicKey) || new X509Certificate(chain[chain.length - 1]!).checkIssued(root));
  assert.ok(x.checkPrivateKey((await import('node:crypto')).createPrivateKey(cert.keyPem)));
  const [row] = await db.sql<{ key_sealed: Buffer }[]>`select key_sealed from acme_certificates where name = 'tunnel.example.com'`;
  assert.not.ok(Buffer.from(row!.key_sealed).toString('latin1').includes('PRIVATE KEY'), 'the key is not stored in the clear');
  assert.is(await orders('tunnel.example.com'), 1);
  // Fresh: asking again orders nothing.
  const again = await m.wildcard();
  assert.is(again.certPem, cert.certPem);
  assert.is(await orders('tunnel.example.com'), 1);
});

test('without a hook: the exact TXT record is printed, and issuance goes on once it is in place', async () => {
  let printed = '';
  const m = manager('manual.example.net', {
    say: (text) => {
      printed += text;
      // The person: creates what was printed.
      for (const [, fqdn, value] of text.matchAll(/^\s+(\S+)\. 300 IN TXT "([^"]+)"$/gm)) void pebble.setTxt(fqdn!, value!);
    },
  }, { dnsHook: null });
  await m.start();
  const cert = await m.wildcard();
  assert.match(printed, /_acme-challenge\.manual\.example\.net\. 300 IN TXT "[A-Za-z0-9_-]{43}"/);
  assert.match(new X509Certificate(cert.certPem).subjectAltName ?? '', /\*\.manual\.example\.net/);
});

test('a hook that fails: the order fails with its exit status and what it said; counted by name', async () => {
  const failing = join(pebble.dir, 'failing-hook.sh');
  writeFileSync(failing, '#!/bin/sh\necho "zone example.org: API token rejected" >&2\nexit 3\n');
  chmodSync(failing, 0o755);
  const registry = new Registry();
  const m = manager('hookfail.example.org', { registry }, { dnsHook: failing });
  await m.start();
  try {
    await m.wildcard();
    assert.unreachable('the order should fail');
  } catch (err) {
    assert.match((err as Error).message, /--acme-dns-hook add _acme-challenge\.hookfail\.example\.org failed \(exit 3\): zone example\.org: API token rejected/);
  }
  assert.match(await registry.metrics(), /burrow_cert_renewal_failures_total\{name="hookfail\.example\.org"\} 1/);
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from acme_certificates where name = 'hookfail.example.org'`;
  assert.is(row!.n, 0, 'nothing issued');
});

test('a CA that cannot be reached: a clear error naming it, nothing stored', async () => {
  const m = manager('noca.example.org', {}, { directoryUrl: 'https://127.0.0.1:1/dir' });
  await m.start();
  try {
    await m.wildcard();
    assert.unreachable('the order should fail');
  } catch (err) {
    assert.match((err as Error).message, /cannot reach the ACME CA at https:\/\/127\.0\.0\.1:1/);
  }
});

test('50 orders for a registered domain in a week: the next is refused before reaching the CA', async () => {
  await db.sql`insert into acme_orders (name, registered_domain) select 'x' || g || '.bounded.example.info', 'example.info' from generate_series(1, 50) g`;
  const m = manager('bounded.example.info');
  await m.start();
  try {
    await m.wildcard();
    assert.unreachable('the order should be refused');
  } catch (err) {
    assert.match((err as Error).message, /50 certificates were ordered for example\.info this week/);
  }
  assert.is(await orders('bounded.example.info'), 0);
});

test('three nodes race for one name: exactly one order, every node gets the certificate and hears of it', async () => {
  const heard = [0, 0, 0];
  const nodes = [0, 1, 2].map((i) => manager('race.example.com', { onChange: async () => void heard[i]!++ }));
  for (const n of nodes) await n.start();
  const certs = await Promise.all(nodes.map((n) => n.wildcard()));
  assert.is(await orders('race.example.com'), 1);
  assert.is(certs[1]!.certPem, certs[0]!.certPem);
  assert.is(certs[2]!.certPem, certs[0]!.certPem);
  // The ordering node reloads its shards itself; the others by NOTIFY.
  const { eventually } = await import('../helpers/deadline.js');
  await eventually(() => heard.every((h) => h >= 1), 5_000, 'every node to hear of the certificate');
});

test.run();
