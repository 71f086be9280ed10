import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser } from '../helpers/fixtures.js';

// GET /api/v1/openapi.json: an OpenAPI 3.1 description of every operation of the management API, and the
// 5 added since (Create_user, Create_user_key, List_user_keys, Get_user_key, Revoke_user_key), with
// their success status and shape, their problem responses, and a component per resource
// whose fields are the ones the server really answers with.

/* eslint-disable @typescript-eslint/no-explicit-any */
type Json = any;

const P = '/api/v1';
/** [method, path, success status, response schema: component name, or [name] for an array] */
const OPERATIONS: [string, string, number, string | [string]][] = [
  ['get', '/keys', 200, ['ApiKey']],
  ['post', '/keys', 201, 'CreatedKey'],
  ['delete', '/keys/{id}', 200, 'Empty'],
  ['get', '/accounts', 200, ['Account']],
  ['get', '/me', 200, 'User'],
  ['get', '/sessions', 200, ['Session']],
  ['get', '/teams', 200, ['Team']],
  ['post', '/teams', 201, 'Team'],
  ['delete', '/teams/{id}', 200, 'Empty'],
  ['get', '/teams/{id}/members', 200, ['TeamMember']],
  ['post', '/teams/{id}/members', 201, 'TeamMember'],
  ['delete', '/teams/{id}/members/{user_id}', 200, 'Empty'],
  ['put', '/teams/{id}/members/{user_id}/role', 200, 'TeamMember'],
  ['get', '/users', 200, ['User']],
  ['post', '/users/{id}/deactivate', 200, 'User'],
  ['post', '/users/{id}/reactivate', 200, 'User'],
  ['put', '/users/{id}/role', 200, 'User'],
  ['post', '/users', 201, 'User'],
  ['post', '/users/{id}/keys', 201, 'CreatedKey'],
  ['get', '/users/{id}/keys', 200, ['ApiKey']],
  ['get', '/users/{id}/keys/{key}', 200, 'ApiKey'],
  ['delete', '/users/{id}/keys/{key}', 200, 'Empty'],
  ['get', '/tunnels', 200, ['Tunnel']],
  ['get', '/tunnels/{id}', 200, 'Tunnel'],
  ['delete', '/tunnels/{id}', 200, 'Empty'],
  // additive: reserved tunnel ids (admins)
  ['get', '/reservations', 200, ['Reservation']],
  ['put', '/reservations/{id}', 200, 'Reservation'],
  ['delete', '/reservations/{id}', 200, 'Empty'],
  // additive: custom domains (issue 34)
  ['get', '/domains', 200, ['Domain']],
  ['post', '/domains', 201, 'Domain'],
  ['get', '/domains/{name}', 200, 'Domain'],
  ['post', '/domains/{name}/verify', 200, 'Domain'],
  ['delete', '/domains/{name}', 200, 'Empty'],
];

/** how many distinct error responses each operation documents (at least). */
const SPEC_ERROR_COUNTS: Record<string, number> = {
  'get /keys': 1, 'post /keys': 1, 'delete /keys/{id}': 2, 'get /accounts': 1, 'get /me': 2, 'get /sessions': 1,
  'get /teams': 1, 'post /teams': 3, 'delete /teams/{id}': 3, 'get /teams/{id}/members': 3, 'post /teams/{id}/members': 4,
  'delete /teams/{id}/members/{user_id}': 4, 'put /teams/{id}/members/{user_id}/role': 4, 'get /users': 2,
  'post /users/{id}/deactivate': 4, 'post /users/{id}/reactivate': 2, 'put /users/{id}/role': 4, 'get /tunnels': 2,
  'get /tunnels/{id}': 3, 'delete /tunnels/{id}': 3, 'post /users': 3, 'post /users/{id}/keys': 4,
  'get /users/{id}/keys': 3, 'get /users/{id}/keys/{key}': 3, 'delete /users/{id}/keys/{key}': 3,
  'get /reservations': 1, 'put /reservations/{id}': 3, 'delete /reservations/{id}': 2,
  'get /domains': 1, 'post /domains': 3, 'get /domains/{name}': 2, 'post /domains/{name}/verify': 3, 'delete /domains/{name}': 2,
};

