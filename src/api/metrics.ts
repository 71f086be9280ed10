import { problemReply, route } from '../http/uws.js';
import type { ShardContext } from '../edge/shard-context.js';
import { authenticateOperator } from './operator.js';

// GET /metrics on the main port (any shard): an admin's management key, then the whole
// server's exposition from main (main-thread/metrics.ts), which sums every shard.

/** Main asks every shard for its gauges (2 s each at most) before it answers. */
const METRICS_TIMEOUT_MS = 5_000;

export function installMetrics(shard: ShardContext): void {
  route(shard.http, 'get', '/metrics', 0, async (req) => {
    await authenticateOperator(shard, req, 'reading metrics');
    const { contentType, text } = await shard.main.ask({ type: 'metrics' }, METRICS_TIMEOUT_MS);
    return { status: 200, headers: { 'content-type': contentType }, body: text };
  });
  route(shard.http, 'any', '/metrics', 0, () => {
    const r = problemReply('method-not-allowed', 'this path accepts GET');
    return { ...r, headers: { ...r.headers, allow: 'GET' } };
  });
}
