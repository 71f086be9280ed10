#!/usr/bin/env node
// burrowd: config → database → migrations → argon2 pool → registry → shards → listen.
import { availableParallelism } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { parseConfig, withPort } from './config.js';
import { checkOauthConfig } from './auth/oauth/routes.js';
import { createLogger } from './log.js';
import { knownBuildFlaw, loadUws } from './http/uws-loader.js';
import { connect, type Sql } from './db/sql.js';
import { startEmbedded, type EmbeddedDb } from './db/embedded.js';
import { migrate } from './db/migrate.js';
import { ensureUser } from './db/users.js';
import { Jobs } from './workers/jobs.js';
import { ShardSupervisor } from './workers/shards.js';
import { RegistryActor } from './actors/registry.js';
import { FailureLimiter } from './auth/failure-limiter.js';
import { issueKey, INVALIDATE_TIMEOUT_MS } from './auth/api-keys.js';
import type { ShardToMain } from './protocol/messages.js';

const SEED_EMAIL = 'seed@burrow.local';

const parsed = parseConfig(process.argv.slice(2));
try {
  // Unusable provider settings (e.g. plain-http endpoints off loopback) stop the start-up.
  checkOauthConfig(parsed);
} catch (err) {
  process.stderr.write(`error: ${(err as Error).message}\n`);
  process.exit(2);
}
const log = createLogger(parsed.logLevel);
const t0 = performance.now();

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

const config = withPort(parsed, parsed.port === 0 ? await freePort(parsed.host) : parsed.port);

// Fail before touching the database when uWS cannot load natively.
const loadedUws = loadUws();
const { from: uwsFrom } = loadedUws;
const uwsFlaw = knownBuildFlaw(loadedUws);
if (uwsFlaw) log.warn({ uws: uwsFrom, version: loadedUws.version }, uwsFlaw);

let embedded: EmbeddedDb | null = null;
let databaseUrl = config.databaseUrl;
if (!databaseUrl) {
  embedded = await startEmbedded(config.dataDir, log);
  databaseUrl = embedded.url;
}
const sql: Sql = connect(databaseUrl, { max: 4, applicationName: 'burrowd-main' });
await migrate(sql, log);

const jobs = new Jobs(Math.max(1, Math.min(4, availableParallelism() - 1)));
const limiter = new FailureLimiter(config.authFailureLimit);

const supervisor: ShardSupervisor = new ShardSupervisor(config, databaseUrl, log, {
  onMessage: (shard, msg) => handleShardMessage(shard, msg),
  onShardDown: (shard) => registry.shardDown(shard),
  onGiveUp: (reason) => {
    log.fatal({ reason }, 'shards keep crashing; stopping');
    void shutdown('shard restart budget exhausted', 1);
  },
});
const registry = new RegistryActor(
  log,
  { tell: (i, m) => supervisor.tell(i, m), ask: (i, m, t) => supervisor.ask(i, m, t) },
  sql,
  config,
);
await registry.start();

/** The main thread's mailbox: every message a shard sends lands here. */
function handleShardMessage(shard: number, msg: Exclude<ShardToMain, { type: 'ready' }>): unknown {
  switch (msg.type) {
    case 'hash-secret':
      return jobs.argon2({ op: 'hash', secret: msg.secret });
    case 'verify-secret':
      return jobs.argon2({ op: 'verify', hash: msg.hash, secret: msg.secret });
    case 'auth-failure': {
      const until = limiter.fail(msg.ip);
      if (until !== null) {
        log.warn({ ip: msg.ip }, 'failed-authentication limit reached; answering 429');
        supervisor.broadcast({ type: 'ip-blocked', ip: msg.ip, untilMs: until });
      }
      return undefined;
    }
    case 'auth-invalidate':
      return supervisor.askAll({ type: 'auth-invalidate', keyIds: msg.keyIds, userIds: msg.userIds }, INVALIDATE_TIMEOUT_MS).then(() => ({}));
    case 'health':
      return { shardsUp: supervisor.up, shardsTotal: supervisor.total };
    default:
      // Everything else is the tunnel data plane's (protocol/tunnel-messages.ts).
      return registry.handle(shard, msg);
  }
}

async function seedKey(): Promise<string> {
  const user = await ensureUser(sql, SEED_EMAIL, 'Seed admin', 'admin');
  const local = {
    sql,
    main: { ask: <R>(m: ShardToMain, _t: number) => Promise.resolve(m.type === 'auth-invalidate' ? ({} as R) : (handleShardMessage(-1, m as never) as R)) },
  };
  const created = await issueKey(local as never, { userId: user.id, name: 'seed', scopes: ['tunnels', 'management'], expiresAt: null, replaceSameName: true });
  return created.key;
}

// `burrowd --seed-api-key | head -1` closes stdout after the key: later writes must not kill us.
process.stdout.on('error', (err) => log.debug({ err }, 'stdout closed'));

const seeded = config.seedApiKey ? await seedKey() : null;
const port = await supervisor.start(config.port);
if (seeded) process.stdout.write(`${seeded}\n`);
process.stdout.write(`burrowd listening on http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${port} (base URL ${config.baseUrl})\n`);
log.info(
  { port, workers: config.workers, uws: uwsFrom, database: embedded ? `embedded (${config.dataDir})` : 'postgresql', startMs: Math.round(performance.now() - t0) },
  'burrowd ready',
);

let stopping = false;
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
    await supervisor.stop(config.shutdownTimeoutMs);
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

process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
