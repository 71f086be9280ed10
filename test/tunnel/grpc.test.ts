import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as grpc from '@grpc/grpc-js';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CliSuite, closedPort, tempDir, waitFor } from '../cli/harness.js';
import type { CaptureJson } from '../../src/client/inspector/store.js';
import { h2Get, visit } from './helpers.js';
import http2 from 'node:http2';
import { eventually, withDeadline } from '../helpers/deadline.js';
import { cancelAfterFirst, echoClient, startEcho, streamRequest, unaryCall, type Echo, type EchoClient, type UnaryResult } from '../helpers/grpc-echo.js';

// gRPC end to end: a @grpc/grpc-js client → burrowd (h2c on the plain port) → a real
// `burrow http h2c://…` → a @grpc/grpc-js server. The four call kinds, metadata (a -bin one
// too), 4 MiB messages, status and message in the trailers (and trailers-only errors),
// deadlines, and a client's cancellation reaching the server as a cancellation (the echo
// service: test/helpers/grpc-echo.ts).

const MIB4 = 4 * 1024 * 1024;

let suite: CliSuite;
let echo: Echo;
let tlsEcho: Echo | null = null;
let client: EchoClient;
const certDir = tempDir('burrow-grpc-tls-');
const unary = (body: Buffer, md?: grpc.Metadata, opts?: grpc.CallOptions): Promise<UnaryResult> => unaryCall(client, body, md, opts);

test.before(async () => {
  suite = await CliSuite.start({ workers: 2 });
  echo = await startEcho();
  const child = suite.burrows.start(suite.admin, ['http', `h2c://127.0.0.1:${echo.port}`, '--id', 'grpc', '--no-inspect']);
  client = echoClient(`127.0.0.1:${suite.srv.port}`, new URL(await suite.burrows.firstLine(child)).host);
});

test.after(async () => {
  client?.close();
  echo?.server.forceShutdown();
  tlsEcho?.server.forceShutdown();
  await suite?.stop();
  certDir.remove();
});

test('unary: the message, metadata (a -bin one too) both ways, status OK and trailers', async () => {
  const md = new grpc.Metadata();
  md.set('x-token', 'abc');
  md.set('x-blob-bin', Buffer.from([0, 1, 2, 255]));
  const r = await withDeadline(unary(Buffer.from('hello'), md), 10_000, 'unary');
  assert.is(r.err, null);
  assert.is(r.value!.toString(), 'hello');
  assert.equal(r.head!.get('x-echo'), ['abc']);
  assert.equal(r.head!.get('x-blob-bin'), [Buffer.from([0, 1, 2, 255])]);
  assert.is(r.status!.code, grpc.status.OK);
  assert.equal(r.status!.metadata.get('x-length'), ['5']);
});

test('an error status and its message arrive (a trailers-only answer)', async () => {
  const r = await withDeadline(unary(Buffer.from('fail')), 10_000, 'failing unary');
  assert.is(r.err!.code, grpc.status.NOT_FOUND);
  assert.is(r.err!.details, 'no such thing: ünïcode');
});

test('4 MiB messages both ways', async () => {
  const big = Buffer.alloc(MIB4, 7);
  big.write('big', 0, 'latin1');
  const r = await withDeadline(unary(big), 20_000, 'big unary');
  assert.is(r.err, null);
  assert.is(r.value!.length, MIB4);
  assert.ok(r.value!.equals(big));
});

test('server streaming, with a quiet gap, ends with its trailers', async () => {
  const call = client.serverStream(streamRequest(5, 300));
  const got: string[] = [];
  call.on('data', (m: Buffer) => got.push(m.toString()));
  const status = await withDeadline(new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve)), 10_000, 'server stream');
  assert.is(status.code, grpc.status.OK);
  assert.equal(got, ['message 0', 'message 1', 'message 2', 'message 3', 'message 4']);
  assert.equal(status.metadata.get('x-sent'), ['5']);
});

