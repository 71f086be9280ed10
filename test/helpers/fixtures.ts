import argon2 from 'argon2';
import { generateKey } from '../../src/auth/key-format.js';
import type { TestServer } from './server.js';
import { withDeadline } from './deadline.js';
export { withDeadline, eventually } from './deadline.js';

// Users and keys created straight in the database (as the issue allows), and a small API client.
let seq = 0;

export async function createUser(
  t: Pick<TestServer, 'sql'>,
  o: { email?: string; role?: 'admin' | 'member'; deactivated?: boolean; name?: string } = {},
): Promise<{ id: string; email: string }> {
  const email = o.email ?? `user${++seq}-${Date.now()}@example.test`;
  const [r] = await t.sql<{ id: string }[]>`insert into users (email, name, role, deactivated_at)
    values (${email}, ${o.name ?? 'Test User'}, ${o.role ?? 'member'}, ${o.deactivated ? new Date() : null}) returning id`;
  return { id: r!.id, email };
}

export async function createKeyFor(
  t: Pick<TestServer, 'sql'>,
  userId: string,
  o: { scopes?: string[]; expiresAt?: Date | null; revoked?: boolean; name?: string } = {},
): Promise<string> {
  const { key, prefix } = generateKey();
  const hash = await argon2.hash(key, { type: argon2.argon2id, memoryCost: 19_456, timeCost: 2, parallelism: 1 });
  await t.sql`insert into api_keys (user_id, name, key_prefix, key_hash, scopes, expires_at, revoked_at)
    values (${userId}, ${o.name ?? `k${++seq}`}, ${prefix}, ${hash}, ${t.sql.array(o.scopes ?? ['tunnels', 'management'])},
            ${o.expiresAt ?? null}, ${o.revoked ? new Date() : null})`;
  return key;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  text: string;
}

export async function api(
  t: Pick<TestServer, 'url'>,
  method: string,
  path: string,
  o: { key?: string; body?: unknown; headers?: Record<string, string>; rawBody?: string | Buffer } = {},
): Promise<ApiResponse> {
  const headers: Record<string, string> = { ...o.headers };
  if (o.key) headers.authorization = `Bearer ${o.key}`;
  let body: string | Buffer | undefined = o.rawBody;
  if (o.body !== undefined) {
    body = JSON.stringify(o.body);
    headers['content-type'] ??= 'application/json';
  }
  const url = path.startsWith('/api/') || path.startsWith('/auth/') || path.startsWith('/healthz') || path.startsWith('/readyz') || path.startsWith('/__') ? path : `/api/v1${path}`;
  const res = await withDeadline(fetch(t.url + url, { method, headers, body }), 10_000, `${method} ${path}`);
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON: keep the text */
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}
