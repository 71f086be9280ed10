#!/usr/bin/env -S MALLOC_ARENA_MAX=2 node
// burrowd: config → database → migrations → argon2 pool → registry → shards → listen.
// MALLOC_ARENA_MAX=2 (shebang, npm start): glibc gives each thread an arena of its own, and
// the shard threads' freed body buffers stay fragmented in them after load (RSS +48 % a
// minute after a churn with glibc's defaults, +20 % with two arenas; README Memory). A fixed
// MALLOC_MMAP_THRESHOLD_=65536 returned it all but mmapped and unmapped every 64 KiB socket
// read: 8x the server CPU per byte and a tenth of the TCP throughput.
import { availableParallelism } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { parseConfig, withPort, type Config } from './config.js';
import { checkOauthConfig } from './auth/oauth/routes.js';
import { createLogger } from './log.js';
import { loadUws } from './http/uws-loader.js';
import { connect, type Sql } from './db/sql.js';
import { startEmbedded, type EmbeddedDb } from './db/embedded.js';
import { migrate } from './db/migrate.js';
import { Jobs } from './workers/jobs.js';
import { ShardSupervisor } from './main-thread/shards.js';
import { ServerMetrics } from './main-thread/metrics.js';
import { listenMetrics, metricsHostNames, type MetricsListener } from './main-thread/metrics-listener.js';
import { RegistryActor } from './actors/registry.js';
import { FailureLimiter } from './auth/failure-limiter.js';
import { addressGroup, isVeryBroad } from './protocol/cidr.js';
import { INVALIDATE_TIMEOUT_MS } from './auth/api-keys.js';
import { ensureSeedKey, noAdminWarning, seedKeyHint, type SeedKey } from './seed-key.js';
import { noUserExists } from './db/users.js';
import { assertPortFree, bindScope, listenAddress, probePort } from './listen.js';
import type { HandlerAnswer, IpBlock, KeyVerdict, ShardToMain, ShardToMainReplies } from './protocol/messages.js';
import { ApiError } from './errors.js';
import { loadCertificates } from './http/tls.js';
import { shardSockets } from './main-thread/shards.js';
import { sharedPortSupported } from './edge/front.js';
import { ClusterNode } from './cluster/node.js';
import { runServiceCommand } from './service-unit.js';
import type { CertManager } from './acme/manager.js';
import { DomainWatch } from './acme/domain-watch.js';
import { retryDelayMs } from './acme/renewal.js';
import type { AcmeConfig } from './config.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClusterDirectory } from './cluster/directory.js';
import { clusterEvents } from './cluster/events.js';
import { OwnInvalidations } from './cluster/own-invalidations.js';

// `burrowd`, not `node`, in ps and /proc/<pid>/comm: `pkill -HUP -x burrowd` (the certificate
// renewal hook, README) and `pgrep -x burrowd` find it.
process.title = 'burrowd';
if (process.argv[2] === 'service') process.exit(runServiceCommand(process.argv.slice(3)));
const parsed = parseConfig(process.argv.slice(2));
try {
  // Unusable provider settings (e.g. plain-http endpoints off loopback) stop the start-up.
  checkOauthConfig(parsed);
} catch (err) {
  process.stderr.write(`error: ${(err as Error).message}\n`);
  process.exit(2);
}
const log = createLogger(parsed.logLevel, {}, parsed.logFormat);
const t0 = performance.now();
const broadTrust = parsed.trustProxy.filter(isVeryBroad);
if (broadTrust.length > 0) {
  // Allowed (the port may only be reachable through the balancers), but if it is not, a forged X-Forwarded-For from
  // almost anywhere sets the client address every limit and --allow-ip rule counts by.
  log.warn({ trustProxy: broadTrust.map((c) => `${c.address}/${c.prefix}`) }, '--trust-proxy covers very broad ranges: almost every address may forge the client address (X-Forwarded-For); name only your load balancers');
}
if (parsed.tls) {
  // A certificate or key that cannot be used stops the start, naming the file.
  try {
    loadCertificates(parsed.tls);
  } catch (err) {
    log.error({ err: (err as Error).message }, 'unusable TLS certificate');
    process.stderr.write(`burrowd: ${(err as Error).message}\n`);
    process.exit(1);
  }
}

