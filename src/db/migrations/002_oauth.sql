-- Browser login (src/auth/oauth/). Both tables hold minutes-lived, single-use state: a row is
-- deleted when used and is refused once past expires_at (expired rows are swept on insert).
-- Requests of one login land on any shard (or any burrowd), so this state lives here, not in memory.
-- Values that travel through the browser (state, one-time code) are stored only as SHA-256 hashes.

-- GET /auth/v1/<provider>/authorize → GET .../callback (TTL 10 min).
create table oauth_pending_logins (
  state_hash text primary key,          -- sha256(state); the state itself only travels in URLs
  provider text not null,
  cli_port int not null check (cli_port between 1 and 65535),
  cli_challenge text not null,          -- the CLI's PKCE S256 challenge, checked at POST /auth/v1/token
  provider_verifier text not null,      -- our PKCE verifier toward the provider (sent only to its token endpoint)
  nonce text,                           -- OIDC nonce when an ID token is expected
  created_at timestamptz not null default now(),
  expires_at timestamptz not null
);
create index oauth_pending_logins_expires on oauth_pending_logins (expires_at);

-- callback → POST /auth/v1/token (TTL 2 min): the one-time code the CLI redeems with its verifier.
create table oauth_login_codes (
  code_hash text primary key,           -- sha256(code)
  user_id uuid not null references users (id) on delete cascade,
  provider text not null,
  cli_challenge text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null
);
create index oauth_login_codes_expires on oauth_login_codes (expires_at);

-- Whether the provider vouched for accounts.email. A user created by a login whose email was
-- not verified must never receive a later login by that email (pre-registration takeover):
-- link.ts links only to users whose email some verified account (or no account: seed, admin) backs.
alter table accounts add column email_verified boolean not null default false;