/**
 * Error statuses the other API suites make each operation answer (401 and 429 for any
 * authenticated call): each must be documented.
 */
const BODY = [400, 413, 415];
const OBSERVED_ERRORS: Record<string, number[]> = {
  'get /keys': [403],
  'post /keys': [...BODY, 403, 409],
  'delete /keys/{id}': [400, 403, 404],
  'get /accounts': [],
  'get /me': [],
  'get /sessions': [400, 403],
  'get /teams': [403],
  'post /teams': [...BODY, 403, 404, 409],
  'delete /teams/{id}': [400, 403, 404],
  'get /teams/{id}/members': [400, 403, 404],
  'post /teams/{id}/members': [...BODY, 403, 404, 409],
  'delete /teams/{id}/members/{user_id}': [400, 403, 404, 409],
  'put /teams/{id}/members/{user_id}/role': [...BODY, 403, 404, 409],
  'get /users': [400, 403],
  'post /users/{id}/deactivate': [400, 403, 404, 409],
  'post /users/{id}/reactivate': [400, 403, 404],
  'put /users/{id}/role': [...BODY, 403, 404, 409],
  'post /users': [...BODY, 403, 409],
  'post /users/{id}/keys': [...BODY, 403, 404, 409],
  'get /users/{id}/keys': [400, 403, 404],
  'get /users/{id}/keys/{key}': [400, 403, 404],
  'delete /users/{id}/keys/{key}': [400, 403, 404],
  'get /tunnels': [],
  'get /tunnels/{id}': [404],
  'delete /tunnels/{id}': [404],
  'get /reservations': [403],
  'put /reservations/{id}': [...BODY, 403, 404],
  'delete /reservations/{id}': [403, 404],
  'get /domains': [],
  'post /domains': [...BODY, 403, 409],
  'get /domains/{name}': [404],
  'post /domains/{name}/verify': [404, 409],
  'delete /domains/{name}': [403, 404],
};

/** The resources and their fields, nullable ones marked. */
const RESOURCES: Record<string, { fields: string[]; nullable: string[] }> = {
  ApiKey: { fields: ['id', 'name', 'key_prefix', 'scopes', 'created_at', 'expires_at', 'revoked_at'], nullable: ['expires_at', 'revoked_at'] },
  CreatedKey: { fields: ['info', 'key'], nullable: [] },
  Account: { fields: ['id', 'provider', 'created_at'], nullable: [] },
  User: {
    fields: ['id', 'email', 'name', 'avatar_url', 'role', 'metadata', 'created_at', 'updated_at', 'deactivated_at'],
    nullable: ['avatar_url', 'deactivated_at'],
  },
  Session: {
    fields: ['id', 'user_id', 'tunnel_id', 'client_ip', 'connected_at', 'disconnected_at', 'bytes_in', 'bytes_out', 'requests'],
    nullable: ['client_ip', 'disconnected_at'],
  },
  Team: { fields: ['id', 'name', 'created_at', 'updated_at'], nullable: [] },
  TeamMember: { fields: ['id', 'team_id', 'user_id', 'role', 'created_at'], nullable: [] },
  Reservation: { fields: ['id', 'user_id', 'team_id', 'created_at'], nullable: ['user_id', 'team_id'] },
  Domain: {
    fields: ['name', 'tunnel', 'owner_id', 'team_id', 'verified', 'verified_at', 'txt_name', 'txt_value', 'cname_target', 'last_check_at', 'last_error', 'created_at'],
    nullable: ['team_id', 'verified_at', 'last_check_at', 'last_error'],
  },
  Tunnel: {
    fields: ['id', 'owner_id', 'team_id', 'remote_port', 'tunnel_type', 'uptime_secs', 'stats', 'access', 'url', 'local_target', 'owner_name', 'owner_email', 'team_name', 'pool', 'connections'],
    nullable: ['team_id', 'remote_port', 'local_target', 'owner_name', 'owner_email', 'team_name'],
  },
  Error: { fields: ['type', 'title', 'status', 'detail'], nullable: [] },
};
const ENUMS: Record<string, string[]> = { ApiScope: ['tunnels', 'management'], Role: ['admin', 'member'], TeamRole: ['owner', 'member'] };

