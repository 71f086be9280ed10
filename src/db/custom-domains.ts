import type { Sql } from './sql.js';

// custom_domains (migration 010): a name, its owner (a user, and optionally their team), the
// tunnel it routes to once verified, and the state of its ownership check.

export interface DomainRow {
  name: string;
  user_id: string;
  team_id: string | null;
  tunnel: string;
  token: string;
  verified_at: Date | null;
  last_check_at: Date | null;
  last_error: string | null;
  created_at: Date;
}

/** Custom domains one user may add (their own, whatever team). */
export const MAX_DOMAINS_PER_USER = 50;

export async function domain(sql: Sql, name: string): Promise<DomainRow | null> {
  const [row] = await sql<DomainRow[]>`select * from custom_domains where name = ${name}`;
  return row ?? null;
}

/** The domains `userId` added, and those of `teamIds` (null: every domain, for an admin). */
export async function domainsVisibleTo(sql: Sql, userId: string, teamIds: string[] | null): Promise<DomainRow[]> {
  if (teamIds === null) return sql<DomainRow[]>`select * from custom_domains order by name`;
  return sql<DomainRow[]>`select * from custom_domains where user_id = ${userId} or team_id = any(${teamIds}::uuid[]) order by name`;
}

export async function countDomains(sql: Sql, userId: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from custom_domains where user_id = ${userId}`;
  return row!.n;
}

/** Null when the name is taken (by anyone). */
export async function insertDomain(sql: Sql, d: Pick<DomainRow, 'name' | 'user_id' | 'team_id' | 'tunnel' | 'token'>): Promise<DomainRow | null> {
  const [row] = await sql<DomainRow[]>`
    insert into custom_domains (name, user_id, team_id, tunnel, token) values (${d.name}, ${d.user_id}, ${d.team_id}, ${d.tunnel}, ${d.token})
    on conflict (name) do nothing returning *`;
  return row ?? null;
}

export async function recordCheck(sql: Sql, name: string, error: string | null): Promise<DomainRow | null> {
  const [row] = await sql<DomainRow[]>`
    update custom_domains set last_check_at = now(), last_error = ${error},
      verified_at = case when ${error}::text is null then coalesce(verified_at, now()) else verified_at end
    where name = ${name} returning *`;
  return row ?? null;
}

export async function deleteDomain(sql: Sql, name: string): Promise<void> {
  await sql`delete from custom_domains where name = ${name}`;
  await sql`delete from acme_certificates where name = ${name}`;
}

/** Verified domains and their tunnels: what the front routes by Host. */
export async function verifiedRoutes(sql: Sql): Promise<Map<string, string>> {
  const rows = await sql<{ name: string; tunnel: string }[]>`select name, tunnel from custom_domains where verified_at is not null`;
  return new Map(rows.map((r) => [r.name, r.tunnel]));
}

/** Unverified domains added within the last week, least recently checked first (the background check). */
export async function pendingDomains(sql: Sql, limit: number): Promise<DomainRow[]> {
  return sql<DomainRow[]>`select * from custom_domains where verified_at is null and created_at > now() - interval '7 days' order by last_check_at nulls first limit ${limit}`;
}

/** Verified domains without a certificate yet (issued on their first need, or retried). */
export async function domainsWithoutCertificate(sql: Sql, limit: number): Promise<DomainRow[]> {
  return sql<DomainRow[]>`select d.* from custom_domains d left join acme_certificates c on c.name = d.name where d.verified_at is not null and c.name is null order by d.verified_at limit ${limit}`;
}
