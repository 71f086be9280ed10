-- Users, their login accounts, API keys, teams, memberships and tunnel sessions.
create table users (
  id uuid primary key default gen_random_uuid(),
  email text not null,
  name text not null default '',
  avatar_url text,
  role text not null default 'member' check (role in ('admin', 'member')),
  metadata jsonb not null default '{}',
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  deactivated_at timestamptz
);
create index users_email on users (lower(email));
create index users_created on users (created_at desc, id);

create table accounts (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references users (id) on delete cascade,
  provider text not null,
  subject text not null,
  email text,
  created_at timestamptz not null default now(),
  unique (provider, subject)
);
create index accounts_user on accounts (user_id);

-- key_prefix is the public lookup part of a key (bk_<id>); only an argon2id hash of the whole key is kept.
create table api_keys (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references users (id) on delete cascade,
  name text not null check (length(name) between 1 and 100),
  key_prefix text not null unique,
  key_hash text not null,
  scopes text[] not null check (cardinality(scopes) > 0 and scopes <@ array['tunnels', 'management']),
  created_at timestamptz not null default now(),
  expires_at timestamptz,
  revoked_at timestamptz
);
-- One active (not revoked) key per name and user.
create unique index api_keys_active_name on api_keys (user_id, name) where revoked_at is null;
create index api_keys_user on api_keys (user_id, created_at desc);

create table teams (
  id uuid primary key default gen_random_uuid(),
  name text not null unique check (length(name) between 1 and 100),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create table team_members (
  id uuid primary key default gen_random_uuid(),
  team_id uuid not null references teams (id) on delete cascade,
  user_id uuid not null references users (id) on delete cascade,
  role text not null default 'member' check (role in ('owner', 'member')),
  created_at timestamptz not null default now(),
  unique (team_id, user_id)
);
create index team_members_user on team_members (user_id);

-- One row per tunnel registration; counters flushed by the stats actor.
create table sessions (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references users (id) on delete cascade,
  tunnel_id text not null,
  tunnel_type text not null check (tunnel_type in ('http', 'tcp')),
  team_id uuid,
  client_ip text,
  connected_at timestamptz not null default now(),
  disconnected_at timestamptz,
  last_flush_at timestamptz not null default now(),
  bytes_in bigint not null default 0,
  bytes_out bigint not null default 0,
  requests bigint not null default 0
);
create index sessions_user on sessions (user_id, connected_at desc);
create index sessions_connected on sessions (connected_at desc);
create index sessions_open on sessions (id) where disconnected_at is null;
