import { rmSync } from 'node:fs';
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from '@trufflesuite/uws-js-unofficial';
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
import { setAddressPolicy } from '../http/client-address.js';
import { setTlsSockets } from '../http/cork.js';
import { buildApp, loadCertificates, RouteRecorder } from '../http/tls.js';
import type { Config } from '../config.js';

//   main thread ◀──Mailbox(parentPort)──▶ this shard: one uWS App on the shared port
//                                          (on a unix socket behind main's ProxyFront with --proxy-protocol)
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
  /** First start of the server: SNI certificates wait for main's `tls-reload` (tls.ts buildApp). */
  deferServerNames: boolean;
  /**
   * --proxy-protocol: main's ProxyFront owns the port (and TLS); this shard serves plain HTTP on
   * this unix socket, each connection prefixed with a PROXY v2 header.
   */
  frontPath: string | null;
}

const { index, config, databaseUrl, port, deferServerNames, frontPath } = workerData as ShardWorkerData;
const SQL_POOL_PER_SHARD = 4;
const MAX_API_BODY_BYTES = 64 * 1024;
const VERIFY_TIMEOUT_MS = 15_000;

const log = createLogger(config.logLevel, { shard: index });
setAddressPolicy({ tls: config.tls !== null, trustProxy: config.trustProxy, proxyProtocol: config.proxyProtocol });
setTlsSockets(config.tls !== null && frontPath === null);
const { uws, from } = loadUws();
const main = new Mailbox<ShardToMain, MainToShard>(parentPort as unknown as PortLike);
const sql = connect(databaseUrl, { max: SQL_POOL_PER_SHARD, applicationName: `burrowd-shard-${index}`, bounded: true });
// Routes are recorded, then replayed on each App: TLS reloads and SNI names need them again.
const routes = new RouteRecorder();
const http: HttpServer = { app: routes.app, inflight: new Inflight(), log, maxBodyBytes: MAX_API_BODY_BYTES };
const auth = new Authenticator({
  sql,
  verify: (req) => main.ask<KeyVerdict>({ type: 'verify-key', ...req }, VERIFY_TIMEOUT_MS),
  reportFailure: (ip) => main.tell({ type: 'auth-failure', ip }),
});
const ctx: ShardContext = { index, config, log, sql, uws, app: routes.app, http, main, authenticate: (a, ip) => auth.authenticate(a, ip) };

const tunnels = installTunnels(ctx);
http.dispatch = tunnels.dispatch;
installHealth(ctx);
installMetrics(ctx);
const stopEdgeCounters = pushEdgeCounters(main);
installApi(ctx);
if (config.github || config.oidc) installOauth(ctx);
route(http, 'any', '/*', 0, (req) => problemReply('not-found', `no such endpoint: ${req.method} ${req.path}`));

let listenSocket: us_listen_socket | null = null;
let redirectSocket: us_listen_socket | null = null;
/** The App serving new connections; `retired` ones (replaced by a TLS reload) keep theirs until they end. */
let app: TemplatedApp | null = null;
const retired: TemplatedApp[] = [];
let redirectApp: TemplatedApp | null = null;

function closeApps(): void {
  for (const a of [app, redirectApp, ...retired.splice(0)]) if (a) closeApp(a);
  app = redirectApp = null;
}

// A crash ends this thread only (the supervisor restarts it): close uWS first, because a
// thread that exits with uWS sockets open aborts the whole process.
function crash(err: unknown): never {
  log.fatal({ err }, 'shard crashed');
  closeApps();
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
    case 'tls-reload':
      return reloadTls();
    default:
      // Everything else is the tunnel data plane's (protocol/tunnel-messages.ts).
      return tunnels.onMain(msg);
  }
});

async function drain(timeoutMs: number): Promise<{ idle: boolean }> {
  http.inflight.draining = true;
  if (listenSocket) uws.us_listen_socket_close(listenSocket);
  if (redirectSocket) uws.us_listen_socket_close(redirectSocket);
  listenSocket = redirectSocket = null;
  // API requests and tunnelled streams finish side by side, both within the one timeout.
  const [idle] = await Promise.all([http.inflight.idle(timeoutMs), tunnels.drain(timeoutMs)]);
  stopEdgeCounters();
  await sql.end({ timeout: 2 });
  // Closes every socket of this App. A worker whose uWS loop still has sockets must not
  // end: Node aborts the whole process on thread exit with open uv handles.
  closeApps();
  return { idle };
}

