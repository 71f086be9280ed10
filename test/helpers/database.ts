import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { connect, type Sql } from '../../src/db/sql.js';
import { startEmbedded } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';

const pgliteVersion = (JSON.parse(readFileSync(new URL('../../../node_modules/@electric-sql/pglite/package.json', import.meta.url), 'utf8')) as { version: string }).version;

// A fresh database per test server: the embedded PGlite (default), or a schema of its own
// on the PostgreSQL named by TEST_DATABASE_URL (dropped afterwards), so test files can run
// in parallel against one server.
export interface TestDatabase {
  url: string;
  kind: 'pglite' | 'postgres';
  sql: Sql;
  stop(): Promise<void>;
}

const log = createLogger('warn', { test: 'database' });
// A dump of a freshly initialised PGlite, shared by every test process (keyed by version).
const TEMPLATE = join(tmpdir(), `burrow-pglite-template-${pgliteVersion}.tar`);

export async function startDatabase(): Promise<TestDatabase> {
  const pg = process.env.TEST_DATABASE_URL;
  if (pg) {
    const schema = `t_${randomBytes(6).toString('hex')}`;
    const admin = connect(pg, { max: 1, applicationName: 'burrow-test' });
    await admin.unsafe(`create schema ${schema}`);
    const u = new URL(pg);
    u.searchParams.set('search_path', schema);
    const url = u.toString();
    const sql = connect(url, { max: 4, applicationName: 'burrow-test' });
    return {
      url,
      kind: 'postgres',
      sql,
      async stop() {
        await sql.end({ timeout: 1 });
        await admin.unsafe(`drop schema ${schema} cascade`);
        await admin.end({ timeout: 1 });
      },
    };
  }
  const db = await startEmbedded('memory://', log, { templateFile: TEMPLATE });
  const sql = connect(db.url, { max: 4, applicationName: 'burrow-test' });
  return {
    url: db.url,
    kind: 'pglite',
    sql,
    async stop() {
      await sql.end({ timeout: 1 });
      await db.stop();
    },
  };
}
