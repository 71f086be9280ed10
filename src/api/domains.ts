import { Type, type Static } from '@sinclair/typebox';
import type { ApiCall, ApiRoute } from './route.js';
import { Domain, DomainBody, Empty } from './schemas.js';
import { getMembership, teamIdsOf } from '../db/teams.js';
import { serverSecret } from '../db/server-secrets.js';
import { ApiError } from '../errors.js';
import { customDomainProblem, ownershipToken, ownershipTxtName } from '../acme/domain-name.js';
import { countDomains, deleteDomain, domain, domainsVisibleTo, insertDomain, MAX_DOMAINS_PER_USER, recordCheck, type DomainRow } from '../db/custom-domains.js';
import { checkOwnership } from '../acme/ownership.js';
import { tunnelIdProblem } from '../protocol/tunnel-id.js';
import type { ShardContext } from '../edge/shard-context.js';

// Custom domains: a user adds a name for one of their tunnel ids, proves ownership by DNS (a TXT
// token bound to them, or a CNAME to the tunnel host), and from then on the name routes to that
// tunnel and gets a certificate (src/acme/manager.ts). A team's domain is seen and verified by its
// members and removed by the user who added it, a team owner, or an admin, as a team's tunnels.

const VERIFIED_TIMEOUT_MS = 10_000;

const show = (shard: ShardContext, d: DomainRow): Static<typeof Domain> => ({
  name: d.name,
  tunnel: d.tunnel,
  owner_id: d.user_id,
  team_id: d.team_id,
  verified: d.verified_at !== null,
  verified_at: d.verified_at?.toISOString() ?? null,
  txt_name: ownershipTxtName(d.name),
  txt_value: d.token,
  cname_target: `${d.tunnel}.${shard.config.domain}`,
  last_check_at: d.last_check_at?.toISOString() ?? null,
  last_error: d.last_error,
  created_at: d.created_at.toISOString(),
});

/** The domain if the caller may see it (admin, the user who added it, a member of its team), else 404. */
async function visible({ shard, principal, params }: ApiCall): Promise<{ d: DomainRow; teamRole: string | null }> {
  const name = params.name!.toLowerCase().replace(/\.$/, '');
  const d = await domain(shard.sql, name);
  if (d) {
    const m = d.team_id ? await getMembership(shard.sql, d.team_id, principal.userId) : null;
    if (principal.role === 'admin' || d.user_id === principal.userId || m) return { d, teamRole: m?.role ?? null };
  }
  throw new ApiError('not-found', `no custom domain "${name}"`);
}

async function create({ shard, principal, body }: ApiCall<Static<typeof DomainBody>>) {
  const checked = customDomainProblem(body.name, shard.config.domain);
  if ('problem' in checked) throw new ApiError('bad-request', checked.problem, [{ field: 'name', message: checked.problem }]);
  const tunnel = body.tunnel.toLowerCase();
  const idProblem = tunnelIdProblem(tunnel, shard.config.domain);
  if (idProblem) throw new ApiError('bad-request', idProblem, [{ field: 'tunnel', message: idProblem }]);
  const teamId = body.team_id ?? null;
  if (teamId && !(await getMembership(shard.sql, teamId, principal.userId))) throw new ApiError('forbidden', 'adding a domain for a team needs you to be a member of it');
  // An id reserved for someone else is theirs: no one may point a domain at it.
  const [reserved] = await shard.sql<{ user_id: string | null; team_id: string | null }[]>`select user_id, team_id from tunnel_reservations where id = ${tunnel}`;
  if (reserved && reserved.user_id !== principal.userId && !(reserved.team_id && (await getMembership(shard.sql, reserved.team_id, principal.userId)))) {
    throw new ApiError('forbidden', `tunnel id "${tunnel}" is reserved for another user or team`);
  }
  if ((await countDomains(shard.sql, principal.userId)) >= MAX_DOMAINS_PER_USER) throw new ApiError('conflict', `you have ${MAX_DOMAINS_PER_USER} custom domains, the most one user may add; remove one first`);
  const token = ownershipToken(await serverSecret(shard.sql, 'custom-domain-ownership'), principal.userId, checked.name);
  const row = await insertDomain(shard.sql, { name: checked.name, user_id: principal.userId, team_id: teamId, tunnel, token });
  if (!row) {
    const taken = await domain(shard.sql, checked.name);
    throw new ApiError('conflict', taken?.user_id === principal.userId ? `you added "${checked.name}" already` : `"${checked.name}" is taken by another user`);
  }
  return show(shard, row);
}

async function list({ shard, principal }: ApiCall) {
  const teams = principal.role === 'admin' ? null : await teamIdsOf(shard.sql, principal.userId);
  return (await domainsVisibleTo(shard.sql, principal.userId, teams)).map((d) => show(shard, d));
}

async function get(call: ApiCall) {
  return show(call.shard, (await visible(call)).d);
}

async function verify(call: ApiCall) {
  const { shard } = call;
  const { d } = await visible(call);
  if (d.verified_at) return show(shard, d);
  const why = await checkOwnership(d.name, d.token, `${d.tunnel}.${shard.config.domain}`, shard.config.tls?.acme?.resolvers ?? null);
  const row = (await recordCheck(shard.sql, d.name, why)) ?? d;
  if (why) throw new ApiError('conflict', `${d.name} is not verified: ${why}`);
  await shard.main.ask({ type: 'custom-domain-verified', name: d.name }, VERIFIED_TIMEOUT_MS);
  return show(shard, row);
}

async function remove(call: ApiCall) {
  const { d, teamRole } = await visible(call);
  const p = call.principal;
  if (!(p.role === 'admin' || d.user_id === p.userId || teamRole === 'owner')) throw new ApiError('forbidden', 'removing a custom domain needs the user who added it, an owner of its team, or an admin');
  await deleteDomain(call.shard.sql, d.name);
  await call.shard.main.ask({ type: 'custom-domain-verified', name: d.name }, VERIFIED_TIMEOUT_MS);
  return {};
}

const name = { name: 'string' } as const;

export const domainRoutes: ApiRoute[] = [
  { operationId: 'List_domains', summary: 'Custom domains you added or that belong to your teams (admins: all)', method: 'get', path: '/domains',
    scope: 'tunnels-or-management', status: 200, response: Type.Array(Domain), errors: ['forbidden'], handle: list },
  { operationId: 'Add_domain', summary: 'Add a custom domain for a tunnel id; the answer tells the DNS record that proves ownership', method: 'post', path: '/domains',
    scope: 'tunnels-or-management', body: DomainBody, status: 201, response: Domain,
    errors: ['bad-request', 'conflict', 'forbidden', 'payload-too-large', 'unsupported-media-type'], handle: create },
  { operationId: 'Get_domain', summary: 'One custom domain and its ownership check', method: 'get', path: '/domains/{name}',
    scope: 'tunnels-or-management', params: name, status: 200, response: Domain, errors: ['forbidden', 'not-found'], handle: get },
  { operationId: 'Verify_domain', summary: 'Check the ownership record now; once verified the domain routes to its tunnel and gets a certificate', method: 'post', path: '/domains/{name}/verify',
    scope: 'tunnels-or-management', params: name, status: 200, response: Domain, errors: ['conflict', 'forbidden', 'not-found'], handle: verify },
  { operationId: 'Remove_domain', summary: 'Remove a custom domain (and its certificate)', method: 'delete', path: '/domains/{name}',
    scope: 'tunnels-or-management', params: name, status: 200, response: Empty, errors: ['forbidden', 'not-found'], handle: remove },
];
