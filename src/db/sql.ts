import postgres from 'postgres';

export type Sql = postgres.Sql<Record<string, never>>;

/**
 * One postgres.js pool. The same code runs on PostgreSQL and on the embedded PGlite
 * (served over the wire protocol by pglite-socket), so `url` is all that differs.
 */
export function connect(url: string, opts: { max: number; applicationName: string }): Sql {
  return postgres(url, {
    max: opts.max,
    idle_timeout: 30,
    connect_timeout: 10,
    onnotice: () => undefined,
    connection: { application_name: opts.applicationName },
  }) as unknown as Sql;
}

/** ISO 8601 UTC with Z, or null (decisions.md: every field present, null when unset). */
export function iso(d: Date | string | null | undefined): string | null {
  if (d === null || d === undefined) return null;
  return (d instanceof Date ? d : new Date(d)).toISOString();
}

export function isoRequired(d: Date | string): string {
  return (d instanceof Date ? d : new Date(d)).toISOString();
}

/** Postgres error code of a unique-constraint violation, with the constraint name. */
export function uniqueViolation(err: unknown): string | null {
  const e = err as { code?: string; constraint_name?: string };
  return e?.code === '23505' ? (e.constraint_name ?? 'unique') : null;
}

export function foreignKeyViolation(err: unknown): boolean {
  return (err as { code?: string })?.code === '23503';
}
