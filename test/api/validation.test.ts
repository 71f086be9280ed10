import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import { startServer, type TestServer } from '../helpers/server.js';
import { api, createKeyFor, createUser, withDeadline, type ApiResponse } from '../helpers/fixtures.js';

// Bad input of every kind gets a problem+json answer that says what is wrong (the API's error
// rules): malformed JSON, wrong types, unknown fields, bad uuids, media types, body
// size (declared and chunked), unknown routes and wrong methods.

const MAX_BODY_BYTES = 64 * 1024;
const NO_SUCH = '00000000-0000-4000-8000-000000000000';

let t: TestServer;
let memberKey: string;
let memberId: string;
let teamId: string;

function assertProblem(res: ApiResponse, status: number, code: string, detail?: RegExp) {
  assert.is(res.status, status, res.text);
  assert.is(res.headers.get('content-type'), 'application/problem+json');
  const fields = Object.keys(res.body).filter((k) => k !== 'errors').sort();
  assert.equal(fields, ['detail', 'status', 'title', 'type']);
  assert.is(res.body.type, `/problems/${code}`);
  assert.is(res.body.status, status);
  assert.is(typeof res.body.title, 'string');
  assert.ok(res.body.title.length > 0);
  if (detail) assert.match(res.body.detail, detail);
  if (res.body.errors !== undefined) {
    for (const e of res.body.errors) assert.equal(Object.keys(e).sort(), ['field', 'message']);
  }
}