let t: TestServer;
let doc: Json;
const sorted = (xs: Iterable<string>) => [...xs].sort();
const component = (name: string) => doc.components.schemas[name];
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const admitsNull = (s: Json): boolean => s?.type === 'null' || (Array.isArray(s?.type) && s.type.includes('null')) || (s?.anyOf ?? s?.oneOf ?? []).some(admitsNull);

function operations(): [string, string, Json][] {
  return Object.entries(doc.paths as Record<string, Record<string, Json>>).flatMap(([path, ops]) =>
    Object.entries(ops)
      .filter(([m]) => ['get', 'post', 'put', 'delete', 'patch'].includes(m))
      .map(([m, op]) => [m, path, op] as [string, string, Json]),
  );
}

function collectRefs(x: Json, out: string[] = []): string[] {
  if (Array.isArray(x)) x.forEach((v) => collectRefs(v, out));
  else if (x && typeof x === 'object') for (const [k, v] of Object.entries(x)) k === '$ref' ? out.push(v as string) : collectRefs(v, out);
  return out;
}

test.before(async () => {
  t = await startServer();
  const res = await api(t, 'GET', '/openapi.json');
  assert.is(res.status, 200, res.text);
  doc = res.body;
});

test.after(async () => {
  await t?.stop();
});

test('served without a key, as JSON, OpenAPI 3.1, with this server as its server', async () => {
  const res = await api(t, 'GET', '/openapi.json');
  assert.is(res.status, 200);
  assert.is(res.headers.get('content-type'), 'application/json');
  assert.match(doc.openapi, /^3\.1\.\d+$/);
  assert.is(typeof doc.info.title, 'string');
  assert.is(typeof doc.info.version, 'string');
  assert.ok(Array.isArray(doc.servers) && doc.servers.length > 0);
  assert.is(new URL(doc.servers[0].url).port, String(t.port));
  // An invalid key does not get in the way either.
  assert.is((await api(t, 'GET', '/openapi.json', { key: 'bk_nope' })).status, 200);
});

test('exactly the 33 operations (the 20 of the spec, Create_user, the four of another user\'s keys, the three of reserved ids, the five of custom domains), each with its success status and shape', async () => {
  const have = sorted(operations().map(([m, p]) => `${m} ${p}`));
  assert.equal(have, sorted(OPERATIONS.map(([m, p]) => `${m} ${P}${p}`)));
  const ids = new Set<string>();
  for (const [method, path, status, shape] of OPERATIONS) {
    const op = doc.paths[P + path][method];
    const what = `${method} ${path}`;
    assert.is(typeof op.operationId, 'string', what);
    assert.ok(!ids.has(op.operationId), `${what}: unique operationId`);
    ids.add(op.operationId);
    const ok = Object.keys(op.responses).filter((s) => s.startsWith('2'));
    assert.equal(ok, [String(status)], `${what}: one success response, ${status}`);
    const schema = op.responses[status].content['application/json'].schema;
    const expected = Array.isArray(shape) ? { type: 'array', items: ref(shape[0]) } : ref(shape);
    assert.equal(schema, expected, what);
    assert.ok(op.security?.length > 0, `${what}: needs a bearer key`);
  }
  assert.equal(doc.components.securitySchemes.bearer, { ...doc.components.securitySchemes.bearer, type: 'http', scheme: 'bearer' });
});

