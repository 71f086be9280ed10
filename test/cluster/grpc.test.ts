import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as grpc from '@grpc/grpc-js';
import { startCluster, type TestCluster } from './cluster.js';
import { createKeyFor, createUser, eventually, withDeadline } from '../helpers/fixtures.js';
import { TunnelClient } from '../../src/client/tunnel-client.js';
import { cancelAfterFirst, echoClient, startEcho, unaryCall, type Echo, type EchoClient } from '../helpers/grpc-echo.js';

// gRPC through a node that does not hold the tunnel: the client is connected to node A only (no
// second connection), the gRPC client speaks h2c to node B, whose stream crosses the link to A
// like any other; the trailers travel with the stream's end (x-end), cancellation as a reset.

let cluster: TestCluster;
let echo: Echo;
let tunnel: TunnelClient;
let viaB: EchoClient;

test.before(async () => {
  cluster = await startCluster(2);
  echo = await startEcho();
  const u = await createUser(cluster.db);
  const key = await createKeyFor(cluster.db, u.id);
  tunnel = new TunnelClient({ server: cluster.nodes[0]!.nodeUrl, token: key, type: 'http', local: { host: '127.0.0.1', port: echo.port, h2: true }, id: 'grpcx', siblings: false });
  await withDeadline(tunnel.start(), 10_000, 'client start');
  const b = cluster.nodes[1]!;
  viaB = echoClient(`${b.address}:${new URL(b.nodeUrl).port}`, 'grpcx.localhost');
});

test.after(async () => {
  viaB?.close();
  await tunnel?.stop().catch(() => undefined);
  echo?.server.forceShutdown();
  await cluster?.stop();
});

test('a unary call through another node keeps its metadata, status and trailers', async () => {
  // The route reaches B by notification: the first calls may find none yet (UNIMPLEMENTED/404).
  const r = await eventually(async () => {
    const md = new grpc.Metadata();
    md.set('x-token', 'via-b');
    const got = await unaryCall(viaB, Buffer.from('across nodes'), md);
    return got.err === null ? got : undefined;
  }, 10_000, 'a call through node B');
  if (!r) throw new Error('no call through node B');
  assert.is(r.value!.toString(), 'across nodes');
  assert.equal(r.head!.get('x-echo'), ['via-b']);
  assert.equal(r.status!.metadata.get('x-length'), ['12']);
  const failed = await unaryCall(viaB, Buffer.from('fail'));
  assert.is(failed.err!.code, grpc.status.NOT_FOUND);
  assert.is(failed.err!.details, 'no such thing: ünïcode');
});

test('a cancelled server stream through another node is cancelled at the service', async () => {
  await withDeadline(cancelAfterFirst(viaB, 'cancel-b'), 10_000, 'first message, then the cancel');
  await eventually(() => (echo.cancelled.has('cancel-b') ? true : undefined), 10_000, 'the service hears the cancel');
});

test.run();
