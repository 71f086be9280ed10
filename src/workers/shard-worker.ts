import { rmSync } from 'node:fs';
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { TemplatedApp, us_listen_socket } from '@trufflesuite/uws-js-unofficial';
import { loadUws } from '../http/uws-loader.js';
import { closeApp, Inflight, problemReply, route, type HttpServer } from '../http/uws.js';
import { Mailbox, type PortLike } from '../actors/actor.js';
import type { MainToShard, ShardToMain } from '../protocol/messages.js';
import { connect } from '../db/sql.js';
import { createLogger } from '../log.js';
import { Authenticator } from '../auth/authenticate.js';
import { TicketBox } from '../auth/resume-ticket.js';
import { serverSecret } from '../db/server-secrets.js';
import { installApi } from '../api/router.js';
import { installHealth } from '../api/health.js';
import { installMetrics } from '../api/metrics.js';
import { pushEdgeCounters } from '../edge/metrics.js';
import { installTunnels } from '../edge/shard.js';
import { installOauth } from '../auth/oauth/routes.js';
import type { ShardContext } from '../edge/shard-context.js';
import { setAddressPolicy } from '../http/client-address.js';
import { loadCertificates, SniContexts } from '../http/tls.js';
import { AcmeStore } from '../db/acme.js';
import { DomainRoutes } from '../acme/domain-routes.js';
import { answerChallenge, isChallengeRequest } from '../acme/challenge-route.js';
import { CidrSet } from '../protocol/cidr.js';
import type { Config } from '../config.js';
import { Front } from '../edge/front.js';
import { ConnectionLimits, shardFdBudget } from '../edge/front-limits.js';
import { visitorBuffers } from '../edge/visitor-buffers.js';
import { DISCARD, type FrontHost } from '../edge/front-connection.js';
import { H2Front } from '../edge/h2-front.js';
import { ApiExchange } from '../edge/api-relay.js';
import { acceptControl, isControlRequest } from '../edge/control.js';
import { acceptLink, isLinkRequest } from '../cluster/link-accept.js';
import { LinkTokens, NodeLinks } from '../cluster/node-links.js';

//   public port (SO_REUSEPORT) ─▶ this shard's Front (edge/front.ts): node:net/tls + llhttp
//        ├─ Host <id>.<domain>     ─▶ tunnel data plane (edge/shard.ts)
//        ├─ /tunnel/v1/connect WS  ─▶ control connection (edge/control.ts)
//        ├─ /cluster/v1/link WS    ─▶ (--node-url) a link from another node (cluster/link-accept.ts)
//        └─ anything else          ─▶ unix socket + PROXY v2 ─▶ this shard's uWS App (API, login, health)
//   main thread ◀──Mailbox(parentPort)──▶ this shard
//   other shards ◀──mesh MessagePorts──▶ tunnel data plane (edge/shard.ts)
//
// Thread entry of a shard worker: builds the shard's context, installs the API, health,
// OAuth routes on the uWS App and the tunnel data plane on the front, listens, then reports
// `ready` with the port.

export interface ShardWorkerData {
  index: number;
  config: Config;
  databaseUrl: string;
  /** The public port (fixed: main picked it; every shard listens on it with SO_REUSEPORT). */
  port: number;
  /** The unix socket this shard's uWS App (management API) listens on, behind the front. */
  apiPath: string;
}

const { index, config, databaseUrl, port, apiPath } = workerData as ShardWorkerData;
const SQL_POOL_PER_SHARD = 4;
const MAX_API_BODY_BYTES = 64 * 1024;
const VERIFY_TIMEOUT_MS = 15_000;

