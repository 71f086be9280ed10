-- Who started a pending login (their address group: IPv4, or an IPv6 /64), so that one client
-- cannot fill the table and lock everyone out of browser login (src/auth/oauth/pending.ts).
alter table oauth_pending_logins add column client_group text;
create index oauth_pending_logins_group on oauth_pending_logins (client_group, expires_at);
