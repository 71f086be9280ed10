import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { peerCertificate } from '../helpers/https-visit.js';
import { startPebble, type Pebble } from '../helpers/pebble.js';

// Several burrowd on one database, each with --acme-email: started together they race to order
// the tunnel wildcard; the advisory lock lets exactly one order it, and every node serves it.
// A node started later takes it from the database.

const DOMAIN = 'nodes.example.com';
let pebble: Pebble;
let db: TestDatabase;
const servers: TestServer[] = [];

function start(): Promise<TestServer> {
  return startServer({
    db,
    workers: 1,
    args: ['--domain', DOMAIN, '--acme-email', 'ops@example.com', '--acme-ca', pebble.directoryUrl, '--acme-dns-hook', pebble.hook, '--dns-resolver', pebble.dnsServer],
    env: { NODE_EXTRA_CA_CERTS: pebble.caFile },
  });
}

test.before(async () => {
  pebble = await startPebble();
  db = await startDatabase();
});

test.after(async () => {
  for (const s of servers) await s.stop({ keepDatabase: true });
  await db.stop();
  await pebble.stop();
});

test('three nodes starting together: exactly one order, all three serve the same certificate; a fourth takes it from the database', async () => {
  servers.push(...(await Promise.all([start(), start(), start()])));
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where name = ${DOMAIN}`;
  assert.is(row!.n, 1);
  const root = await pebble.root();
  const serials = await Promise.all(servers.map((s) => peerCertificate(s.port, `app.${DOMAIN}`, root).then((c) => c.serialNumber)));
  assert.is(new Set(serials).size, 1, serials.join(' '));
  servers.push(await start());
  assert.is((await peerCertificate(servers[3]!.port, DOMAIN, root)).serialNumber, serials[0]);
  const [after] = await db.sql<{ n: number }[]>`select count(*)::int as n from acme_orders where name = ${DOMAIN}`;
  assert.is(after!.n, 1);
});

test.run();
