import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import '../helpers/property.js';
import { randomUUID } from 'node:crypto';
import { startDatabase, type TestDatabase } from '../helpers/database.js';
import { migrate } from '../../src/db/migrate.js';
import { createUser } from '../../src/db/users.js';
import { addMember, createTeamWithOwner } from '../../src/db/teams.js';
import { claimTunnel, type TunnelClaim } from '../../src/db/cluster.js';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { ApiError } from '../../src/errors.js';
import { RegistryActor, type ShardDirectory } from '../../src/actors/registry.js';
import { claimRefusalProblem, decideClaim, type ClaimRequest, type HeldRegistration } from '../../src/protocol/admission.js';
import type { AccessWire } from '../../src/protocol/access.js';
import type { TunnelAdmitted, TunnelMainToShard, TunnelShardToMain } from '../../src/protocol/tunnel-messages.js';

// Who may claim a live id: one rule (decideClaim), used by a node alone on its registration in
// memory and by a cluster on the row claimTunnel reads FOR UPDATE. As a table, then as a property:
// for any registration and any Open, the registry in memory and the database's claim give the
// same answer (admitted as the same kind, or refused with the same code and words).

const log = createLogger('error', { test: 'admission' });

const tag = (b: number): Uint8Array => new Uint8Array(32).fill(b);
const rules = {
  none: null,
  allow: { key: null, digests: [], allowIp: ['10.0.0.0/8'], denyIp: [], expiresAt: null, credentialsTag: null },
  auth: { key: new Uint8Array(32).fill(7), digests: [new Uint8Array(32).fill(9)], allowIp: [], denyIp: [], expiresAt: null, credentialsTag: tag(1) },
} satisfies Record<string, AccessWire | null>;

const held = (o: Partial<HeldRegistration> = {}): HeldRegistration => ({ userId: 'u1', teamId: null, pool: false, type: 'http', access: null, ...o });
const req = (o: Partial<ClaimRequest> = {}): ClaimRequest => ({ userId: 'u1', teamId: null, pool: false, type: 'http', access: null, ...o });

test('decideClaim: the table', () => {
  const rows: [string, HeldRegistration | null, ClaimRequest, string][] = [
    ['a free id', null, req(), 'new'],
    ['a free id, as a pool of a team', null, req({ pool: true, teamId: 't1' }), 'new'],
    ['the same user again', held(), req(), 'takeover'],
    ['the same user, now asking for a pool', held(), req({ pool: true }), 'takeover'],
    ['the same user, now for a team', held(), req({ teamId: 't1' }), 'takeover'],
    ['the same user, another type', held(), req({ type: 'tcp' }), 'takeover'],
    ['another user', held(), req({ userId: 'u2' }), 'other-user'],
    ['another user of the same team, not a pool', held({ teamId: 't1' }), req({ userId: 'u2', teamId: 't1' }), 'other-user'],
    ['a pool of the user, joined', held({ pool: true }), req({ pool: true }), 'join-pool'],
    ['a pool of the user, without --pool', held({ pool: true }), req(), 'pool'],
    ['a pool of the user, another type', held({ pool: true }), req({ pool: true, type: 'tcp' }), 'other-user'],
    ['a pool of the user, asked for by the user for a team', held({ pool: true }), req({ pool: true, teamId: 't1' }), 'other-user'],
    ['a pool of a team, joined by another member', held({ pool: true, teamId: 't1' }), req({ pool: true, userId: 'u2', teamId: 't1' }), 'join-pool'],
    ['a pool of a team, by a member without --pool', held({ pool: true, teamId: 't1' }), req({ userId: 'u2', teamId: 't1' }), 'pool'],
    ['a pool of a team, from another team', held({ pool: true, teamId: 't1' }), req({ pool: true, userId: 'u2', teamId: 't2' }), 'other-user'],
    ['a pool of a team, by its own user without the team', held({ pool: true, teamId: 't1' }), req({ pool: true }), 'other-user'],
    ['a pool of another user', held({ pool: true }), req({ pool: true, userId: 'u2' }), 'other-user'],
    ['a pool with basic auth, joined with none', held({ pool: true, access: rules.auth }), req({ pool: true }), 'rules'],
    ['a pool with none, joined with an address rule', held({ pool: true }), req({ pool: true, access: rules.allow }), 'rules'],
    ['a pool with basic auth, joined with the same', held({ pool: true, access: rules.auth }), req({ pool: true, access: rules.auth }), 'join-pool'],
  ];
  for (const [what, h, r, expected] of rows) {
    const v = decideClaim(h, r);
    assert.is(v.ok ? v.kind : v.why, expected, what);
  }
  const v = decideClaim(held({ pool: true, access: rules.auth }), req({ pool: true }));
  assert.ok(!v.ok && v.why === 'rules');
  assert.match(claimRefusalProblem('api', v).detail, /basic auth differs \(the pool has basic auth\)/);
});

// ── the property: in memory and in the database alike ──

let db: TestDatabase;
const users: string[] = [];
let team = '';
let nodeId = '';

