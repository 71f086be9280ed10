-- Tunnel ids an admin reserved for a user or a team: nobody else may register them.
create table tunnel_reservations (
  id text primary key,
  user_id uuid references users (id) on delete cascade,
  team_id uuid references teams (id) on delete cascade,
  created_at timestamptz not null default now(),
  check ((user_id is null) <> (team_id is null))
);
-- Who last held an id (the --id-grace hold, read at start-up) and the --session-retention
-- pruning both read closed sessions by when they ended.
create index sessions_disconnected on sessions (disconnected_at) where disconnected_at is not null;
