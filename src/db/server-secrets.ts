import { randomBytes } from 'node:crypto';
import type { Sql } from './sql.js';

const SECRET_BYTES = 32;

/** The secret called `name`, made on first use; every process on the database gets the same one. */
export async function serverSecret(sql: Sql, name: string): Promise<Buffer> {
  await sql`insert into server_secrets (name, secret) values (${name}, ${randomBytes(SECRET_BYTES)}) on conflict (name) do nothing`;
  const [row] = await sql<{ secret: Buffer }[]>`select secret from server_secrets where name = ${name}`;
  return Buffer.from(row!.secret);
}
