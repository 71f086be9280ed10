-- Certificates burrowd gets by itself (ACME, src/acme/), shared by every node on the database.
-- Private keys are stored sealed (AES-256-GCM) with a key derived from server_secrets, so a
-- dump of these tables alone does not give them away.

-- One account per CA directory.
create table acme_accounts (
  directory_url text primary key,
  key_sealed bytea not null,
  account_url text,
  created_at timestamptz not null default now()
);

-- The certificates served: `name` is the first of `names` (the tunnel domain for the wildcard
-- pair, or a custom domain). Renewal state lives here so any node can take it over.
create table acme_certificates (
  name text primary key,
  names text[] not null,
  cert_pem text not null,
  key_sealed bytea not null,
  not_before timestamptz not null,
  not_after timestamptz not null,
  -- RFC 9773 identifier of the certificate, sent as `replaces` by its renewal
  ari_id text,
  failures int not null default 0,
  last_error text,
  updated_at timestamptz not null default now()
);

-- Every order placed, kept a week: the per-registered-domain and per-user rate bounds count them.
create table acme_orders (
  id bigserial primary key,
  name text not null,
  registered_domain text not null,
  user_id uuid,
  ordered_at timestamptz not null default now(),
  outcome text
);
create index acme_orders_domain on acme_orders (registered_domain, ordered_at);
create index acme_orders_user on acme_orders (user_id, ordered_at) where user_id is not null;

-- HTTP-01 tokens being validated: every node answers /.well-known/acme-challenge/<token>.
create table acme_challenges (
  token text primary key,
  key_authorization text not null,
  name text not null,
  expires_at timestamptz not null
);

-- Domains users bring to their tunnels: issued for only once verified_at is set.
create table custom_domains (
  name text primary key,
  user_id uuid not null references users (id) on delete cascade,
  team_id uuid references teams (id) on delete cascade,
  tunnel text not null,
  token text not null,
  verified_at timestamptz,
  last_check_at timestamptz,
  last_error text,
  created_at timestamptz not null default now()
);
create index custom_domains_user on custom_domains (user_id);
create index custom_domains_pending on custom_domains (created_at) where verified_at is null;

-- A new or renewed certificate reaches every node (each LISTENs on this channel).
create function burrow_acme_notify() returns trigger language plpgsql as $$
begin
  perform pg_notify('burrow_certs_' || current_schema(), new.name);
  return new;
end $$;
create trigger acme_certificates_notify after insert or update of cert_pem on acme_certificates
  for each row execute function burrow_acme_notify();

-- A custom domain verified or removed: every node's shards route by the new set.
create function burrow_custom_domain_notify() returns trigger language plpgsql as $$
begin
  perform pg_notify('burrow_certs_' || current_schema(), 'domain:' || coalesce(new.name, old.name));
  return null;
end $$;
create trigger custom_domains_notify after update of verified_at or delete on custom_domains
  for each row execute function burrow_custom_domain_notify();