test('client streaming', async () => {
  const answer = new Promise<Buffer>((resolve, reject) => {
    const call = client.clientStream((err: grpc.ServiceError | null, v?: Buffer) => (err ? reject(err) : resolve(v!)));
    for (let i = 0; i < 50; i++) call.write(Buffer.alloc(1000, i));
    call.end();
  });
  assert.is((await withDeadline(answer, 10_000, 'client stream')).toString(), '50 messages, 50000 bytes');
});

test('bidirectional streaming: each message answered as it comes', async () => {
  const call = client.bidi();
  const got: string[] = [];
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  for (let i = 0; i < 3; i++) {
    const echoed = new Promise<string>((resolve) => call.once('data', (m: Buffer) => resolve(m.toString())));
    call.write(Buffer.from(`ping ${i}`));
    // The answer to each message comes before the next is sent: nothing waits for the end.
    got.push(await withDeadline(echoed, 10_000, `echo ${i}`));
  }
  call.end();
  assert.is((await withDeadline(status, 10_000, 'bidi status')).code, grpc.status.OK);
  assert.equal(got, ['echo: ping 0', 'echo: ping 1', 'echo: ping 2']);
});

test('a deadline travels as grpc-timeout and ends the call with DEADLINE_EXCEEDED', async () => {
  const md = new grpc.Metadata();
  md.set('x-call', 'deadline');
  const r = await withDeadline(unary(Buffer.from('hang'), md, { deadline: Date.now() + 800 }), 10_000, 'deadline');
  assert.is(r.err!.code, grpc.status.DEADLINE_EXCEEDED);
  assert.ok(echo.deadlines.length > 0, 'the server read a deadline from grpc-timeout');
  await waitFor(() => (echo.cancelled.has('deadline') ? true : undefined), 10_000, 'the server ends the call');
});

test("a client's cancellation reaches the server as a cancellation", async () => {
  await withDeadline(cancelAfterFirst(client, 'cancel'), 10_000, 'first message, then the cancel');
  await waitFor(() => (echo.cancelled.has('cancel') ? true : undefined), 10_000, 'the server hears the cancel');
});

test('many concurrent unary calls on one connection', async () => {
  const rs = await withDeadline(Promise.all(Array.from({ length: 64 }, (_, i) => unary(Buffer.from(`call ${i}`)))), 20_000, '64 calls');
  rs.forEach((r, i) => {
    assert.is(r.err, null);
    assert.is(r.value!.toString(), `call ${i}`);
  });
});

test('h2://: a gRPC service over TLS, its self-signed certificate accepted with --upstream-insecure', async () => {
  execFileSync('/usr/bin/openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-keyout', join(certDir.dir, 'key.pem'), '-out', join(certDir.dir, 'cert.pem'),
  ], { stdio: 'ignore' });
  tlsEcho = await startEcho(grpc.ServerCredentials.createSsl(null, [{ private_key: readFileSync(join(certDir.dir, 'key.pem')), cert_chain: readFileSync(join(certDir.dir, 'cert.pem')) }]));
  const child = suite.burrows.start(suite.admin, ['http', `h2://localhost:${tlsEcho.port}`, '--id', 'grpc-tls', '--upstream-insecure', '--no-inspect']);
  const tlsClient = echoClient(`127.0.0.1:${suite.srv.port}`, new URL(await suite.burrows.firstLine(child)).host);
  try {
    const r = await withDeadline(unaryCall(tlsClient, Buffer.from('over tls')), 10_000, 'unary over h2://');
    assert.is(r.err, null);
    assert.is(r.value!.toString(), 'over tls');
    assert.equal(r.status!.metadata.get('x-length'), ['8']);
  } finally {
    tlsClient.close();
  }
});

