import type { TSchema } from '@sinclair/typebox';
import { Value, type ValueError } from '@sinclair/typebox/value';
import { ApiError, type FieldError } from '../errors.js';

// Request validation against the same schemas openapi.json is generated from.
// Every error names the field and the value it got, so a script's author can fix it.

function fieldOf(e: ValueError, where: string): string {
  return e.path ? e.path.slice(1).replaceAll('/', '.') : where;
}

function messageOf(e: ValueError): string {
  const s = e.schema as { anyOf?: { const?: unknown }[]; format?: string; minimum?: number; maximum?: number; type?: string };
  const allowed = s.anyOf?.map((x) => x.const).filter((x) => x !== undefined);
  if (allowed && allowed.length) return `must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}`;
  if (s.format === 'uuid') return 'must be a UUID';
  if (s.format === 'email') return 'must be an email address such as name@example.com';
  if (s.format === 'date-time') return 'must be an ISO 8601 date-time such as 2030-01-31T12:00:00Z';
  if (s.type === 'integer' && s.minimum !== undefined && s.maximum !== undefined) return `must be an integer in ${s.minimum}..${s.maximum}`;
  if (e.message.startsWith('Unexpected property')) return 'is not a known field';
  if ((e.schema as { pattern?: string }).pattern !== undefined) return 'must be one line with a visible character and no control characters';
  return e.message.charAt(0).toLowerCase() + e.message.slice(1);
}

function show(v: unknown): string {
  let s: string | undefined;
  try {
    s = JSON.stringify(v);
  } catch {
    return 'a value nested too deeply to show'; // 64 KiB of [[[[…: the stack ends before the JSON
  }
  return s === undefined ? 'nothing' : s.length > 60 ? s.slice(0, 57) + '...' : s;
}

export function validate<T>(schema: TSchema, value: unknown, where: 'body' | 'query'): T {
  if (Value.Check(schema, value)) return value as T;
  const errors: FieldError[] = [];
  const seen = new Set<string>();
  for (const e of Value.Errors(schema, value)) {
    const field = fieldOf(e, where);
    if (seen.has(field)) continue; // unions report every branch; the first says enough
    seen.add(field);
    errors.push({ field, message: `${messageOf(e)}, got ${show(e.value)}` });
    if (errors.length >= 10) break;
  }
  const first = errors[0]!;
  const detail = first.field === where ? `${where} ${first.message}` : `${where} field "${first.field}" ${first.message}`;
  throw new ApiError('bad-request', detail, errors);
}

/** Query strings are text: convert "10" and "true" as the schema says, then validate. */
export function validateQuery<T>(schema: TSchema, query: URLSearchParams): T {
  const raw: Record<string, string> = {};
  for (const [k, v] of query) {
    if (k in raw) throw new ApiError('bad-request', `query parameter "${k}" is given more than once`);
    raw[k] = v;
  }
  // Convert parseInt()s integers: "1e2" would become 1, "1.5" 1 and "0x10" 16, silently
  // answering something else than was asked. Only plain decimal digits count as an integer.
  // (Convert may change its argument in place: hence the copy.)
  const converted = Value.Convert(schema, { ...raw }) as Record<string, unknown>;
  const properties = (schema as { properties?: Record<string, { type?: string }> }).properties ?? {};
  for (const [k, v] of Object.entries(raw)) {
    if (properties[k]?.type === 'integer' && !/^[+-]?\d+$/.test(v)) converted[k] = v;
  }
  return validate<T>(schema, converted, 'query');
}