const log = createLogger(config.logLevel, { shard: index }, config.logFormat);
// The App sees every request through the front, with a PROXY v2 header naming the client.
setAddressPolicy({ tls: config.tls !== null, trustProxy: config.trustProxy, proxyProtocol: true });
const { uws, from } = loadUws();
const main = new Mailbox<ShardToMain, MainToShard>(parentPort as unknown as PortLike);
const sql = connect(databaseUrl, { max: SQL_POOL_PER_SHARD, applicationName: `burrowd-shard-${index}`, bounded: true });
const app: TemplatedApp = uws.App();
const http: HttpServer = { app, inflight: new Inflight(), log, maxBodyBytes: MAX_API_BODY_BYTES };
const auth = new Authenticator({
  sql,
  verify: (req) => main.ask({ type: 'verify-key', ...req }, VERIFY_TIMEOUT_MS),
  reportFailure: (ip) => main.tell({ type: 'auth-failure', ip }),
  tickets: new TicketBox(await serverSecret(sql, 'resume-ticket')),
  ticketTtlMs: config.resumeTicketTtlMs,
});
/** --node-url: the tokens links between this cluster's nodes present; null on a single node */
const linkTokens = config.nodeUrl === null ? null : new LinkTokens(await serverSecret(sql, 'cluster-link'));
const ctx: ShardContext = {
  index, config, log, sql, uws, app, http, main,
  clusterLinks: linkTokens === null ? null : (linksLog, openHere, health) => new NodeLinks(linksLog, linkTokens, openHere, health),
  accessTagKey: await serverSecret(sql, 'access-tag'),
  authenticate: (a, ip, ticket, admit) => auth.authenticate(a, ip, ticket, admit),
  authIsCheap: (a, ip, ticket) => auth.isCheap(a, ip, ticket),
  resumeTickets: (a, principal) => auth.resumeTickets(a, principal),
};

const tunnels = installTunnels(ctx);
installHealth(ctx);
installMetrics(ctx);
const stopEdgeCounters = pushEdgeCounters(main);
installApi(ctx);
if (config.github || config.oidc) installOauth(ctx);
route(http, 'any', '/*', 0, (req) => problemReply('not-found', `no such endpoint: ${req.method} ${req.path}`));

const apiTarget = { path: apiPath, defaultHost: config.domain };
const domainRoutes = new DomainRoutes();
/** The tunnel a Host names: <id>.<domain> (edge/shard.ts), else a verified custom domain (src/acme/). */
const tunnelFor = (host: string): string | null => tunnels.tunnelOf(host) ?? domainRoutes.tunnelOf(host);
/** Who answers each request the front parsed: by Host, then the control path, then the API. */
const frontHost: FrontHost = {
  log,
  exchange(conn, head, res) {
    const tunnelId = head.host === null ? null : tunnelFor(head.host);
    if (tunnelId !== null) return tunnels.serve(conn, head, res, tunnelId);
    if (isControlRequest(head)) return acceptControl(tunnels.control, conn, head, res);
    if (tunnels.links && isLinkRequest(head)) return acceptLink(tunnels.links, linkTokens!, conn, head, res);
    if (head.upgrade) {
      res.closeAfter();
      res.problem('not-found', 'no WebSocket endpoint here');
      return DISCARD;
    }
    return new ApiExchange(conn, head, res, apiTarget);
  },
  // The last descriptors go to tunnel clients and the API (/healthz included), not to visitors.
  reserved: (head) => head.host === null || tunnelFor(head.host) === null,
};

/** --http-port: ACME HTTP-01 challenges are answered; every other plain-HTTP request is sent to the same URL over HTTPS (308 keeps the method). */
const redirectHost: FrontHost = {
  log,
  exchange(_conn, head, res) {
    if (isChallengeRequest(head)) {
      answerChallenge(sql, head, res);
      return DISCARD;
    }
    const base = new URL(config.baseUrl);
    const httpsPort = base.protocol === 'https:' ? base.port : String(port);
    const sent = (head.host ?? '').replace(/:\d+$/, '');
    // The visitor's Host goes into Location: only a plain host name or address is echoed.
    const host = /^([a-z0-9.-]{1,253}|\[[0-9a-f:.]{2,45}\])$/i.test(sent) ? sent : base.hostname;
    const location = `https://${host}${httpsPort && httpsPort !== '443' ? `:${httpsPort}` : ''}${head.target.startsWith('/') ? head.target : '/'}`;
    res.reply(308, { location, 'content-type': 'text/plain; charset=utf-8' }, `Redirecting to ${location}\n`);
    return DISCARD;
  },
};

let apiListen: us_listen_socket | null = null;
let front: Front | null = null;
let redirectFront: Front | null = null;
/** Verified custom domains without a certificate, by when this shard last told main (first need: ACME orders one). */
const wanted = new Map<string, number>();
const WANTED_EVERY_MS = 60_000;
function certificateWanted(name: string): void {
  if (!config.tls?.acme || domainRoutes.tunnelOf(name) === null) return;
  const now = Date.now();
  if ((wanted.get(name) ?? 0) > now - WANTED_EVERY_MS) return;
  if (wanted.size >= 10_000) wanted.clear();
  wanted.set(name, now);
  main.tell({ type: 'certificate-wanted', name });
}
const contexts = config.tls ? new SniContexts(loadCertificates(config.tls), config.domain, certificateWanted) : null;
const acmeStore = config.tls?.acme ? new AcmeStore(sql) : null;

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
    // Late enough for the 202 to cross the front to the test first.
    setTimeout(() => {
      throw new Error('fault injection: shard crash requested');
    }, 100);
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
    case 'acme-reload':
      return reloadIssued();
    default:
      // Everything else is the tunnel data plane's (protocol/tunnel-messages.ts).
      return tunnels.onMain(msg);
  }
});