/**
 * Shards share the port through SO_REUSEPORT, which the kernel only grants to a fixed
 * port: for --port 0, find a free one first.
 */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, host, () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

// A fixed port already taken must stop the start before the data is touched: the shards'
// SO_REUSEPORT would otherwise share it with another burrowd and split its traffic.
if (parsed.port !== 0) await assertPortFree(parsed.host, parsed.port, log);
if (parsed.httpPort !== null) await assertPortFree(parsed.host, parsed.httpPort, log);
const config = oneShardUnlessShared(withPort(parsed, parsed.port === 0 ? await freePort(parsed.host) : parsed.port));

/** Shards share the port through SO_REUSEPORT; where Node cannot set it (edge/front.ts), one shard serves. */
function oneShardUnlessShared(c: Config): Config {
  if (c.workers === 1 || sharedPortSupported()) return c;
  log.warn({ workers: c.workers, node: process.versions.node }, 'this Node cannot share the port between threads (SO_REUSEPORT: Node 22.12 or later, or linux-x64): running one shard');
  return Object.freeze({ ...c, workers: 1 });
}

function metricsAddrUnusable(err: NodeJS.ErrnoException): void {
  const { host, port } = parsed.metricsAddr!;
  const why = err.code === 'EADDRINUSE' ? 'the address is already in use' : err.code === 'EADDRNOTAVAIL' ? 'no local interface has that address' : err.message;
  log.error({ host, port, code: err.code }, 'cannot listen on --metrics-addr');
  process.stderr.write(`burrowd: cannot listen on --metrics-addr ${listenAddress(host, port).slice('http://'.length)}: ${why}\n`);
}
if (parsed.metricsAddr && parsed.metricsAddr.port !== 0) {
  const err = await probePort(parsed.metricsAddr.host, parsed.metricsAddr.port);
  if (err) {
    metricsAddrUnusable(err);
    process.exit(1);
  }
}

// Fail before touching the database when uWS cannot load natively.
const loadedUws = loadUws();
const { from: uwsFrom } = loadedUws;

let embedded: EmbeddedDb | null = null;
let databaseUrl = config.databaseUrl;
if (!databaseUrl) {
  // Pools: main's 4 and 4 per shard (shard-worker.ts); doubled so restarting shards never run out.
  embedded = await startEmbedded(config.dataDir, log, { maxConnections: 2 * 4 * (config.workers + 1) + 10 });
  databaseUrl = embedded.url;
}
const sql: Sql = connect(databaseUrl, { max: 4, applicationName: 'burrowd-main' });
await migrate(sql, log);

const jobs = new Jobs(Math.max(1, Math.min(4, availableParallelism() - 1)), log);
const limiter = new FailureLimiter(config.authFailureLimit, (block) => {
  log.warn({ [block.kind]: block.subject, untilMs: block.untilMs }, 'failed-authentication limit reached; answering 429');
  // Prefix blocks stay here: a blocked prefix still admits its owner's addresses, which only main knows.
  if (block.kind === 'ip') supervisor.broadcast({ type: 'ip-blocked', ip: block.subject, untilMs: block.untilMs });
});