test.before(async () => {
  db = await startDatabase();
  await migrate(db.sql, log);
  for (const name of ['ann', 'ben', 'cat']) {
    const u = await createUser(db.sql, { email: `${name}@example.test`, name, role: 'member' });
    if (u === 'taken') throw new Error('taken');
    users.push(u.id);
  }
  // ann and ben are in the team, cat is not.
  team = (await createTeamWithOwner(db.sql, 'ops', users[0]!)).id;
  await addMember(db.sql, team, users[1]!);
  nodeId = randomUUID();
  await db.sql`insert into cluster_nodes (id, url, lease_until) values (${nodeId}, 'http://127.0.0.1:1', now() + interval '1 hour')`;
});

test.after(async () => {
  await db?.stop();
});

/** Shards that confirm everything (the property is about admission, not routes). */
const shards: ShardDirectory = {
  tell() {},
  ask: ((_: number, msg: TunnelMainToShard) => Promise.resolve(msg.type === 'tunnel-close' ? { closed: true } : null)) as ShardDirectory['ask'],
};

interface Open {
  user: number;
  team: boolean;
  pool: boolean;
  type: 'http' | 'tcp';
  access: keyof typeof rules;
}

type Outcome = { ok: true; tookOver: boolean } | { ok: false; code: string; detail: string };

const open = fc
  .record({ user: fc.integer({ min: 0, max: 2 }), team: fc.boolean(), pool: fc.boolean(), type: fc.constantFrom<'http' | 'tcp'>('http', 'tcp'), access: fc.constantFrom<keyof typeof rules>('none', 'allow', 'auth') })
  // What the registry refuses before the rule is not the rule's: a team the user is not in, a TCP pool.
  .map((o): Open => ({ ...o, team: o.team && o.user !== 2, type: o.pool ? 'http' : o.type }));

let seq = 0;

async function inMemory(id: string, max: number, others: number, first: Open | null, second: Open): Promise<Outcome> {
  const config = parseConfig(['--workers', '1', '--domain', 'tunnels.test', '--base-url', 'http://tunnels.test:8080', '--session-retention', 'off', '--id-grace', '0', '--max-tunnels-per-user', String(max)]);
  const r = new RegistryActor(log, shards, db.sql, config);
  await r.start();
  const msg = (o: Open, tunnelId: string): Extract<TunnelShardToMain, { type: 'tunnel-admit' }> => ({ type: 'tunnel-admit', userId: users[o.user]!, keyId: randomUUID(), tunnelType: o.type, id: tunnelId, teamId: o.team ? team : null, remotePort: null, clientIp: null, access: rules[o.access], claim: null, local: null, pool: o.pool, member: null });
  try {
    for (let i = 0; i < others; i++) await r.handle(0, msg({ ...second, pool: false, team: false }, `${id}-o${i}`));
    if (first) await r.handle(0, msg(first, id));
    const a = (await r.handle(0, msg(second, id))) as TunnelAdmitted;
    return { ok: true, tookOver: a.tookOver };
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { ok: false, code: e.code, detail: e.detail };
  } finally {
    await r.stop();
  }
}

async function inDatabase(id: string, max: number, others: number, first: Open | null, second: Open): Promise<Outcome> {
  const claim = (o: Open, tunnelId: string): TunnelClaim => ({ id: tunnelId, nodeId, sessionId: randomUUID(), userId: users[o.user]!, keyId: randomUUID(), teamId: o.team ? team : null, tunnelType: o.type, port: null, url: `http://${tunnelId}.tunnels.test:8080`, local: null, access: rules[o.access], clientIp: null, mode: o.pool ? { pool: true } : { plain: true }, client: randomUUID(), maxPerUser: max, maxTcpPorts: 100, maxRegistrationsPerMinute: 10_000 });
  try {
    for (let i = 0; i < others; i++) assert.ok((await claimTunnel(db.sql, claim({ ...second, pool: false, team: false }, `${id}-o${i}`))).ok);
    if (first) assert.ok((await claimTunnel(db.sql, claim(first, id))).ok, 'the first claim of a free id');
    const r = await claimTunnel(db.sql, claim(second, id));
    if (r.ok) return { ok: true, tookOver: r.replaced };
    return { ok: false, ...claimRefusalProblem(id, r) };
  } finally {
    await db.sql`delete from cluster_tunnels where id like ${`${id}%`}`;
    await db.sql`delete from sessions where tunnel_id like ${`${id}%`}`;
  }
}

test('property: for any registration and Open, the registry in memory and the claim on the database row agree', async () => {
  await fc.assert(
    fc.asyncProperty(fc.option(open, { nil: null }), open, fc.integer({ min: 1, max: 3 }), fc.integer({ min: 0, max: 2 }), async (first, second, max, others) => {
      // The other tunnels are admitted under the limit; the first Open is too, by its own user.
      fc.pre(others < max);
      const id = `p${++seq}`;
      const memory = await inMemory(`${id}m`, max, others, first, second);
      const database = await inDatabase(`${id}m`, max, others, first, second);
      assert.equal(database, memory, JSON.stringify({ first, second, max, others }));
    }),
    { numRuns: 100 },
  );
});

test.run();
