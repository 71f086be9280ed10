import { jsonReply, problemReply, route, type RequestData } from '../http/uws.js';
import { ApiError } from '../errors.js';
import { authenticateOperator } from './operator.js';
import type { DataPlaneCounts } from '../protocol/tunnel-messages.js';
import type { ShardContext } from '../edge/shard-context.js';
import { openApiDocument } from './openapi.js';
import { API_PREFIX } from './route.js';
import { ping } from '../db/sql.js';

const READY_TIMEOUT_MS = 2_000;

function within<T>(p: Promise<T>, ms: number): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error('timeout')), ms).unref())]);
}

/**
 * `GET /readyz?detail=1`: live data-plane objects of main and every shard, for operators (and
 * the cleanup test): all must return to 0 once every peer has left. Admin only: it shows load.
 */
async function dataPlaneCounts(shard: ShardContext, req: RequestData): Promise<DataPlaneCounts> {
  await authenticateOperator(shard, req, 'readiness detail');
  return shard.main.ask({ type: 'data-plane-counts' }, READY_TIMEOUT_MS + 1_000);
}

/** Unauthenticated endpoints: liveness, readiness, and the API description (plus the admin-only readiness detail). */
export function installHealth(shard: ShardContext): void {
  route(shard.http, 'get', '/healthz', 0, () => jsonReply(200, { status: 'ok' }));
  route(shard.http, 'get', '/readyz', 0, async (req) => {
    if (req.query.has('detail')) {
      const detail = req.query.get('detail');
      if (detail !== '1') throw new ApiError('bad-request', `query field "detail" must be 1, got "${detail}"`);
      return jsonReply(200, await dataPlaneCounts(shard, req));
    }
    const [db, shards] = await Promise.allSettled([
      within(ping(shard.sql), READY_TIMEOUT_MS),
      shard.main.ask({ type: 'health' }, READY_TIMEOUT_MS),
    ]);
    const checks = {
      database: db.status === 'fulfilled' ? 'ok' : 'unreachable',
      shards: shards.status === 'fulfilled' ? `${shards.value.shardsUp}/${shards.value.shardsTotal}` : 'unknown',
    };
    const ok = db.status === 'fulfilled' && shards.status === 'fulfilled' && shards.value.shardsUp === shards.value.shardsTotal;
    if (ok) return jsonReply(200, { status: 'ready', checks });
    const r = problemReply('unavailable', `not ready: database ${checks.database}, shards up ${checks.shards}`);
    return { ...r, body: JSON.stringify({ ...JSON.parse(String(r.body)), checks }) };
  });
  const doc = JSON.stringify(openApiDocument(shard.config.baseUrl + API_PREFIX.replace('/api/v1', '')));
  route(shard.http, 'get', `${API_PREFIX}/openapi.json`, 0, () => ({ status: 200, headers: { 'content-type': 'application/json' }, body: doc }));
  // Like every API path: another method is 405 with Allow, not "no such endpoint".
  for (const path of ['/healthz', '/readyz', `${API_PREFIX}/openapi.json`]) {
    route(shard.http, 'any', path, 0, () => {
      const r = problemReply('method-not-allowed', 'this path accepts GET');
      return { ...r, headers: { ...r.headers, allow: 'GET' } };
    });
  }
}
