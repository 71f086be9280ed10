-- Secrets the server makes for itself and keeps across restarts (and shares between the
-- processes on one database): today the key of the control connection's resumption tickets
-- (src/auth/resume-ticket.ts). Made once, at the first start that needs it.
create table server_secrets (
  name text primary key,
  secret bytea not null,
  created_at timestamptz not null default now()
);