const supervisor: ShardSupervisor = new ShardSupervisor(config, databaseUrl, log, {
  onMessage: (shard, msg) => handleShardMessage(shard, msg),
  onShardDown: (shard) => {
    registry.shardDown(shard);
    metrics.shardDown(shard);
    metrics.shardRestarted();
  },
  onGiveUp: (reason) => {
    log.fatal({ reason }, 'shards keep crashing; stopping');
    void shutdown('shard restart budget exhausted', 1);
  },
});
// --node-url: this node joins the cluster before the shards listen (an admission claims its id
// in the cluster's registry, which names this node). Its events are handled in one place
// (src/cluster/events.ts); revocations made through another node (or by SQL) end this node's
// caches and connections as its own API would.
const clusterLog = log.child({ part: 'cluster' });
const ownInvalidations = new OwnInvalidations();
let directory: ClusterDirectory | null = null;
const cluster: ClusterNode | null =
  config.nodeUrl === null
    ? null
    : new ClusterNode(sql, clusterLog, config.nodeUrl, clusterEvents({ directory: () => directory!, registry: (): RegistryActor => registry, invalidate: (k, u, end) => void invalidateHere(k, u, end), own: ownInvalidations, log: clusterLog }));
const registry: RegistryActor = new RegistryActor(
  log,
  { tell: (i, m) => supervisor.tell(i, m), ask: (i, m, t) => supervisor.ask(i, m, t) },
  sql,
  config,
  cluster ? (host, holds) => (directory = new ClusterDirectory(holds, cluster, sql, clusterLog, host, config)) : undefined,
);

function invalidateHere(keyIds: string[], userIds: string[], endConnections: string | null): Promise<unknown> {
  return supervisor.askAll({ type: 'auth-invalidate', keyIds, userIds, endConnections }, INVALIDATE_TIMEOUT_MS).catch((err: unknown) => log.warn({ err }, 'cluster: invalidation on this node failed'));
}

const metrics = new ServerMetrics({ tunnels: () => registry.liveByType(), shards: async () => (await registry.counts()).shards });
registry.stats.observer = metrics;
await registry.start();
const acme = config.tls?.acme ? await startAcme(config.tls.acme) : null;
const domainWatch = new DomainWatch({
  sql,
  log: log.child({ part: 'domains' }),
  tunnelDomain: config.domain,
  resolvers: config.tls?.acme?.resolvers ?? null,
  verified: (name) => customDomainChanged(name).then(() => undefined),
  issue: acme ? (name) => acme.customDomain(name) : null,
});
let metricsListener: MetricsListener | null = null;
if (config.metricsAddr) {
  try {
    metricsListener = await listenMetrics(config.metricsAddr.host, config.metricsAddr.port, () => metrics.render(), log, metricsHostNames(config));
  } catch (err) {
    // Checked before the data was touched; only a race with another program gets here.
    metricsAddrUnusable(err as NodeJS.ErrnoException);
    await sql.end({ timeout: 2 });
    await embedded?.stop();
    process.exit(1);
  }
}

/**
 * --acme-email: the certificates stored so far, then (without --tls-cert) the tunnel wildcard,
 * before the shards listen: HTTPS needs it, and a first start waits for the CA (retrying).
 */
async function startAcme(acmeConfig: AcmeConfig): Promise<CertManager> {
  // Loaded only here: the ACME client and its HTTP stack (undici) are a tenth of a start's CPU.
  const { CertManager } = await import('./acme/manager.js');
  const manager = new CertManager({
    sql,
    log: log.child({ part: 'acme' }),
    acme: acmeConfig,
    domain: config.domain,
    say: (text) => void process.stdout.write(text),
    onChange: () => supervisor.askAll({ type: 'acme-reload' }, 10_000).catch((err: unknown) => log.error({ err }, 'ACME: a shard could not load the new certificate')),
    registry: metrics.registry,
  });
  // HTTP-01 (custom domains) is checked by the CA on port 80 of the domain: --http-port 80 here, or forwarded to it.
  if (config.httpPort === null) log.warn('--acme-email without --http-port: custom domains cannot get certificates (ACME HTTP-01 needs port 80 forwarded to --http-port)');
  await manager.start();
  if (config.tls?.certFile) return manager;
  for (let failures = 1; ; failures++) {
    try {
      await manager.wildcard();
      return manager;
    } catch {
      // Logged by the manager; the wait grows as for a failed renewal.
      await sleep(retryDelayMs(failures, new Date(8.64e15)));
    }
  }
}

