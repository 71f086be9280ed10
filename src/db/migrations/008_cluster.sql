-- Several burrowd on one database (--node-url). Nothing here is used by a single node
-- without --node-url, except the triggers, which only notify.
--
-- A node holds a lease it renews every second; a node whose lease ran out is dead, and the
-- first live node to notice deletes its row: its tunnels go with it (cascade) and its open
-- sessions are closed at their last flush.
create table cluster_nodes (
  id uuid primary key,
  url text not null unique,
  started_at timestamptz not null default now(),
  lease_until timestamptz not null
);

-- The cluster's live tunnels: the one place ids and TCP ports are unique across nodes. A
-- registration (an id) has members: the control connections serving it, each on some node with
-- a session of its own. `client` groups the members of one burrow client (its connections to
-- two nodes); a pool has several clients.
create table cluster_tunnels (
  id text primary key,
  user_id uuid not null references users (id) on delete cascade,
  team_id uuid,
  tunnel_type text not null check (tunnel_type in ('http', 'tcp')),
  pool boolean not null default false,
  port int unique,
  url text not null,
  local_target text,
  -- access rules, credentials hashed (the route every node checks visitors against)
  access jsonb,
  registered_at timestamptz not null default now()
);
create index cluster_tunnels_user on cluster_tunnels (user_id);
create index cluster_tunnels_team on cluster_tunnels (team_id) where team_id is not null;

create table cluster_members (
  session_id uuid primary key,
  tunnel_id text not null references cluster_tunnels (id) on delete cascade,
  node_id uuid not null references cluster_nodes (id) on delete cascade,
  user_id uuid not null references users (id) on delete cascade,
  key_id uuid not null,
  client text not null,
  registered_at timestamptz not null default now()
);
create index cluster_members_tunnel on cluster_members (tunnel_id);
create index cluster_members_node on cluster_members (node_id);
create index cluster_members_user on cluster_members (user_id);
create index cluster_members_key on cluster_members (key_id);

alter table sessions add column node_id uuid;
create index sessions_node_open on sessions (node_id) where disconnected_at is null;

-- Changes that must end tunnels on every node travel as notifications sent by the change's own
-- transaction (delivered at commit, whatever path made the change). The channel is per schema,
-- so clusters on several schemas of one database do not hear each other.
create function burrow_cluster_notify(payload jsonb) returns void language sql as $$
  select pg_notify('burrow_' || current_schema(), payload::text)
$$;

create function burrow_key_changed() returns trigger language plpgsql as $$
begin
  if tg_op = 'DELETE' then
    perform burrow_cluster_notify(jsonb_build_object('t', 'key', 'id', old.id));
  elsif new.revoked_at is not null and old.revoked_at is null then
    perform burrow_cluster_notify(jsonb_build_object('t', 'key', 'id', new.id));
  end if;
  return null;
end $$;
create trigger api_keys_cluster after update of revoked_at or delete on api_keys
  for each row execute function burrow_key_changed();

create function burrow_user_changed() returns trigger language plpgsql as $$
begin
  if tg_op = 'DELETE' then
    perform burrow_cluster_notify(jsonb_build_object('t', 'user', 'id', old.id, 'end', true));
  elsif new.deactivated_at is distinct from old.deactivated_at or new.role is distinct from old.role then
    perform burrow_cluster_notify(jsonb_build_object('t', 'user', 'id', new.id, 'end', new.deactivated_at is not null));
  end if;
  return null;
end $$;
create trigger users_cluster after update of deactivated_at, role or delete on users
  for each row execute function burrow_user_changed();

create function burrow_member_removed() returns trigger language plpgsql as $$
begin
  perform burrow_cluster_notify(jsonb_build_object('t', 'member', 'team', old.team_id, 'user', old.user_id));
  return null;
end $$;
create trigger team_members_cluster after delete on team_members
  for each row execute function burrow_member_removed();
