import { ROUTES } from './router.js';
import { API_PREFIX } from './route.js';
import { PROBLEMS, type ProblemCode } from '../errors.js';
import type { TSchema } from '@sinclair/typebox';
import * as S from './schemas.js';

// OpenAPI 3.1 generated from the route table and the very schemas requests are validated
// with, so the document cannot drift from the server.
const COMPONENTS: TSchema[] = [S.ApiScope, S.Role, S.TeamRole, S.ApiKey, S.CreatedKey, S.Account, S.User, S.Session, S.Team, S.TeamMember, S.Tunnel, S.Reservation, S.Domain, S.Empty, S.ProblemSchema];

/** Replaces any component schema (by $id) nested in `s` with a $ref to it. */
function refs(s: unknown, top = true): unknown {
  if (Array.isArray(s)) return s.map((x) => refs(x, false));
  if (!s || typeof s !== 'object') return s;
  const o = s as Record<string, unknown>;
  if (!top && typeof o.$id === 'string' && COMPONENTS.some((c) => c.$id === o.$id)) return { $ref: `#/components/schemas/${o.$id}` };
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (k !== '$id') out[k] = refs(v, false);
  return out;
}

const ALWAYS: ProblemCode[] = ['unauthorized', 'too-many-requests', 'internal', 'unavailable'];

export function openApiDocument(baseUrl: string): unknown {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of ROUTES) {
    const codes = [...new Set<ProblemCode>([...r.errors, ...ALWAYS])].sort((a, b) => PROBLEMS[a].status - PROBLEMS[b].status);
    const responses: Record<string, unknown> = {
      [r.status]: { description: r.summary, content: { 'application/json': { schema: refs(r.response, false) } } },
    };
    for (const c of codes) {
      responses[PROBLEMS[c].status] = {
        description: `${PROBLEMS[c].title} (type /problems/${c})`,
        content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
    }
    const parameters = [
      ...Object.entries(r.params ?? {}).map(([name, kind]) => ({
        name, in: 'path', required: true, schema: kind === 'uuid' ? { type: 'string', format: 'uuid' } : { type: 'string' },
      })),
      ...Object.entries(r.query?.properties ?? {}).map(([name, schema]) => ({ name, in: 'query', required: false, schema: refs(schema, false) })),
    ];
    const op: Record<string, unknown> = {
      operationId: r.operationId,
      summary: r.summary,
      'x-burrow-scope': r.scope,
      ...(r.adminOnly ? { 'x-burrow-role': 'admin' } : {}),
      security: [{ bearer: [] }],
      ...(parameters.length ? { parameters } : {}),
      ...(r.body ? { requestBody: { required: true, content: { 'application/json': { schema: refs(r.body, false) } } } } : {}),
      responses,
    };
    (paths[API_PREFIX + r.path] ??= {})[r.method] = op;
  }
  return {
    openapi: '3.1.0',
    info: { title: 'burrow management API', version: '1.0.0', description: 'Tunnel server management API. Errors are RFC 9457 problem+json.' },
    servers: [{ url: baseUrl }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'API key: bk_<id>_<secret>' } },
      schemas: Object.fromEntries(COMPONENTS.map((c) => [c.$id!, refs(c)])),
    },
  };
}
