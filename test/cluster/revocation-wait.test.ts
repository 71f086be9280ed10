import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomUUID } from 'node:crypto';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { migrate } from '../../src/db/migrate.js';
import { createUser } from '../../src/db/users.js';
import { releaseMember } from '../../src/db/cluster.js';
import { createLogger } from '../../src/log.js';
import { ClusterNode } from '../../src/cluster/node.js';
import { OwnInvalidations } from '../../src/cluster/own-invalidations.js';

// How the node whose API made a revocation waits for every node to end its tunnels, in
// process on a real database: each member row that goes is a notification, and the wait counts
// the rows again when one arrives (not on a timer). And the revocation runs once on that node:
// the change's own notification, coming back to it, finds it done.

const log = createLogger('error', { test: 'revocation-wait' });
let db: TestDatabase;
let userId = '';

test.before(async () => {
  db = await startDatabase();
  await migrate(db.sql, log);
  const u = await createUser(db.sql, { email: 'wait@example.test', name: 'wait', role: 'member' });
  if (u === 'taken') throw new Error('taken');
  userId = u.id;
});

test.after(async () => {
  await db?.stop();
});

async function memberRow(nodeId: string, id: string): Promise<string> {
  const session = randomUUID();
  await db.sql`insert into cluster_tunnels (id, user_id, tunnel_type, url) values (${id}, ${userId}, 'http', ${`http://${id}`}) on conflict do nothing`;
  await db.sql`insert into cluster_members (session_id, tunnel_id, node_id, user_id, key_id, client) values (${session}, ${id}, ${nodeId}, ${userId}, ${randomUUID()}, 'c')`;
  return session;
}

test('awaitGone answers when the notification of the last member\'s end arrives, and counts nothing in between', async () => {
  const node = new ClusterNode(db.sql, log, 'http://127.0.0.2:9', { event() {}, reconcile() {}, fenced() {} });
  await node.start();
  // Its own arrival (a `node` notification) is heard before the wait begins.
  await new Promise((r) => setTimeout(r, 300));
  try {
    const [s1, s2] = [await memberRow(node.id, 'w1'), await memberRow(node.id, 'w2')];
    let answered: boolean | null = null;
    const started = performance.now();
    const wait = node.awaitGone({ userIds: [userId] }).then((gone) => (answered = gone));
    // One member ends as a node ends it: its row goes with a notification; one is left.
    await releaseMember(db.sql, 'w1', s1);
    await new Promise((r) => setTimeout(r, 300));
    assert.is(answered, null, 'one member is left');
    // The other row goes without a word (no notification): the wait does not see it on its own.
    await db.sql`delete from cluster_members where session_id = ${s2}`;
    await new Promise((r) => setTimeout(r, 400));
    assert.is(answered, null, 'no notification since the last row went: still waiting (no timer counts again)');
    // Any notification that a member row went makes it count again.
    await db.sql`select burrow_cluster_notify(${JSON.stringify({ t: 'route', id: 'w2' })}::text::jsonb)`;
    await wait;
    assert.is(answered, true);
    assert.ok(performance.now() - started < 3_000, 'answered well before the wait runs out');
  } finally {
    await node.stop();
  }
});

test('own invalidations: the notification of this node\'s own change is skipped once; another kind, a later change, or one that ran first is not', () => {
  const own = new OwnInvalidations();
  const t0 = 1_000_000;
  own.mark(['k1'], ['u1'], true, t0);
  assert.equal(own.take('key', ['k1', 'k2'], t0 + 10), ['k2'], 'k1 was revoked here: its notification finds it done');
  assert.equal(own.take('key', ['k1'], t0 + 20), ['k1'], 'a mark is used once');
  assert.equal(own.take('user-cache', ['u1'], t0 + 30), ['u1'], 'a role change is not what this node did (a deactivation)');
  assert.equal(own.take('user-end', ['u1'], t0 + 40), [], 'the deactivation\'s own notification');
  // A mark is not kept for long.
  own.mark([], ['u2'], false, t0);
  assert.equal(own.take('user-cache', ['u2'], t0 + 5_000), ['u2']);
  // The notification came before the API's own message: not marked (the next one is another change).
  assert.equal(own.take('user-end', ['u3'], t0), ['u3']);
  own.mark([], ['u3'], true, t0 + 100);
  assert.equal(own.take('user-end', ['u3'], t0 + 200), ['u3']);
  // A key invalidated without ending connections is not what a key's notification does.
  own.mark(['k4'], [], false, t0);
  assert.equal(own.take('key', ['k4'], t0 + 1), ['k4']);
  // The reconcile forgets every mark.
  own.mark(['k5'], [], true, t0);
  own.forget();
  assert.equal(own.take('key', ['k5'], t0 + 1), ['k5']);
});

test.run();
