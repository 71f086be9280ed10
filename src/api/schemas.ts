import { FormatRegistry, Type } from '@sinclair/typebox';
import { ApiScope, DateTime, Nullable, Role, TeamRole, Uuid } from '../protocol/api-views.js';

// The API's shapes (the resources of the management API), used three ways: to validate
// requests, to type handlers, and to generate openapi.json. Nullable fields are always
// present (a field without a value is null, never omitted). The resources the layers below
// name too (keys, users, teams, sessions, reservations) are defined in protocol/api-views.ts.
export { ApiScope, Role, TeamRole, ApiKey, CreatedKey, Account, User, Session, Team, TeamMember, Reservation } from '../protocol/api-views.js';

export const Tunnel = Type.Object(
  {
    id: Type.String(),
    owner_id: Uuid,
    team_id: Nullable(Uuid),
    remote_port: Nullable(Type.Integer()),
    tunnel_type: Type.Union([Type.Literal('http'), Type.Literal('tcp')]),
    uptime_secs: Type.Number(),
    stats: Type.Object({ bytes_in: Type.Integer(), bytes_out: Type.Integer(), requests: Type.Integer() }),
    /** Access rules set by the client; credentials are never returned, only whether there are any. */
    access: Type.Object({
      basic_auth: Type.Boolean(),
      allow_ip: Type.Array(Type.String()),
      deny_ip: Type.Array(Type.String()),
      expires_at: Nullable(DateTime),
    }),
    // Additive: what a listing needs to be read without looking ids up.
    url: Type.String({ description: 'public URL' }),
    local_target: Nullable(Type.String({ description: "the local service as the tunnel's client named it (informational)" })),
    pool: Type.Boolean({ description: 'several clients serve it (burrow http --pool)' }),
    connections: Type.Integer({ description: 'control connections serving it, over every node of a cluster' }),
    owner_name: Nullable(Type.String()),
    owner_email: Nullable(Type.String()),
    team_name: Nullable(Type.String()),
  },
  { $id: 'Tunnel' },
);

export const Domain = Type.Object(
  {
    name: Type.String({ description: 'the custom domain, e.g. app.example.com' }),
    tunnel: Type.String({ description: 'the tunnel id it routes to once verified' }),
    owner_id: Uuid,
    team_id: Nullable(Uuid),
    verified: Type.Boolean(),
    verified_at: Nullable(DateTime),
    txt_name: Type.String({ description: 'ownership check: a TXT record at this name ...' }),
    txt_value: Type.String({ description: '... holding this value (bound to the user who added the domain)' }),
    cname_target: Type.String({ description: 'or a CNAME from the domain to this host (the tunnel host)' }),
    last_check_at: Nullable(DateTime),
    last_error: Nullable(Type.String({ description: 'why the last ownership check failed' })),
    created_at: DateTime,
  },
  { $id: 'Domain', description: 'A domain a user brings to a tunnel: routed and issued a certificate once its ownership is verified' },
);
export const DomainBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 253 }),
    tunnel: Type.String({ minLength: 1, maxLength: 63 }),
    team_id: Type.Optional(Nullable(Uuid)),
  },
  { additionalProperties: false },
);

export const Empty = Type.Object({}, { additionalProperties: false, $id: 'Empty' });

export const ProblemSchema = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String(),
    errors: Type.Optional(Type.Array(Type.Object({ field: Type.String(), message: Type.String() }))),
  },
  { $id: 'Error' },
);

// Request bodies: unknown fields are refused (a typo must not be silently ignored).
// One line with something visible: a control character (NUL above all, which PostgreSQL text
// refuses) has no place in a label shown in tables.
const Name = Type.String({ minLength: 1, maxLength: 100, pattern: '^(?=.*\\S)[^\\u0000-\\u001F\\u007F]+$' });

export const CreateKeyBody = Type.Object(
  {
    name: Name,
    expires_at: Type.Optional(Nullable(DateTime)),
    scopes: Type.Optional(Nullable(Type.Array(ApiScope, { minItems: 1, maxItems: 2, uniqueItems: true }))),
  },
  { additionalProperties: false },
);
export const CreateTeamBody = Type.Object({ name: Name, owner_id: Type.Optional(Nullable(Uuid)) }, { additionalProperties: false });
export const AddMemberBody = Type.Object({ user_id: Uuid }, { additionalProperties: false });
export const TeamRoleBody = Type.Object({ role: TeamRole }, { additionalProperties: false });
export const ReserveBody = Type.Object({ user_id: Type.Optional(Nullable(Uuid)), team_id: Type.Optional(Nullable(Uuid)) }, { additionalProperties: false });
export const RoleBody = Type.Object({ role: Role }, { additionalProperties: false });
// An address a provider could vouch for: one @, a dot in the domain, no spaces or control
// characters; 254 is the longest address SMTP carries.
const Email = Type.String({ format: 'email', minLength: 3, maxLength: 254 });
export const CreateUserBody = Type.Object({ email: Email, name: Type.Optional(Name), role: Type.Optional(Role) }, { additionalProperties: false });

const Limit = Type.Integer({ minimum: 1, maximum: 1000, default: 50 });
export const SessionsQuery = Type.Object({ limit: Type.Optional(Limit), all: Type.Optional(Type.Boolean({ default: false })) }, { additionalProperties: false });
export const UsersQuery = Type.Object({ limit: Type.Optional(Limit) }, { additionalProperties: false });

// Formats TypeBox checks only once registered.
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DATE_TIME_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i;
const EMAIL_RE = /^[^\s@\u0000-\u001F\u007F]+@[^\s@\u0000-\u001F\u007F]+\.[^\s@\u0000-\u001F\u007F]+$/;
FormatRegistry.Set('uuid', (v) => UUID_RE.test(v));
FormatRegistry.Set('email', (v) => EMAIL_RE.test(v));
FormatRegistry.Set('date-time', (v) => DATE_TIME_RE.test(v) && isCalendarDate(v) && !Number.isNaN(Date.parse(v)));

/** Date.parse rolls 2030-02-30 over to March 2: a day the month does not have is refused instead. */
function isCalendarDate(v: string): boolean {
  const [y, m, d] = v.slice(0, 10).split('-').map(Number) as [number, number, number];
  return m >= 1 && m <= 12 && d >= 1 && d <= new Date(Date.UTC(y, m, 0)).getUTCDate();
}

export function isUuid(v: string): boolean {
  return UUID_RE.test(v);
}
