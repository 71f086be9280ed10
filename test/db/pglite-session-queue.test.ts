import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startEmbedded } from '../../src/db/embedded.js';
import { connect } from '../../src/db/sql.js';
import { createLogger } from '../../src/log.js';
import { lastReadyStatus } from '../../src/db/pglite-session-queue.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The embedded database shares one PGlite session among pooled connections: concurrent
// extended-protocol queries and transactions from several connections must keep their
// meaning (pglite-socket's own queue lost unnamed portals here: "portal \"\" does not exist").

test('ReadyForQuery status is found after other messages', () => {
  const cmd = Buffer.from([0x43, 0, 0, 0, 9, 0x53, 0x45, 0x4c, 0x0a, 0]); // CommandComplete
  const rfq = (s: string) => Buffer.from([0x5a, 0, 0, 0, 5, s.charCodeAt(0)]);
  assert.is(lastReadyStatus([cmd, rfq('T')]), 'T'.charCodeAt(0));
  assert.is(lastReadyStatus([Buffer.concat([rfq('T'), cmd, rfq('I')])]), 'I'.charCodeAt(0));
  assert.is(lastReadyStatus([cmd]), null);
});

test('concurrent queries and transactions on many connections all succeed and stay isolated', async () => {
  const db = await startEmbedded('memory://', createLogger('warn'), { templateFile: join(tmpdir(), 'burrow-pglite-queue-test.tar'), engine: 'pglite' });
  const pools = Array.from({ length: 3 }, () => connect(db.url, { max: 4, applicationName: 'queue-test' }));
  try {
    await pools[0]!`create table t (id int primary key, v text)`;
    const work: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      const sql = pools[i % 3]!;
      if (i % 3 === 0) {
        work.push(
          sql.begin(async (tx) => {
            await tx`insert into t values (${i}, ${'a' + i})`;
            await tx`update t set v = ${'b' + i} where id = ${i}`;
          }),
        );
      } else if (i % 7 === 0) {
        // A failed transaction rolls back without disturbing the others.
        work.push(sql.begin(async (tx) => {
          await tx`insert into t values (${1000 + i}, 'x')`;
          await tx`select 1/0`;
        }).then(() => assert.unreachable(), () => 'rolled back'));
      } else {
        work.push(sql`select ${i}::int as i, ${'p' + i}::text as p`.then((r) => assert.equal([...r], [{ i, p: 'p' + i }])));
      }
    }
    await Promise.all(work);
    const rows = await pools[1]!`select id, v from t order by id`;
    assert.equal(rows.map((r) => r.id), Array.from({ length: 20 }, (_, k) => k * 3));
    assert.ok(rows.every((r) => r.v === 'b' + r.id));
  } finally {
    await Promise.all(pools.map((p) => p.end({ timeout: 1 })));
    await db.stop();
  }
});

test.run();
