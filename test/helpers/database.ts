import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { connect, type Sql } from '../../src/db/sql.js';
import { startEmbedded, type EmbeddedDb } from '../../src/db/embedded.js';
import { postgresBinDir } from '../../src/db/embedded-postgres.js';
import { createLogger } from '../../src/log.js';

// A fresh database per test server, so test files can run in parallel against one PostgreSQL:
//   TEST_DATABASE_URL    a schema of its own on that server (dropped afterwards);
//   TEST_EMBEDDED_URL    a database of its own on the embedded cluster the runner started for
//                        the whole suite (test/run.ts; dropped afterwards);
//   neither (one file run by hand): an embedded cluster of its own, stopped afterwards.
export interface TestDatabase {
  url: string;
  kind: 'embedded' | 'postgres';
  sql: Sql;
  stop(): Promise<void>;
}

const log = createLogger('warn', { test: 'database' });
const bin = postgresBinDir();
// A freshly initialised cluster, shared by every test process (keyed by the binaries' version):
// each cluster starts from a copy of it instead of running initdb.
const binVersion = bin ? (JSON.parse(readFileSync(join(bin, '..', '..', 'package.json'), 'utf8')) as { version: string }).version : 'none';
const TEMPLATE = join(tmpdir(), `burrow-postgres-template-${binVersion}`);

/** The embedded cluster the whole suite shares (the runner starts it once). */
export function startSharedEmbedded(): Promise<EmbeddedDb> {
  // Every test server of the files running at once holds a pool.
  // Its log is quiet: the suite's tests make PostgreSQL log errors (constraint violations) on purpose.
  return startEmbedded('memory://', createLogger('fatal', { test: 'database' }), { templateDir: TEMPLATE, maxConnections: 500 });
}

/** A database (or schema) of its own on the server at `adminUrl`, dropped by stop(). */
async function isolated(adminUrl: string, kind: TestDatabase['kind'], separate: 'database' | 'schema'): Promise<TestDatabase> {
  const name = `t_${randomBytes(6).toString('hex')}`;
  const admin = connect(adminUrl, { max: 1, applicationName: 'burrow-test' });
  await admin.unsafe(`create ${separate} ${name}`);
  const u = new URL(adminUrl);
  if (separate === 'database') u.pathname = `/${name}`;
  else u.searchParams.set('search_path', name);
  const url = u.toString();
  const sql = connect(url, { max: 4, applicationName: 'burrow-test' });
  return {
    url,
    kind,
    sql,
    async stop() {
      await sql.end({ timeout: 1 });
      // A server the test killed may leave sessions behind: force them out.
      await admin.unsafe(separate === 'database' ? `drop database ${name} with (force)` : `drop schema ${name} cascade`);
      await admin.end({ timeout: 1 });
    },
  };
}

export async function startDatabase(): Promise<TestDatabase> {
  const pg = process.env.TEST_DATABASE_URL;
  if (pg) return isolated(pg, 'postgres', 'schema');
  const shared = process.env.TEST_EMBEDDED_URL;
  if (shared) return isolated(shared, 'embedded', 'database');
  const db = await startEmbedded('memory://', log, { templateDir: TEMPLATE, maxConnections: 100 });
  const sql = connect(db.url, { max: 4, applicationName: 'burrow-test' });
  return {
    url: db.url,
    kind: 'embedded',
    sql,
    async stop() {
      await sql.end({ timeout: 1 });
      await db.stop();
    },
  };
}