test('the inspector: each call with its protocol, grpc-status and grpc-message, and its bodies as framed messages (JSON API)', async () => {
  const admin = suite.admin;
  const child = suite.burrows.start({ ...admin, env: { ...admin.env, BURROW_INSPECT_BASE_PORT: String(await closedPort()) } }, ['http', `h2c://127.0.0.1:${echo.port}`, '--id', 'grpc-insp']);
  const host = new URL(await suite.burrows.firstLine(child)).host;
  const inspected = echoClient(`127.0.0.1:${suite.srv.port}`, host);
  const session = http2.connect(`http://127.0.0.1:${suite.srv.port}`);
  try {
    const inspector = await waitFor(() => /^burrow: inspector at (http:\/\/\S+)$/m.exec(child.output.stderr)?.[1], 10_000, 'inspector address');
    assert.is((await withDeadline(unaryCall(inspected, Buffer.from('seen')), 10_000, 'ok call')).err, null);
    assert.is((await withDeadline(unaryCall(inspected, Buffer.from('fail')), 10_000, 'failing call')).err!.code, grpc.status.NOT_FOUND);
    const streamed: string[] = [];
    await withDeadline(
      new Promise<void>((resolve, reject) => {
        const call = inspected.serverStream(streamRequest(3, 0));
        call.on('data', (m: Buffer) => streamed.push(m.toString()));
        call.on('error', reject);
        call.on('end', () => resolve());
      }),
      10_000,
      'server stream',
    );
    // The same service by plain HTTP/1.1 and by HTTP/2 without gRPC's content-type: not gRPC calls.
    await withDeadline(visit(suite.srv.port, host, { path: '/plain' }), 10_000, 'HTTP/1.1 GET');
    await withDeadline(h2Get(session, host, '/h2'), 10_000, 'h2 GET');
    const list = await eventually(async () => {
      const l = (await (await fetch(`${inspector}/api/requests`)).json()) as CaptureJson[];
      return l.length === 5 && l.every((c) => c.state === 'complete') ? l : undefined;
    }, 10_000, 'five complete captures');
    // Newest first. A gRPC service answers every call over HTTP/2; the visitor's protocol is apart.
    // (grpc-js answers a request without gRPC's content-type 415, with no grpc-status, and says
    // grpc-message "OK" beside a 0.)
    assert.equal(list!.map((c) => [c.path, c.protocol, c.http_version, c.status, c.grpc_status, c.grpc_message]), [
      ['/h2', 'h2', 'HTTP/2', 415, null, null],
      ['/plain', 'HTTP/1.1', 'HTTP/2', 415, null, null],
      ['/burrow.test.Echo/ServerStream', 'gRPC', 'HTTP/2', 200, grpc.status.OK, 'OK'],
      ['/burrow.test.Echo/Unary', 'gRPC', 'HTTP/2', 200, grpc.status.NOT_FOUND, 'no such thing: ünïcode'],
      ['/burrow.test.Echo/Unary', 'gRPC', 'HTTP/2', 200, grpc.status.OK, 'OK'],
    ]);
    assert.equal(streamed, ['message 0', 'message 1', 'message 2']);
    const messages = (side: CaptureJson['request']) => side.grpc && [side.grpc.messages.map((m) => [m.compressed, m.length, m.preview, m.data_hex]), side.grpc.cut, side.grpc.error];
    const hex = (s: string | Buffer) => Buffer.from(s).toString('hex');
    // One capture as a script reads it: GET /api/requests/{id}.
    const one = async (c: CaptureJson) => (await (await fetch(`${inspector}/api/requests/${c.id}`)).json()) as CaptureJson;
    const stream = await one(list![2]!);
    assert.equal(messages(stream.request), [[[false, 8, '........', hex(streamRequest(3, 0))]], false, null]);
    assert.equal(messages(stream.response), [[0, 1, 2].map((i) => [false, 9, `message ${i}`, hex(`message ${i}`)]), false, null]);
    const good = await one(list![4]!);
    assert.equal(messages(good.request), [[[false, 4, 'seen', hex('seen')]], false, null]);
    assert.equal(messages(good.response), [[[false, 4, 'seen', hex('seen')]], false, null]);
    // A trailers-only answer has no body; the HTTP/1.1 request's body is not gRPC's.
    assert.equal(messages((await one(list![3]!)).response), [[], false, null]);
    assert.is((await one(list![1]!)).request.grpc, null);
  } finally {
    session.close();
    inspected.close();
  }
});

test.run();