/**
 * SIGHUP (via main): a new App with the certificates read again takes the port beside the old
 * one (SO_REUSEPORT), then the old listen socket closes. Connections the old App accepted stay
 * with it, so nothing in flight is cut; new handshakes get the new certificates.
 */
function reloadTls(): { error: string | null } {
  if (!config.tls || !app || http.inflight.draining || frontPath !== null) return { error: null };
  let next: TemplatedApp;
  try {
    next = buildApp(uws, routes, loadCertificates(config.tls));
  } catch (err) {
    log.error({ err: (err as Error).message }, 'TLS reload failed; keeping the current certificates');
    return { error: (err as Error).message };
  }
  let socket: us_listen_socket | false = false;
  next.listen(config.host, boundPort, (s) => {
    socket = s;
  });
  if (!socket) {
    closeApp(next);
    log.error({ port: boundPort }, 'TLS reload could not listen beside the current App; keeping it');
    return { error: 'cannot listen with the reloaded certificates' };
  }
  if (listenSocket) uws.us_listen_socket_close(listenSocket);
  listenSocket = socket;
  retired.push(app);
  app = next;
  log.info({ shard: index }, 'TLS certificates reloaded');
  return { error: null };
}

/** --http-port: every plain-HTTP request is sent to the same URL over HTTPS (308 keeps the method). */
function redirectToHttps(res: HttpResponse, req: HttpRequest): void {
  const base = new URL(config.baseUrl);
  const httpsPort = base.protocol === 'https:' ? base.port : String(boundPort);
  const sent = req.getHeader('host').replace(/:\d+$/, '');
  // The visitor's Host goes into Location: only a plain host name or address is echoed.
  const host = /^([a-z0-9.-]{1,253}|\[[0-9a-f:.]{2,45}\])$/i.test(sent) ? sent : base.hostname;
  const query = req.getQuery();
  const location = `https://${host}${httpsPort && httpsPort !== '443' ? `:${httpsPort}` : ''}${req.getUrl()}${query ? `?${query}` : ''}`;
  res.cork(() => {
    res.writeStatus('308 Permanent Redirect');
    res.writeHeader('location', location);
    res.writeHeader('content-type', 'text/plain; charset=utf-8');
    res.end(`Redirecting to ${location}\n`);
  });
}

// Main holds the blocks: a restarted shard applies those in force before it serves anyone.
for (const b of await main.ask<IpBlock[]>({ type: 'auth-blocks' }, VERIFY_TIMEOUT_MS)) auth.block(b.ip, b.untilMs);

let boundPort = port;
app = buildApp(uws, routes, config.tls && frontPath === null ? loadCertificates(config.tls) : null, !deferServerNames);
if (config.httpPort !== null) {
  redirectApp = uws.App().any('/*', redirectToHttps);
  redirectApp.listen(config.host, config.httpPort, (s) => {
    if (!s) {
      log.fatal({ host: config.host, port: config.httpPort }, 'cannot listen on --http-port (port in use or not permitted)');
      closeApps();
      process.exit(1);
    }
    redirectSocket = s;
  });
}
if (frontPath !== null) {
  // A restarted shard finds its predecessor's socket file: listening needs the path free.
  rmSync(frontPath, { force: true });
  app.listen_unix((s) => {
    if (!s) {
      log.fatal({ path: frontPath }, 'cannot listen on the unix socket for the PROXY front');
      closeApps();
      process.exit(1);
    }
    listenSocket = s;
    log.debug({ path: frontPath, uws: from }, 'shard listening behind the PROXY front');
    main.tell({ type: 'ready', port });
  }, frontPath);
} else {
  app.listen(config.host, port, (s) => {
    if (!s) {
      log.fatal({ host: config.host, port }, 'cannot listen (port in use or not permitted)');
      closeApps();
      process.exit(1);
    }
    listenSocket = s;
    const actual = uws.us_socket_local_port(s as never);
    boundPort = actual;
    log.debug({ port: actual, uws: from }, 'shard listening');
    main.tell({ type: 'ready', port: actual });
  });
}
