-- The functions that answer about changes refuse, at every call, a schema in which roles
-- other than superusers can create objects: a later GRANT CREATE, a new owner, or ALTER
-- EXTENSION ... SET SCHEMA opens what CREATE EXTENSION checked (docs/operations.md,
-- "Schema safety").  ptrack_version() and ptrack_status() keep working.
CREATE ROLE ptrack_schema_mallory;
CREATE SCHEMA ptrack_safe;
CREATE EXTENSION ptrack WITH SCHEMA ptrack_safe;
SELECT ptrack_safe.ptrack_init_lsn() > '0/0'::pg_lsn AS safe_schema_answers;

-- GRANT CREATE to a role that is not a superuser, then to PUBLIC
GRANT CREATE ON SCHEMA ptrack_safe TO ptrack_schema_mallory;
SELECT ptrack_safe.ptrack_init_lsn();
SELECT count(*) FROM ptrack_safe.ptrack_get_pagemapset('0/0'::pg_lsn);
SELECT files FROM ptrack_safe.ptrack_get_change_stat('0/0'::pg_lsn);
SELECT count(*) FROM ptrack_safe.ptrack_verify('0/0'::pg_lsn);
SELECT ptrack_safe.ptrack_version() IS NOT NULL AS version_answers;
SELECT capture IS NOT NULL AS status_answers FROM ptrack_safe.ptrack_status;
REVOKE CREATE ON SCHEMA ptrack_safe FROM ptrack_schema_mallory;
GRANT CREATE ON SCHEMA ptrack_safe TO PUBLIC;
SELECT ptrack_safe.ptrack_init_lsn();
REVOKE CREATE ON SCHEMA ptrack_safe FROM PUBLIC;
SELECT ptrack_safe.ptrack_init_lsn() > '0/0'::pg_lsn AS answers_again;

-- a schema owned by a role that is not a superuser
ALTER SCHEMA ptrack_safe OWNER TO ptrack_schema_mallory;
SELECT ptrack_safe.ptrack_init_lsn();
ALTER SCHEMA ptrack_safe OWNER TO CURRENT_USER;

-- ALTER EXTENSION ... SET SCHEMA into a schema that is not safe, and back
CREATE SCHEMA ptrack_open AUTHORIZATION ptrack_schema_mallory;
ALTER EXTENSION ptrack SET SCHEMA ptrack_open;
SELECT ptrack_open.ptrack_init_lsn();
SELECT count(*) FROM ptrack_open.ptrack_get_pagemapset('0/0'::pg_lsn);
ALTER EXTENSION ptrack SET SCHEMA ptrack_safe;
SELECT ptrack_safe.ptrack_init_lsn() > '0/0'::pg_lsn AS answers_after_moving_back;

-- a function named like ptrack's, planted while the schema was open: ptrack_init_lsn() refuses
CREATE FUNCTION ptrack_safe.ptrack_get_pagemapset(start_lsn text)
RETURNS TABLE (path text, pagecount bigint, pagemap bytea)
LANGUAGE sql AS $$ SELECT NULL::text, NULL::bigint, NULL::bytea WHERE false $$;
SELECT ptrack_safe.ptrack_init_lsn();
DROP FUNCTION ptrack_safe.ptrack_get_pagemapset(text);
SELECT ptrack_safe.ptrack_init_lsn() > '0/0'::pg_lsn AS answers_without_it;

DROP EXTENSION ptrack;
DROP SCHEMA ptrack_open;
DROP SCHEMA ptrack_safe;
DROP ROLE ptrack_schema_mallory;