test('every operation documents its problem responses as application/problem+json Error', async () => {
  for (const [method, path] of OPERATIONS) {
    const what = `${method} ${path}`;
    const op = doc.paths[P + path][method];
    const errors = Object.keys(op.responses).filter((s) => /^[45]/.test(s)).map(Number);
    assert.ok(errors.length >= SPEC_ERROR_COUNTS[what]!, `${what}: ${errors.length} error responses, the spec documents ${SPEC_ERROR_COUNTS[what]}`);
    for (const s of [401, 429, ...OBSERVED_ERRORS[what]!]) assert.ok(errors.includes(s), `${what} documents ${s} (has ${errors.join(', ')})`);
    for (const s of errors) {
      assert.equal(op.responses[s].content, { 'application/problem+json': { schema: ref('Error') } }, `${what} ${s}`);
      assert.is(typeof op.responses[s].description, 'string');
    }
  }
});

test('components: every resource with exactly its fields, all required, null only where it may be', async () => {
  for (const [name, { fields, nullable }] of Object.entries(RESOURCES)) {
    const s = component(name);
    assert.ok(s, `component ${name}`);
    assert.is(s.type, 'object', name);
    const props = Object.keys(s.properties);
    if (name === 'Error') {
      // Validation problems may add errors[]; the four RFC 9457 members are always there.
      assert.equal(sorted(s.required), sorted(fields));
      assert.equal(sorted(props.filter((p) => p !== 'errors')), sorted(fields));
      continue;
    }
    assert.equal(sorted(props), sorted(fields), `${name} properties`);
    assert.equal(sorted(s.required ?? []), sorted(fields), `${name}: every field required (present even when null)`);
    for (const f of fields) assert.is(admitsNull(s.properties[f]), nullable.includes(f), `${name}.${f} nullable?`);
  }
  for (const [name, values] of Object.entries(ENUMS)) {
    const s = component(name);
    const consts = s.enum ?? (s.anyOf ?? s.oneOf).map((x: Json) => x.const);
    assert.equal(sorted(consts), sorted(values), name);
  }
  assert.equal(component('Empty').properties ?? {}, {});
  assert.is(component('Empty').additionalProperties, false);
});

test('components: formats and references a client generator relies on', async () => {
  const user = component('User');
  assert.is(user.properties.id.format, 'uuid');
  assert.is(user.properties.created_at.format, 'date-time');
  assert.equal(user.properties.role, ref('Role'));
  assert.equal(component('ApiKey').properties.scopes, { type: 'array', items: ref('ApiScope') });
  assert.equal(component('CreatedKey').properties.info, ref('ApiKey'));
  assert.equal(component('TeamMember').properties.role, ref('TeamRole'));
  const session = component('Session').properties;
  for (const f of ['bytes_in', 'bytes_out', 'requests']) assert.is(session[f].type, 'integer', f);
  const tunnel = component('Tunnel').properties;
  assert.is(tunnel.id.type, 'string');
  assert.is(tunnel.id.format, undefined, 'a tunnel id is not a uuid');
  assert.is(tunnel.uptime_secs.type, 'number');
  assert.equal(sorted(Object.keys(tunnel.stats.properties)), ['bytes_in', 'bytes_out', 'requests']);
  // Access rules: whether there is basic auth (never a credential), address lists, expiry.
  const access = tunnel.access;
  assert.equal(sorted(Object.keys(access.properties)), ['allow_ip', 'basic_auth', 'deny_ip', 'expires_at']);
  assert.equal(sorted(access.required), ['allow_ip', 'basic_auth', 'deny_ip', 'expires_at']);
  assert.is(access.properties.basic_auth.type, 'boolean');
  assert.ok(admitsNull(access.properties.expires_at), 'expires_at may be null');
  // Every $ref anywhere in the document points at a component that exists.
  for (const r of collectRefs(doc)) {
    const name = /^#\/components\/schemas\/(\w+)$/.exec(r)?.[1];
    assert.ok(name && component(name), `dangling $ref ${r}`);
  }
});

