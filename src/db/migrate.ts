import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Sql } from './sql.js';
import type { Logger } from '../log.js';

// Numbered SQL files, applied in order, each in its own transaction, once. An advisory
// lock makes concurrent starts against one database (several burrowd) take turns.
const MIGRATIONS_DIR = fileURLToPath(new URL('../../../src/db/migrations/', import.meta.url));
const LOCK_ID = 0x62757272; // "burr"

export async function migrate(sql: Sql, log: Logger): Promise<void> {
  const files = readdirSync(MIGRATIONS_DIR)
    .filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f))
    .sort();
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${LOCK_ID})`;
    await tx`create table if not exists schema_migrations (version int primary key, name text not null, applied_at timestamptz not null default now())`;
    const done = new Set((await tx<{ version: number }[]>`select version from schema_migrations`).map((r) => r.version));
    for (const file of files) {
      const version = Number(file.slice(0, 3));
      if (done.has(version)) continue;
      await tx.unsafe(readFileSync(MIGRATIONS_DIR + file, 'utf8'));
      await tx`insert into schema_migrations (version, name) values (${version}, ${file})`;
      log.info({ migration: file }, 'migration applied');
    }
  });
}
