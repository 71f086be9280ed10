import { test } from 'uvu';
import * as assert from 'uvu/assert';
import tls from 'node:tls';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { eventually, withDeadline } from '../helpers/deadline.js';
import { startPebble, type Pebble } from '../helpers/pebble.js';
import { peerCertificate } from '../helpers/https-visit.js';

// burrowd with --acme-email against Pebble: it gets <domain> and *.<domain> by DNS-01 through
// the hook before it listens, serves HTTPS with them (no --tls-cert), keeps them across a
// restart, and renews on time, swapping the certificate in under an open connection.
//
// Pebble issues certificates of LIFETIME_S seconds here, so the renewal comes at two thirds of
// that (a third of the lifetime left) and the test stays short.

const DOMAIN = 'tunnel.example.com';
const LIFETIME_S = 36;
let pebble: Pebble;
let db: TestDatabase;
let server: TestServer | null = null;

function start(): Promise<TestServer> {
  return startServer({
    db,
    args: [
      '--domain', DOMAIN, '--acme-email', 'ops@example.com', '--acme-ca', pebble.directoryUrl, '--acme-dns-hook', pebble.hook,
      '--dns-resolver', pebble.dnsServer, '--metrics-addr', '127.0.0.1:0',
    ],
    env: { NODE_EXTRA_CA_CERTS: pebble.caFile },
  });
}

/** One keep-alive request on an open TLS connection; resolves with the status line. */
function ask(s: tls.TLSSocket): Promise<string> {
  return withDeadline(
    new Promise((resolve, reject) => {
      let got = '';
      const onData = (d: Buffer): void => {
        got += d.toString('latin1');
        const end = got.indexOf('\r\n\r\n');
        const len = /content-length: (\d+)/i.exec(got);
        if (end >= 0 && len && got.length >= end + 4 + Number(len[1])) {
          s.off('data', onData);
          resolve(got.split('\r\n')[0]!);
        }
      };
      s.on('data', onData);
      s.once('error', reject);
      s.write(`GET /healthz HTTP/1.1\r\nHost: ${DOMAIN}\r\n\r\n`);
    }),
    10_000,
    'a request on the open connection',
  );
}

async function orders(): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where name = ${DOMAIN}`;
  return row!.n;
}

test.before(async () => {
  pebble = await startPebble({ validitySecs: LIFETIME_S });
  db = await startDatabase();
});

test.after(async () => {
  await server?.stop({ keepDatabase: true });
  await db.stop();
  await pebble.stop();
});

test('obtains the wildcard before listening, serves it by SNI, keeps it across a restart, renews it at a third of its life left without dropping a connection', async () => {
  server = await start();
  assert.match(server.stdout(), /listening on https:\/\//);
  const root = await pebble.root();
  const first = await peerCertificate(server.port, `app.${DOMAIN}`, root);
  assert.match(first.subjectaltname ?? '', /DNS:\*\.tunnel\.example\.com/);
  assert.equal((await peerCertificate(server.port, DOMAIN, root)).serialNumber, first.serialNumber);
  assert.is(await orders(), 1);

  // A restart finds it in the database: no new order, the same certificate.
  await server.stop({ keepDatabase: true });
  server = await start();
  assert.is(await orders(), 1);
  assert.is((await peerCertificate(server.port, `x.${DOMAIN}`, root)).serialNumber, first.serialNumber);
  const metricsUrl = /metrics on (http:\/\/\S+\/metrics)/.exec(server.stdout())![1]!;
  const metrics = await (await fetch(metricsUrl)).text();
  const expiry = /burrow_cert_expiry_seconds\{name="tunnel\.example\.com"\} (-?\d+)/.exec(metrics);
  assert.ok(expiry && Number(expiry[1]) <= LIFETIME_S, `expiry metric: ${expiry?.[0]}`);

  // An open connection across the renewal.
  const open = tls.connect({ host: '127.0.0.1', port: server.port, servername: DOMAIN, ca: root });
  await new Promise((resolve, reject) => open.once('secureConnect', resolve).once('error', reject));
  assert.match(await ask(open), / 200 /);

  const notBefore = new Date(first.valid_from).getTime();
  const notAfter = new Date(first.valid_to).getTime();
  const due = notAfter - (notAfter - notBefore) / 3;
  const renewed: tls.PeerCertificate = await eventually(async () => {
    const c = await peerCertificate(server!.port, `app.${DOMAIN}`, root);
    if (c.serialNumber === first.serialNumber) throw new Error('not renewed yet');
    return c;
  }, LIFETIME_S * 1000, 'a renewed certificate');
  // On the rule, to the second (the new one starts when it was ordered; X.509 times are whole seconds).
  const issuedAt = new Date(renewed.valid_from).getTime();
  assert.ok(Math.abs(issuedAt - due) <= 3_000, `renewed at ${new Date(issuedAt).toISOString()}, due ${new Date(due).toISOString()}`);
  assert.is(await orders(), 2);
  assert.match(await ask(open), / 200 /);
  open.destroy();
});

test.run();