interface RawResult {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * A request written by hand: `chunks` are sent one by one (chunked when no content-length
 * is given). The server may answer and close before the body is done; the answer counts.
 */
function raw(method: string, path: string, headers: Record<string, string>, chunks: Buffer[]): Promise<RawResult> {
  const done = new Promise<RawResult>((resolve, reject) => {
    let answered = false;
    const req = http.request(`${t.url}${path}`, { method, headers, agent: false }, (res) => {
      answered = true;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      res.on('error', reject);
    });
    // Writing into a connection the server closed after answering: the answer still arrives.
    req.on('error', (err) => setTimeout(() => reject(err), 1_000));
    // As RFC 9112 §9.5 asks of a client: stop sending a body once an answer has come.
    const write = (i: number) => {
      if (answered) return;
      if (i === chunks.length) return req.end();
      req.write(chunks[i], () => setImmediate(() => write(i + 1)));
    };
    write(0);
  });
  return withDeadline(done, 5_000, `${method} ${path}`);
}

test.before(async () => {
  t = await startServer();
  const u = await createUser(t);
  memberId = u.id;
  memberKey = await createKeyFor(t, u.id);
  teamId = (await api(t, 'POST', '/teams', { key: memberKey, body: { name: 'validation' } })).body.id;
});

test.after(async () => {
  await t?.stop();
});

test('malformed JSON is 400 with a detail saying so', async () => {
  for (const body of ['{"name": "x"', '{name: "x"}', "{'name': 'x'}", '{"name": "x",}', 'nope']) {
    const res = await api(t, 'POST', '/keys', { key: memberKey, rawBody: body, headers: { 'content-type': 'application/json' } });
    assertProblem(res, 400, 'bad-request', /JSON/);
  }
  const empty = await api(t, 'POST', '/keys', { key: memberKey, rawBody: '', headers: { 'content-type': 'application/json' } });
  assertProblem(empty, 400, 'bad-request', /body/);
});

test('a body that is JSON but not an object is 400', async () => {
  for (const body of [[], null, 'laptop', 42, true]) {
    const res = await api(t, 'POST', '/keys', { key: memberKey, rawBody: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
    assertProblem(res, 400, 'bad-request');
  }
});

test('wrong types are 400 naming the field, in detail and in errors[]', async () => {
  const cases: [string, string, unknown, string][] = [
    ['POST', '/keys', { name: 5 }, 'name'],
    ['POST', '/keys', { name: 'x', scopes: 'tunnels' }, 'scopes'],
    ['POST', '/keys', { name: 'x', scopes: [1] }, 'scopes'],
    ['POST', '/keys', { name: 'x', expires_at: 1893456000 }, 'expires_at'],
    ['POST', '/teams', { name: ['a'] }, 'name'],
    ['POST', '/teams', { name: 'x', owner_id: 7 }, 'owner_id'],
    ['POST', '/teams', { name: 'x', owner_id: 'alice' }, 'owner_id'],
    ['POST', `/teams/${teamId}/members`, { user_id: 'not-a-uuid' }, 'user_id'],
    ['POST', `/teams/${teamId}/members`, {}, 'user_id'],
    ['PUT', `/teams/${teamId}/members/${memberId}/role`, { role: 'boss' }, 'role'],
    ['PUT', `/users/${memberId}/role`, { role: true }, 'role'],
  ];
  for (const [method, path, body, field] of cases) {
    const res = await api(t, method, path, { key: t.adminKey, body });
    assertProblem(res, 400, 'bad-request', new RegExp(field));
    assert.ok(Array.isArray(res.body.errors), `${method} ${path} ${JSON.stringify(body)}: errors[]`);
    assert.ok(res.body.errors.some((e: { field: string }) => e.field === field), `${JSON.stringify(res.body.errors)} names ${field}`);
  }
});

test('names must be one line with a visible character: control characters are 400, not 500', async () => {
  for (const name of ['a\u0000b', 'two\nlines', 'tab\there', '\u007f', '   ', 'x'.repeat(101)]) {
    assertProblem(await api(t, 'POST', '/keys', { key: memberKey, body: { name } }), 400, 'bad-request', /name/);
    assertProblem(await api(t, 'POST', '/teams', { key: memberKey, body: { name } }), 400, 'bad-request', /name/);
  }
  for (const name of ['Ünïcødé 🚀 laptop', 'x'.repeat(100)]) {
    const res = await api(t, 'POST', '/keys', { key: memberKey, body: { name } });
    assert.is(res.status, 201, res.text);
    assert.is(res.body.info.name, name);
  }
});

test('a body nested thousands deep is 400, not 500', async () => {
  for (const body of ['['.repeat(20_000) + ']'.repeat(20_000), `{"name":${'['.repeat(20_000)}${']'.repeat(20_000)}}`]) {
    const res = await api(t, 'POST', '/keys', { key: memberKey, rawBody: body, headers: { 'content-type': 'application/json' } });
    assertProblem(res, 400, 'bad-request');
  }
});

test('an unknown field is 400 naming it (a typo is never ignored)', async () => {
  const before = (await api(t, 'GET', '/keys', { key: memberKey })).body.length;
  const res = await api(t, 'POST', '/keys', { key: memberKey, body: { name: 'typo', scope: ['tunnels'] } });
  assertProblem(res, 400, 'bad-request', /scope/);
  assert.ok(res.body.errors.some((e: { field: string }) => e.field === 'scope'));
  const team = await api(t, 'POST', '/teams', { key: memberKey, body: { name: 'x', owner: memberId } });
  assertProblem(team, 400, 'bad-request', /owner/);
  assert.is((await api(t, 'GET', '/keys', { key: memberKey })).body.length, before, 'no key was created');
});

test('a bad uuid in a path is 400 naming the parameter; an upper-case uuid is accepted', async () => {
  const cases: [string, string, string][] = [
    ['DELETE', '/keys/not-a-uuid', 'id'],
    ['DELETE', '/keys/12345', 'id'],
    ['GET', '/teams/xyz/members', 'id'],
    ['DELETE', '/teams/xyz', 'id'],
    ['DELETE', `/teams/${teamId}/members/bob`, 'user_id'],
    ['PUT', `/teams/${teamId}/members/${NO_SUCH.slice(0, 35)}/role`, 'user_id'],
    ['POST', '/users/me/deactivate', 'id'],
    ['POST', `/users/${NO_SUCH}0/reactivate`, 'id'],
  ];
  for (const [method, path, param] of cases) {
    const body = method === 'PUT' ? { role: 'member' } : undefined;
    const res = await api(t, method, path, { key: t.adminKey, body });
    assertProblem(res, 400, 'bad-request', new RegExp(`"${param}"`));
  }
  const made = await api(t, 'POST', '/keys', { key: memberKey, body: { name: 'upper' } });
  const res = await api(t, 'DELETE', `/keys/${made.body.info.id.toUpperCase()}`, { key: memberKey });
  assert.is(res.status, 200, res.text);
});

test('query parameters: unknown, repeated, or given to a route without any are 400', async () => {
  assertProblem(await api(t, 'GET', '/sessions?limt=5', { key: memberKey }), 400, 'bad-request', /limt/);
  assertProblem(await api(t, 'GET', '/sessions?limit=5&limit=6', { key: memberKey }), 400, 'bad-request', /limit/);
  assertProblem(await api(t, 'GET', '/keys?limit=5', { key: memberKey }), 400, 'bad-request', /limit/);
  assertProblem(await api(t, 'GET', '/users?all=true', { key: t.adminKey }), 400, 'bad-request', /all/);
});

test('a body without Content-Type or with text/plain is 415; application/json with a charset is fine', async () => {
  const body = Buffer.from(JSON.stringify({ name: 'mt' }));
  const none = await raw('POST', '/api/v1/keys', { authorization: `Bearer ${memberKey}`, 'content-length': String(body.length) }, [body]);
  assert.is(none.status, 415, none.body);
  assert.is(none.headers['content-type'], 'application/problem+json');
  assert.is(JSON.parse(none.body).type, '/problems/unsupported-media-type');
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    const res = await api(t, 'POST', '/keys', { key: memberKey, rawBody: body, headers: { 'content-type': type } });
    assertProblem(res, 415, 'unsupported-media-type', new RegExp(type.split(';')[0]!.replace('/', '\\/')));
  }
  const teamRes = await api(t, 'POST', '/teams', { key: memberKey, rawBody: JSON.stringify({ name: 'plain' }), headers: { 'content-type': 'text/plain' } });
  assertProblem(teamRes, 415, 'unsupported-media-type');
  const charset = await api(t, 'POST', '/keys', { key: memberKey, rawBody: body, headers: { 'content-type': 'application/json; charset=utf-8' } });
  assert.is(charset.status, 201, charset.text);
  assert.equal((await api(t, 'GET', '/keys', { key: memberKey })).body.filter((k: { name: string }) => k.name === 'mt').length, 1, 'only the accepted one was created');
});

test('a body of exactly 64 KiB is accepted; one byte more is 413 (declared by content-length)', async () => {
  const fit = (size: number, name: string) => {
    const head = `{"name":"${name}"`;
    return Buffer.from(head + ' '.repeat(size - head.length - 1) + '}');
  };
  const exact = fit(MAX_BODY_BYTES, 'exactly-64k');
  assert.is(exact.length, MAX_BODY_BYTES);
  const ok = await api(t, 'POST', '/keys', { key: memberKey, rawBody: exact, headers: { 'content-type': 'application/json' } });
  assert.is(ok.status, 201, ok.text);
  const over = fit(MAX_BODY_BYTES + 1, 'over-64k');
  const res = await raw('POST', '/api/v1/keys', { authorization: `Bearer ${memberKey}`, 'content-type': 'application/json', 'content-length': String(over.length) }, [over]);
  assert.is(res.status, 413, res.body);
  assert.is(res.headers['content-type'], 'application/problem+json');
  const p = JSON.parse(res.body);
  assert.is(p.type, '/problems/payload-too-large');
  assert.match(p.detail, /65536/);
  const huge = await raw('POST', '/api/v1/teams', { authorization: `Bearer ${memberKey}`, 'content-type': 'application/json', 'content-length': String(10 * 1024 * 1024) }, [
    Buffer.from('{"name":"'),
  ]);
  assert.is(huge.status, 413, 'refused from the declared length alone');
  const names = (await api(t, 'GET', '/keys', { key: memberKey })).body.map((k: { name: string }) => k.name);
  assert.ok(!names.includes('over-64k'));
});

test('a chunked body over 64 KiB is 413 too; a small chunked body is fine', async () => {
  const chunk = Buffer.from(' '.repeat(8 * 1024));
  const chunks = [Buffer.from('{"name":"chunked-big"'), ...Array<Buffer>(9).fill(chunk), Buffer.from('}')];
  const res = await raw('POST', '/api/v1/keys', { authorization: `Bearer ${memberKey}`, 'content-type': 'application/json' }, chunks);
  assert.is(res.status, 413, res.body);
  assert.is(res.headers['content-type'], 'application/problem+json');
  assert.is(JSON.parse(res.body).type, '/problems/payload-too-large');
  const small = await raw('POST', '/api/v1/keys', { authorization: `Bearer ${memberKey}`, 'content-type': 'application/json' }, [
    Buffer.from('{"name":'),
    Buffer.from('"chunked-small"}'),
  ]);
  assert.is(small.status, 201, small.body);
  const names = (await api(t, 'GET', '/keys', { key: memberKey })).body.map((k: { name: string }) => k.name);
  assert.ok(names.includes('chunked-small'));
  assert.ok(!names.includes('chunked-big'));
});

test('an unknown route is 404 problem+json naming the path, with or without a key', async () => {
  for (const path of ['/api/v1/nothing-here', '/api/v1/keys/extra/segments/here', '/api/v2/keys']) {
    for (const key of [undefined, memberKey]) {
      const res = await api(t, 'GET', path, { key });
      assertProblem(res, 404, 'not-found', new RegExp(path.replaceAll('/', '\\/')));
    }
  }
  const outside = await raw('GET', '/nothing', {}, []);
  assert.is(outside.status, 404);
  assert.is(outside.headers['content-type'], 'application/problem+json');
  assert.is(JSON.parse(outside.body).type, '/problems/not-found');
});

test('a wrong method on a known path is 405 with Allow listing the methods it takes', async () => {
  const cases: [string, string, string[]][] = [
    ['PATCH', '/api/v1/keys', ['GET', 'POST']],
    ['PUT', '/api/v1/keys', ['GET', 'POST']],
    ['GET', `/api/v1/keys/${NO_SUCH}`, ['DELETE']],
    ['DELETE', '/api/v1/me', ['GET']],
    ['POST', '/api/v1/sessions', ['GET']],
    ['PATCH', `/api/v1/teams/${teamId}`, ['DELETE']],
    ['GET', `/api/v1/teams/${teamId}/members/${memberId}/role`, ['PUT']],
    ['PUT', `/api/v1/teams/${teamId}/members`, ['GET', 'POST']],
    ['GET', `/api/v1/users/${memberId}/deactivate`, ['POST']],
    ['POST', '/api/v1/tunnels/abc', ['DELETE', 'GET']],
    ['POST', '/api/v1/openapi.json', ['GET']],
    ['DELETE', '/healthz', ['GET']],
    ['PUT', '/readyz', ['GET']],
  ];
  for (const [method, path, allow] of cases) {
    const res = await api(t, method, path, { key: memberKey });
    assertProblem(res, 405, 'method-not-allowed');
    const header = res.headers.get('allow') ?? '';
    assert.equal(header.split(/,\s*/).sort(), [...allow].sort(), `${method} ${path}: Allow ${header}`);
  }
});

test('a malformed %-escape in a path parameter is 400, and the server keeps serving', async () => {
  // Before the fix in src/http/uws.ts, decodeURIComponent threw inside the uWS callback and
  // took the whole shard down: one unauthenticated request per shard stopped the server.
  for (const path of ['/api/v1/keys/%ZZ', '/api/v1/tunnels/%E0%A4%A', `/api/v1/teams/${teamId}/members/%`]) {
    const res = await raw(path.startsWith('/api/v1/keys') ? 'DELETE' : 'GET', path, { authorization: `Bearer ${memberKey}` }, []).catch((e: Error) => e);
    assert.ok(!(res instanceof Error), `${path}: the connection failed (${String(res)})`);
    assert.is((res as RawResult).status, 400, `${path}: ${(res as RawResult).body}`);
    assert.is(JSON.parse((res as RawResult).body).type, '/problems/bad-request');
  }
  assert.is((await api(t, 'GET', '/me', { key: memberKey })).status, 200);
  assert.ok(!/shard crashed/.test(t.stderr()), 'no shard crashed');
});

test.run();
