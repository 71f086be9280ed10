import { Type, type Static, type TSchema } from '@sinclair/typebox';

// The management API's resources that the layers below it name as well: db/ reads its rows
// into them and the threads' messages carry them (protocol/tunnel-messages.ts). Kept here, at
// the bottom, so those layers need nothing of api/; api/schemas.ts builds the rest of the API
// (request bodies, tunnels, domains, errors) on them and registers the formats they use.
// Nullable fields are always present (a field without a value is null, never omitted).
export const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
export const Uuid = Type.String({ format: 'uuid' });
export const DateTime = Type.String({ format: 'date-time' });

export const ApiScope = Type.Union([Type.Literal('tunnels'), Type.Literal('management')], { $id: 'ApiScope' });
export const Role = Type.Union([Type.Literal('admin'), Type.Literal('member')], { $id: 'Role' });
export const TeamRole = Type.Union([Type.Literal('owner'), Type.Literal('member')], { $id: 'TeamRole' });

export const ApiKey = Type.Object(
  {
    id: Uuid,
    name: Type.String(),
    key_prefix: Type.String(),
    scopes: Type.Array(ApiScope),
    created_at: DateTime,
    expires_at: Nullable(DateTime),
    revoked_at: Nullable(DateTime),
  },
  { $id: 'ApiKey' },
);
export type ApiKey = Static<typeof ApiKey>;

export const CreatedKey = Type.Object({ info: ApiKey, key: Type.String() }, { $id: 'CreatedKey' });
export type CreatedKey = Static<typeof CreatedKey>;

export const Account = Type.Object({ id: Uuid, provider: Type.String(), created_at: DateTime }, { $id: 'Account' });
export type Account = Static<typeof Account>;

export const User = Type.Object(
  {
    id: Uuid,
    email: Type.String(),
    name: Type.String(),
    avatar_url: Nullable(Type.String()),
    role: Role,
    metadata: Type.Record(Type.String(), Type.Unknown()),
    created_at: DateTime,
    updated_at: DateTime,
    deactivated_at: Nullable(DateTime),
  },
  { $id: 'User' },
);
export type User = Static<typeof User>;

export const Session = Type.Object(
  {
    id: Uuid,
    user_id: Uuid,
    tunnel_id: Type.String(),
    client_ip: Nullable(Type.String()),
    connected_at: DateTime,
    disconnected_at: Nullable(DateTime),
    bytes_in: Type.Integer(),
    bytes_out: Type.Integer(),
    requests: Type.Integer(),
  },
  { $id: 'Session' },
);
export type Session = Static<typeof Session>;

export const Team = Type.Object({ id: Uuid, name: Type.String(), created_at: DateTime, updated_at: DateTime }, { $id: 'Team' });
export type Team = Static<typeof Team>;

export const TeamMember = Type.Object(
  { id: Uuid, team_id: Uuid, user_id: Uuid, role: TeamRole, created_at: DateTime },
  { $id: 'TeamMember' },
);
export type TeamMember = Static<typeof TeamMember>;

export const Reservation = Type.Object(
  {
    id: Type.String({ description: 'the reserved tunnel id' }),
    user_id: Nullable(Uuid),
    team_id: Nullable(Uuid),
    created_at: DateTime,
  },
  { $id: 'Reservation', description: 'A tunnel id only this user, or members of this team, may register' },
);
export type Reservation = Static<typeof Reservation>;
