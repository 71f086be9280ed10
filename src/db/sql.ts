import net from 'node:net';
import postgres from 'postgres';
import { watchResponses } from './response-watchdog.js';

export type Sql = postgres.Sql<Record<string, never>>;

/** A bounded pool's new connection must be ready within this (a refused or frozen database fails fast). */
export const CONNECT_TIMEOUT_S = 3;
/** The main pool's: start-up (migrations) on a busy embedded database must not fail for a slow connect. */
const MAIN_CONNECT_TIMEOUT_S = 10;
/** Server-side cap on one statement of a bounded pool (the API's queries are all short). */
export const STATEMENT_TIMEOUT_MS = 3_000;
/** A bounded pool's connection that waits this long for any answer is destroyed (a frozen link). */
export const RESPONSE_TIMEOUT_MS = STATEMENT_TIMEOUT_MS + 1_000;

export interface PoolOptions {
  max: number;
  applicationName: string;
  /**
   * Short connect timeout, statement timeout and response watchdog: for pools that serve callers who wait (the API).
   * The main pool runs migrations and retries its stats flush by itself, so it stays unbounded.
   */
  bounded?: boolean;
}

/** The SQLSTATE codes and postgres.js / socket errors that mean "the database is not reachable now". */
const DOWN_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN',
  'CONNECT_TIMEOUT', 'CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED',
  '57P01', '57P02', '57P03', '53300', '57014',
]);

export function isDatabaseDown(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  // Class 08: connection exceptions.
  return DOWN_CODES.has(code) || code.startsWith('08');
}

function sslRequested(url: string): boolean {
  try {
    const mode = new URL(url).searchParams.get('sslmode') ?? new URL(url).searchParams.get('ssl');
    return mode !== null && mode !== 'disable' && mode !== 'false';
  } catch {
    return false;
  }
}

/**
 * One postgres.js pool. The same code runs on PostgreSQL and on the embedded PGlite
 * (served over the wire protocol by pglite-socket), so `url` is all that differs.
 */
export function connect(url: string, opts: PoolOptions): Sql {
  // The watchdog reads the backend's message framing, which TLS hides: plain connections only.
  const watch = opts.bounded === true && !sslRequested(url);
  return postgres(url, {
    max: opts.max,
    idle_timeout: 30,
    connect_timeout: opts.bounded ? CONNECT_TIMEOUT_S : MAIN_CONNECT_TIMEOUT_S,
    // postgres.js waits up to 20 s (3^failures / 100) before reconnecting after failures: the
    // first call after an outage would wait for it. A short cap lets the pool recover at once.
    backoff: (retries: number) => Math.min(0.05 * retries, 0.5),
    onnotice: () => undefined,
    connection: opts.bounded ? { application_name: opts.applicationName, statement_timeout: STATEMENT_TIMEOUT_MS } : { application_name: opts.applicationName },
    ...(watch
      ? {
          socket: ({ host, port, path }: { host: string[]; port: number[]; path?: string | false }) => {
            const s = path ? net.connect(path) : net.connect({ host: host[0]!, port: port[0]! });
            watchResponses(s, RESPONSE_TIMEOUT_MS);
            return s;
          },
        }
      : {}),
  } as postgres.Options<Record<string, never>>) as unknown as Sql;
}

/** ISO 8601 UTC with Z, or null (every field present, null when unset). */
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

/** The cheapest round trip: readiness asks whether the database answers at all. */
export async function ping(sql: Sql): Promise<void> {
  await sql`select 1`;
}
