import type { Sql } from './sql.js';
import { isoRequired } from './sql.js';
import type { Account } from '../api/schemas.js';

export async function listAccounts(sql: Sql, userId: string): Promise<Account[]> {
  const rows = await sql<{ id: string; provider: string; created_at: Date }[]>`
    select id, provider, created_at from accounts where user_id = ${userId} order by created_at, id`;
  return rows.map((r) => ({ id: r.id, provider: r.provider, created_at: isoRequired(r.created_at) }));
}
