import type { TObject, TSchema } from '@sinclair/typebox';
import type { ProblemCode } from '../errors.js';
import type { ScopeRequirement } from '../protocol/roles.js';
import type { Principal } from '../protocol/messages.js';
import type { ShardContext } from '../edge/shard-context.js';

/** What a handler receives: never a uWS object, always validated input. */
export interface ApiCall<Body = unknown, Query = unknown> {
  shard: ShardContext;
  principal: Principal;
  /** Path parameters by name, already checked (uuids are valid uuids). */
  params: Record<string, string>;
  query: Query;
  body: Body;
  ip: string;
}

/** One row of the route table: who may call it, what it takes, what it answers. */
export interface ApiRoute {
  operationId: string;
  summary: string;
  method: 'get' | 'post' | 'put' | 'delete';
  /** Relative to /api/v1, OpenAPI style: /teams/{id}/members. */
  path: string;
  scope: ScopeRequirement;
  /** Only users with role admin (403 otherwise). */
  adminOnly?: boolean;
  /** Kind of each path parameter; uuid ones are validated before the handler runs. */
  params?: Record<string, 'uuid' | 'string'>;
  query?: TObject;
  body?: TSchema;
  status: 200 | 201;
  response: TSchema;
  /** Error responses beyond the ones every authenticated route has (401, 429, 500, 503). */
  errors: ProblemCode[];
  handle(call: ApiCall<any, any>): Promise<unknown>;
}

export const API_PREFIX = '/api/v1';
