-- Comparison keys of emails and team names (src/names.ts computes them for every write: NFKC,
-- case folded). Rows written before this migration get PostgreSQL's approximation; two existing
-- teams whose names fold to one key keep distinct keys (the later one's id appended), so the
-- unique index can be built; new look-alikes of either are refused.
alter table users add column email_key text;
update users set email_key = lower(normalize(email, NFKC));
create index users_email_folded on users (email_key);

alter table teams add column name_key text;
update teams set name_key = lower(normalize(name, NFKC));
update teams t set name_key = t.name_key || '#' || t.id
  where exists (select 1 from teams o where o.name_key = t.name_key and (o.created_at, o.id) < (t.created_at, t.id));
create unique index teams_name_folded on teams (name_key);

-- burrowd always writes the keys itself; a row inserted without one (by hand, an older tool)
-- gets the SQL approximation rather than no key at all.
create function burrow_users_email_key() returns trigger language plpgsql as $$
begin
  if new.email_key is null then new.email_key := lower(normalize(new.email, NFKC)); end if;
  return new;
end $$;
create trigger users_email_key before insert on users for each row execute function burrow_users_email_key();
create function burrow_teams_name_key() returns trigger language plpgsql as $$
begin
  if new.name_key is null then new.name_key := lower(normalize(new.name, NFKC)); end if;
  return new;
end $$;
create trigger teams_name_key before insert on teams for each row execute function burrow_teams_name_key();
