import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { us_listen_socket } from '@trufflesuite/uws-js-unofficial';
import { loadUws } from '../http/uws-loader.js';
import { closeApp, Inflight, problemReply, route, type HttpServer } from '../http/uws.js';
import { Mailbox, type PortLike } from '../actors/actor.js';
import type { IpBlock, KeyVerdict, MainToShard, ShardToMain } from '../protocol/messages.js';
import { connect } from '../db/sql.js';
import { createLogger } from '../log.js';
import { Authenticator } from '../auth/authenticate.js';
import { installApi } from '../api/router.js';
import { installHealth } from '../api/health.js';
import { installMetrics } from '../api/metrics.js';
import { pushEdgeCounters } from './metrics.js';
import { installTunnels } from './shard.js';
import { installOauth } from '../auth/oauth/routes.js';
import type { ShardContext } from './shard-context.js';
import type { Config } from '../config.js';

//   main thread ◀──Mailbox(parentPort)──▶ this shard: one uWS App on the shared port
//   other shards ◀──mesh MessagePorts──▶ tunnel data plane (edge/shard.ts)
//
// Thread entry of a shard worker: builds the shard's context, installs the API, health,
// OAuth and tunnel routes, listens, then reports `ready` with the port.

export interface ShardWorkerData {
  index: number;
  config: Config;
  databaseUrl: string;
  /** Port to listen on (0 for the first shard: the kernel picks; the others reuse it). */
  port: number;
}

const { index, config, databaseUrl, port } = workerData as ShardWorkerData;
const SQL_POOL_PER_SHARD = 4;
const MAX_API_BODY_BYTES = 64 * 1024;
const VERIFY_TIMEOUT_MS = 15_000;

const log = createLogger(config.logLevel, { shard: index });
const { uws, from } = loadUws();
const main = new Mailbox<ShardToMain, MainToShard>(parentPort as unknown as PortLike);
const sql = connect(databaseUrl, { max: SQL_POOL_PER_SHARD, applicationName: `burrowd-shard-${index}`, bounded: true });
const app = uws.App();
const http: HttpServer = { app, inflight: new Inflight(), log, maxBodyBytes: MAX_API_BODY_BYTES };
const auth = new Authenticator({
  sql,
  verify: (req) => main.ask<KeyVerdict>({ type: 'verify-key', ...req }, VERIFY_TIMEOUT_MS),
  reportFailure: (ip) => main.tell({ type: 'auth-failure', ip }),
});
const ctx: ShardContext = { index, config, log, sql, uws, app, http, main, authenticate: (a, ip) => auth.authenticate(a, ip) };

const tunnels = installTunnels(ctx);
http.dispatch = tunnels.dispatch;
installHealth(ctx);
installMetrics(ctx);
const stopEdgeCounters = pushEdgeCounters(main);
installApi(ctx);
if (config.github || config.oidc) installOauth(ctx);
route(http, 'any', '/*', 0, (req) => problemReply('not-found', `no such endpoint: ${req.method} ${req.path}`));

let listenSocket: us_listen_socket | null = null;

// A crash ends this thread only (the supervisor restarts it): close uWS first, because a
// thread that exits with uWS sockets open aborts the whole process.
function crash(err: unknown): never {
  log.fatal({ err }, 'shard crashed');
  closeApp(app);
  process.exit(1);
}
process.on('uncaughtException', crash);
process.on('unhandledRejection', crash);

if (config.faultInjection) {
  // Tests only (hidden --fault-injection): lets a test crash this shard for real.
  route(http, 'post', '/__fault/crash-shard', 0, () => {
    setImmediate(() => {
      throw new Error('fault injection: shard crash requested');
    });
    return { status: 202, body: String(index) };
  });
}

main.onAttach((a) => {
  if (a.attach === 'peer') tunnels.onPeer(Number(a.meta.shard), a.port as MessagePort);
});

main.handle(async (msg) => {
  switch (msg.type) {
    case 'auth-invalidate':
      auth.invalidate(msg.keyIds, msg.userIds);
      if (msg.endConnections !== null) tunnels.endConnections(msg.keyIds, msg.userIds, msg.endConnections);
      return {};
    case 'ip-blocked':
      auth.block(msg.ip, msg.untilMs);
      return {};
    case 'drain':
      return drain(msg.timeoutMs);
    default:
      // Everything else is the tunnel data plane's (protocol/tunnel-messages.ts).
      return tunnels.onMain(msg);
  }
});

async function drain(timeoutMs: number): Promise<{ idle: boolean }> {
  http.inflight.draining = true;
  if (listenSocket) uws.us_listen_socket_close(listenSocket);
  listenSocket = null;
  // API requests and tunnelled streams finish side by side, both within the one timeout.
  const [idle] = await Promise.all([http.inflight.idle(timeoutMs), tunnels.drain(timeoutMs)]);
  stopEdgeCounters();
  await sql.end({ timeout: 2 });
  // Closes every socket of this App. A worker whose uWS loop still has sockets must not
  // end: Node aborts the whole process on thread exit with open uv handles.
  closeApp(app);
  return { idle };
}

// Main holds the blocks: a restarted shard applies those in force before it serves anyone.
for (const b of await main.ask<IpBlock[]>({ type: 'auth-blocks' }, VERIFY_TIMEOUT_MS)) auth.block(b.ip, b.untilMs);

app.listen(config.host, port, (s) => {
  if (!s) {
    log.fatal({ host: config.host, port }, 'cannot listen (port in use or not permitted)');
    closeApp(app);
    process.exit(1);
  }
  listenSocket = s;
  const actual = uws.us_socket_local_port(s as never);
  log.debug({ port: actual, uws: from }, 'shard listening');
  main.tell({ type: 'ready', port: actual });
});