test('parameters and request bodies: path ids, limit 1..1000, body fields and which are required', async () => {
  for (const [method, path] of OPERATIONS) {
    const op = doc.paths[P + path][method];
    const names = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
    const inPath = (op.parameters ?? []).filter((p: Json) => p.in === 'path');
    assert.equal(sorted(inPath.map((p: Json) => p.name)), sorted(names as string[]), `${method} ${path} path parameters`);
    for (const p of inPath) {
      assert.is(p.required, true);
      assert.is(p.schema.format, path.startsWith('/tunnels') || path.startsWith('/reservations') || path.startsWith('/domains') ? undefined : 'uuid', `${method} ${path} {${p.name}}`);
    }
  }
  for (const path of ['/sessions', '/users']) {
    const limit = doc.paths[P + path].get.parameters.find((p: Json) => p.name === 'limit');
    assert.equal({ in: limit.in, type: limit.schema.type, min: limit.schema.minimum, max: limit.schema.maximum }, { in: 'query', type: 'integer', min: 1, max: 1000 }, path);
  }
  const all = doc.paths[`${P}/sessions`].get.parameters.find((p: Json) => p.name === 'all');
  assert.is(all.schema.type, 'boolean');
  const bodies: [string, string, string[], string[]][] = [
    ['post', '/keys', ['name', 'expires_at', 'scopes'], ['name']],
    ['post', '/teams', ['name', 'owner_id'], ['name']],
    ['post', '/teams/{id}/members', ['user_id'], ['user_id']],
    ['put', '/teams/{id}/members/{user_id}/role', ['role'], ['role']],
    ['put', '/users/{id}/role', ['role'], ['role']],
    ['post', '/users', ['email', 'name', 'role'], ['email']],
    ['post', '/users/{id}/keys', ['name', 'expires_at', 'scopes'], ['name']],
    ['put', '/reservations/{id}', ['user_id', 'team_id'], []],
    ['post', '/domains', ['name', 'tunnel', 'team_id'], ['name', 'tunnel']],
  ];
  for (const [method, path, fields, required] of bodies) {
    const s = doc.paths[P + path][method].requestBody.content['application/json'].schema;
    assert.equal(sorted(Object.keys(s.properties)), sorted(fields), `${method} ${path} body`);
    assert.equal(sorted(s.required ?? []), sorted(required), `${method} ${path} required`);
    assert.is(s.additionalProperties, false, `${method} ${path}: unknown fields refused`);
  }
  for (const [method, path] of OPERATIONS) {
    if (!bodies.some(([m, p]) => m === method && p === path)) assert.is(doc.paths[P + path][method].requestBody, undefined, `${method} ${path} takes no body`);
  }
});

test('the documented shapes are the ones the server answers with', async () => {
  const u = await createUser(t);
  const key = await createKeyFor(t, u.id);
  await t.sql`insert into accounts (user_id, provider, subject) values (${u.id}, 'github', 'x1')`;
  await t.sql`insert into sessions (user_id, tunnel_id, tunnel_type) values (${u.id}, 'abc', 'http')`;
  const props = (name: string) => sorted(Object.keys(component(name).properties));
  const created = await api(t, 'POST', '/keys', { key, body: { name: 'doc' } });
  assert.equal(sorted(Object.keys(created.body)), props('CreatedKey'));
  assert.equal(sorted(Object.keys(created.body.info)), props('ApiKey'));
  assert.equal(sorted(Object.keys((await api(t, 'GET', '/me', { key })).body)), props('User'));
  assert.equal(sorted(Object.keys((await api(t, 'GET', '/accounts', { key })).body[0])), props('Account'));
  assert.equal(sorted(Object.keys((await api(t, 'GET', '/sessions', { key })).body[0])), props('Session'));
  const team = await api(t, 'POST', '/teams', { key, body: { name: 'doc-team' } });
  assert.equal(sorted(Object.keys(team.body)), props('Team'));
  assert.equal(sorted(Object.keys((await api(t, 'GET', `/teams/${team.body.id}/members`, { key })).body[0])), props('TeamMember'));
  const problem = await api(t, 'GET', '/me');
  assert.equal(sorted(Object.keys(problem.body)), sorted(component('Error').required));
});

test.run();
