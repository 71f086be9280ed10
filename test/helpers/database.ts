import { randomBytes } from 'node:crypto';
import { connect, type Sql } from '../../src/db/sql.js';
import { startEmbedded } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';

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
  const db = await startEmbedded('memory://', log);
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