/** A custom domain was verified or removed: every shard routes by the new set, then (verified, with ACME) its certificate is ordered. */
async function customDomainChanged(name: string): Promise<Record<string, never>> {
  await supervisor.askAll({ type: 'acme-reload' }, 10_000).catch((err: unknown) => log.error({ err }, 'a shard could not reload the custom domains'));
  acme?.customDomain(name).catch(() => undefined); // failures are logged and retried by the manager and the minute check
  return {};
}

/** The main thread's mailbox: every message a shard sends lands here; an ask's answer is its ShardToMainReplies entry. */
function handleShardMessage(shard: number, msg: Exclude<ShardToMain, { type: 'ready' }>): HandlerAnswer<ShardToMainReplies> {
  switch (msg.type) {
    case 'hash-secret':
      return jobs.hash(msg.secret);
    case 'verify-key':
      return verifyKey(msg);
    case 'auth-failure':
      limiter.fail(addressGroup(msg.ip));
      metrics.authFailed();
      return undefined;
    case 'auth-blocks':
      return limiter.blocks().flatMap((b): IpBlock[] => (b.kind === 'ip' ? [{ ip: b.subject, untilMs: b.untilMs }] : []));
    case 'auth-invalidate':
      // The change's notification comes back to this node too: it finds this done.
      if (cluster) ownInvalidations.mark(msg.keyIds, msg.userIds, msg.endConnections !== null);
      return supervisor.askAll({ type: 'auth-invalidate', keyIds: msg.keyIds, userIds: msg.userIds, endConnections: msg.endConnections }, INVALIDATE_TIMEOUT_MS).then(async () => {
        // In a cluster the API answers once no node holds a tunnel of these keys or users.
        if (cluster && msg.endConnections !== null) await cluster.awaitGone({ keyIds: msg.keyIds, userIds: msg.userIds });
        return {};
      });
    case 'health':
      return { shardsUp: supervisor.up, shardsTotal: supervisor.total };
    case 'edge-counters':
      metrics.edge(shard, msg.totals);
      return undefined;
    case 'metrics':
      return metrics.render();
    case 'custom-domain-verified':
      return customDomainChanged(msg.name);
    case 'certificate-wanted':
      // First need of a verified custom domain: ordered (once: the manager queues per name; failures are logged).
      acme?.customDomain(msg.name).catch(() => undefined);
      return undefined;
    default:
      // Everything else is the tunnel data plane's (protocol/tunnel-messages.ts).
      return registry.handle(shard, msg);
  }
}

/** Counts the attempt as pending before it is verified, so concurrent guesses cannot overrun the limit. */
async function verifyKey(msg: Extract<ShardToMain, { type: 'verify-key' }>): Promise<KeyVerdict> {
  // IPv6 clients count by /64: one host usually holds a whole /64 (README "Server flags").
  const who = addressGroup(msg.ip);
  const admission = limiter.admit(who, msg.prefix);
  if (!admission.admitted) return { verdict: 'limited', kind: admission.kind, retryAfterS: admission.retryAfterS };
  let valid = false;
  try {
    valid = await jobs.verify(msg.hash, msg.secret, who, limiter.isTrusted(who, msg.prefix));
  } catch (err) {
    // Unverified because the queue was full: a failure of this address all the same.
    limiter.settle(who, msg.prefix, err instanceof ApiError && err.code === 'unavailable' ? 'dropped' : 'none');
    if (err instanceof ApiError && err.code === 'unavailable') return { verdict: 'busy' };
    throw err;
  }
  limiter.settle(who, msg.prefix, valid ? 'valid' : 'invalid');
  metrics.keyVerified();
  if (!valid) metrics.authFailed();
  return { verdict: valid ? 'valid' : 'invalid' };
}

function seedKey(): Promise<SeedKey> {
  return ensureSeedKey(
    {
      sql,
      log,
      hash: (secret) => jobs.hash(secret),
      verify: (hash, secret) => jobs.verify(hash, secret, 'seed'),
    },
    config.dataDir,
  );
}

