-- The state the CLI chose for its loopback callback (optional: older CLIs send none). The server
-- sends it back with the code or the error, so the CLI can ignore callbacks it did not cause.
alter table oauth_pending_logins add column cli_state text;
