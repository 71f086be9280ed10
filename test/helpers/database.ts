import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { connect, type Sql } from '../../src/db/sql.js';
import { startEmbedded } from '../../src/db/embedded.js';
import { postgresBinDir } from '../../src/db/embedded-postgres.js';
import { createLogger } from '../../src/log.js';

// A fresh database per test server: the embedded database (default: PostgreSQL from the
// platform package, see src/db/embedded.ts), or a schema of its own on the PostgreSQL named by
// TEST_DATABASE_URL (dropped afterwards), so test files can run in parallel against one server.
export interface TestDatabase {
  url: string;
  kind: 'embedded' | 'postgres';
  sql: Sql;
  stop(): Promise<void>;
}

const log = createLogger('warn', { test: 'database' });
const bin = postgresBinDir();
// A freshly initialised cluster, shared by every test process (keyed by the binaries' version):
// each test server starts from a copy of it instead of running initdb.
const binVersion = bin ? (JSON.parse(readFileSync(join(bin, '..', '..', 'package.json'), 'utf8')) as { version: string }).version : 'none';
const TEMPLATE = join(tmpdir(), `burrow-postgres-template-${binVersion}`);

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