// `burrowd --seed-api-key | head -1` closes stdout after the key: later writes must not kill us.
process.stdout.on('error', (err) => log.debug({ err }, 'stdout closed'));

const seeded = config.seedApiKey ? await seedKey() : null;
if (!config.seedApiKey && config.initialAdminEmail === null && (await noUserExists(sql))) log.warn({ dataDir: config.dataDir }, noAdminWarning());
await cluster?.start();
// The shards learn the live nodes with their routes (tunnel-routes), then each change (cluster-nodes).
await (directory as ClusterDirectory | null)?.readNodes(); // made by the registry's constructor
// Again just before the shards bind: the database start-up may have taken seconds.
if (parsed.port !== 0) await assertPortFree(config.host, config.port, log, async () => (await sql.end({ timeout: 2 }), await embedded?.stop()));
// Each shard's front owns the port (SO_REUSEPORT); its uWS App listens on a unix socket.
const apiSockets = shardSockets(config.workers);
let port: number;
try {
  port = await supervisor.start(config.port, apiSockets.paths);
} catch (err) {
  log.fatal({ err, host: config.host, port: config.port }, 'cannot listen (port in use or not permitted)');
  await supervisor.stop(1_000);
  apiSockets.remove();
  await embedded?.stop();
  process.exit(1);
}
// Before the lines that tell a supervisor (or a test) we are up: a SIGTERM sent on reading
// them must find its handler, not the default action that ends the process at once.
let stopping = false;
domainWatch.start();
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGHUP', () => void reloadTls());
const metricsAt = metricsListener ? `metrics on ${listenAddress(metricsListener.host, metricsListener.port)}/metrics` : '';
if (seeded) process.stdout.write(`${seeded.key}\n`);
process.stdout.write(`burrowd listening on ${listenAddress(config.host, port, config.tls !== null)} (${[bindScope(config.host), `base URL ${config.baseUrl}`, metricsAt].filter(Boolean).join('; ')})\n`);
if (seeded && (process.stdout.isTTY || process.stderr.isTTY)) process.stderr.write(seedKeyHint(seeded, config.baseUrl));
log.info(
  { host: config.host, port, baseUrl: config.baseUrl, workers: config.workers, uws: uwsFrom, database: embedded ? `embedded (${config.dataDir})` : 'postgresql', startMs: Math.round(performance.now() - t0) },
  'burrowd ready',
);

async function shutdown(reason: string, code = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info({ reason, timeoutMs: config.shutdownTimeoutMs }, 'shutting down: draining shards');
  const hardStop = setTimeout(() => {
    log.error('shutdown took too long; exiting');
    process.exit(code || 1);
  }, config.shutdownTimeoutMs + 15_000);
  hardStop.unref();
  try {
    await metricsListener?.close();
    await supervisor.stop(config.shutdownTimeoutMs);
    apiSockets.remove();
    await cluster?.stop();
    await domainWatch.stop();
    await acme?.stop();
    await registry.stop();
    await jobs.close();
    await sql.end({ timeout: 2 });
    await embedded?.stop();
  } catch (err) {
    log.error({ err }, 'error during shutdown');
    code = code || 1;
  }
  log.info('stopped');
  process.exit(code);
}

/** SIGHUP: every certificate is read again; a file that became unusable keeps the old ones. */
async function reloadTls(): Promise<void> {
  if (!config.tls || stopping) return;
  try {
    loadCertificates(config.tls);
  } catch (err) {
    log.error({ err: (err as Error).message }, 'TLS reload refused: keeping the current certificates');
    return;
  }
  await supervisor.askAll({ type: 'tls-reload' }, 10_000).then(
    () => log.info({ certificates: config.tls }, 'TLS certificates reloaded'),
    (err: unknown) => log.error({ err }, 'TLS reload failed on a shard'),
  );
}

