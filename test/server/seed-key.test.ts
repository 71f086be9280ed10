// --seed-api-key across restarts: the same key is printed again and keeps working (so do a
// context and a running `burrow http` made with it); the kept copy is owner-only; a revoked or
// non-verifying copy is replaced by a new key, and the earlier seed key is revoked.
import { createServer, type Server } from 'node:http';
import { readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { api } from '../helpers/fixtures.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { startDatabase } from '../helpers/database.js';
import argon2 from 'argon2';
import { SEED_EMAIL, ensureSeedKey } from '../../src/seed-key.js';
import { ensureUser } from '../../src/db/users.js';
import { createLogger } from '../../src/log.js';
import { migrate } from '../../src/db/migrate.js';
import { exitOf, spawnBurrow, tempDir, waitFor } from '../cli/harness.js';

const servers: TestServer[] = [];
let web: Server | null = null;
let home: { dir: string; remove: () => void } | null = null;
let child: ReturnType<typeof spawnBurrow> | null = null;
const dataDirs: string[] = [];

test.after(async () => {
  child?.kill('SIGKILL');
  web?.close();
  for (const s of servers.reverse()) await s.stop().catch(() => null);
  for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
  home?.remove();
});

/** Stops `prev` keeping its database and data dir, starts burrowd again on both (same port). */
async function restart(prev: TestServer): Promise<TestServer> {
  await prev.stop({ keepDatabase: true });
  const next = await startServer({ db: prev.db, dataDir: prev.dataDir, args: ['--port', String(prev.port)] });
  servers.push(next);
  return next;
}

const seedFile = (t: TestServer) => join(t.dataDir, 'seed-api-key');

test('a restart prints the same seed key, kept owner-only; a burrow http using it reconnects', async () => {
  const first = await startServer();
  servers.push(first);
  dataDirs.push(first.dataDir);
  const file = seedFile(first);
  assert.is(readFileSync(file, 'utf8').trim(), first.adminKey);
  assert.is(statSync(file).mode & 0o777, 0o600, 'the kept key is readable by its owner only');

  web = createServer((req, res) => res.end(`ok ${req.url}`));
  await new Promise<void>((r) => web!.listen(0, '127.0.0.1', r));
  home = tempDir();
  child = spawnBurrow({ configDir: home.dir, env: { BURROW_SERVER: first.url, BURROW_TOKEN: first.adminKey } }, ['http', String((web.address() as { port: number }).port), '--id', 'seeded']);
  const c = child;
  await waitFor(() => (c.output.stdout.includes('\n') ? true : undefined), 20_000, 'tunnel URL');

  const second = await restart(first);
  assert.is(second.adminKey, first.adminKey, 'the same key is printed again');
  assert.is((await api(second, 'GET', '/me', { key: first.adminKey })).status, 200);
  assert.ok(second.stderr().includes('"msg":"seed key kept"'));
  // Before, the restart revoked the key and the client gave up with exit 3 (auth).
  await waitFor(() => (/^reconnected$/m.test(c.output.stderr) ? true : undefined), 45_000, `reconnected line: ${c.output.stderr.slice(-500)}`);
  assert.is(c.exitCode, null, c.output.stderr);
  c.kill('SIGINT');
  assert.is(await exitOf(c, 10_000, 'burrow http exit'), 0);
  child = null;
});

test('a revoked seed key is replaced at the next start; so is a kept copy that does not verify', async () => {
  const first = await startServer({ workers: 1 });
  servers.push(first);
  dataDirs.push(first.dataDir);
  const keys = await api(first, 'GET', '/keys', { key: first.adminKey });
  const seed = (keys.body as { id: string; name: string }[]).find((k) => k.name === 'seed')!;
  assert.is((await api(first, 'DELETE', `/keys/${seed.id}`, { key: first.adminKey })).status, 200);

  const second = await restart(first);
  assert.is.not(second.adminKey, first.adminKey);
  assert.is((await api(second, 'GET', '/me', { key: second.adminKey })).status, 200);
  assert.is((await api(second, 'GET', '/me', { key: first.adminKey })).status, 401);
  assert.is(readFileSync(seedFile(second), 'utf8').trim(), second.adminKey, 'the new key is kept');
  assert.is(statSync(seedFile(second)).mode & 0o777, 0o600);

  // A copy whose secret does not match the database (e.g. from another database): replaced,
  // and the key it stood for (the current seed key) revoked.
  const last = second.adminKey.slice(-1);
  writeFileSync(seedFile(second), second.adminKey.slice(0, -1) + (last === 'a' ? 'b' : 'a') + '\n', { mode: 0o600 });
  const third = await restart(second);
  assert.is.not(third.adminKey, second.adminKey);
  assert.is((await api(third, 'GET', '/me', { key: third.adminKey })).status, 200);
  assert.is((await api(third, 'GET', '/me', { key: second.adminKey })).status, 401);
});

test('nodes of one database issuing the seed key at the same moment all succeed: the key is replaced in turn, never a conflict on its name', async () => {
  // What several burrowd of one database do when they start together with --seed-api-key (each
  // with a data dir of its own), at the same instant: the race a loaded machine showed.
  const db = await startDatabase();
  const dirs = [0, 1, 2, 3, 4, 5, 6, 7].map(() => tempDir('burrow-seed-'));
  try {
    // One hash made beforehand (the keys are never used here): every caller reaches its
    // transaction in the same turn, as argon2's pool lets them under load.
    const hashed = await argon2.hash('unused');
    const deps = { sql: db.sql, log: createLogger('silent'), hash: async () => hashed, verify: (h: string, s: string) => argon2.verify(h, s) };
    await migrate(db.sql, deps.log);
    await ensureUser(db.sql, SEED_EMAIL, 'Seed admin', 'admin'); // so every caller reaches the key at once
    const results = await Promise.allSettled(dirs.map((d) => ensureSeedKey(deps, d.dir)));
    assert.equal(results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'ok')), dirs.map(() => 'ok'));
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from api_keys where name = 'seed' and revoked_at is null`;
    assert.is(row!.n, 1, 'one seed key stays active: the last one issued');
  } finally {
    for (const d of dirs) d.remove();
    await db.stop();
  }
});

test.run();