async function drain(timeoutMs: number): Promise<{ idle: boolean }> {
  http.inflight.draining = true;
  front?.stopAccepting();
  redirectFront?.stopAccepting();
  // API requests and tunnelled streams finish side by side, both within the one timeout.
  const [idle] = await Promise.all([http.inflight.idle(timeoutMs), tunnels.drain(timeoutMs)]);
  stopEdgeCounters();
  await sql.end({ timeout: 2 });
  front?.destroyAll();
  redirectFront?.destroyAll();
  if (apiListen) uws.us_listen_socket_close(apiListen);
  apiListen = null;
  // A worker whose uWS loop still has sockets must not end: Node aborts the whole process
  // on thread exit with open uv handles.
  closeApp(app);
  return { idle };
}

/** SIGHUP (via main): new handshakes get the certificates read again; open connections keep theirs. */
function reloadTls(): { error: string | null } {
  if (!config.tls || !contexts || http.inflight.draining) return { error: null };
  try {
    contexts.set(loadCertificates(config.tls));
  } catch (err) {
    log.error({ err: (err as Error).message }, 'TLS reload failed; keeping the current certificates');
    return { error: (err as Error).message };
  }
  log.info({ shard: index }, 'TLS certificates reloaded');
  return { error: null };
}

/**
 * A new or renewed ACME certificate, or a custom domain verified or removed (main, after this
 * node or another changed it): new handshakes and requests get them, open connections keep theirs.
 */
async function reloadIssued(): Promise<{ certificates: number }> {
  await domainRoutes.load(sql);
  if (!acmeStore || !contexts) return { certificates: 0 };
  const certs = await acmeStore.certificates();
  const refused = contexts.setIssued(certs);
  if (refused.length > 0) log.error({ refused }, 'ACME certificates that cannot be used were skipped');
  return { certificates: certs.length - refused.length };
}
// A restarted shard reads them itself: main told only the shards that were up.
await reloadIssued();

// Main holds the blocks: a restarted shard applies those in force before it serves anyone.
for (const b of await main.ask({ type: 'auth-blocks' }, VERIFY_TIMEOUT_MS)) auth.block(b.ip, b.untilMs);

// The App first (the front relays to it), then the public port.
rmSync(apiPath, { force: true }); // a restarted shard finds its predecessor's socket file
await new Promise<void>((resolve) => {
  app.listen_unix((s) => {
    if (!s) {
      log.fatal({ path: apiPath }, 'cannot listen on the unix socket of the management API');
      closeApp(app);
      process.exit(1);
    }
    apiListen = s;
    resolve();
  }, apiPath);
});
const proxyFrom = new CidrSet(config.proxyProtocolFrom);
// Both fronts of this shard share one count: descriptors are the process's, whichever port.
const limits = new ConnectionLimits({
  perGroup: config.front.maxConnectionsPerIp,
  fdBudget: shardFdBudget(config.front.publicFdLimit, config.workers),
  exempt: new CidrSet(config.trustProxy),
});
const timeouts = { firstByteTimeoutMs: config.front.firstByteTimeoutMs, sendTimeoutMs: config.front.sendTimeoutMs };
visitorBuffers.budget = config.front.visitorBufferBudgetBytes;
try {
  const h2 = new H2Front({ log, tunnels, maxStreams: config.h2MaxStreams, sendTimeoutMs: timeouts.sendTimeoutMs });
  front = await Front.listen({ host: config.host, port, tls: contexts, proxyProtocol: config.proxyProtocol, proxyFrom, log, host_: frontHost, limits, timeouts, h2 });
  if (config.httpPort !== null) redirectFront = await Front.listen({ host: config.host, port: config.httpPort, tls: null, proxyProtocol: false, log, host_: redirectHost, limits, timeouts });
} catch (err) {
  log.fatal({ err, host: config.host, port }, 'cannot listen (port in use or not permitted)');
  closeApp(app);
  process.exit(1);
}
log.debug({ port, uws: from }, 'shard listening');
main.tell({ type: 'ready', port });
