/* ptrack--2.2--2.3.sql -- 2.3: refuses a schema that roles other than superusers can create objects in */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ptrack UPDATE TO '2.3'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Schema safety (issue 18, item 3).  CREATE EXTENSION runs this script too
-- (2.0 -> 2.1 -> 2.2 -> 2.3), so both a new install and an update are checked;
-- an ERROR here rolls back the whole CREATE or ALTER EXTENSION.
--
-- Why refuse: a role that can create objects in ptrack's schema can create
-- ptrack_get_pagemapset(text) there.  A backup tool's call with an untyped
-- literal or parameter, public.ptrack_get_pagemapset('0/B796528'), then
-- resolves to that function (PostgreSQL prefers a text parameter for an
-- unknown-typed argument, parse_func.c func_select_candidate()), runs it as
-- the backup role, and hears "nothing changed": a backup that silently
-- misses blocks.  The schema is safe when no role other than a superuser can
-- create objects in it: not PUBLIC (a cluster upgraded from PostgreSQL 14 or
-- older keeps CREATE on public for PUBLIC), not a non-superuser owner (who
-- may create there whatever the ACL says; for public that is the database's
-- owner, through pg_database_owner), not any role granted CREATE (a role
-- that may SET ROLE to one of those counts through it).  CREATE EXTENSION
-- ptrack needs a superuser, so the installing role is one.  README.md,
-- "Schema safety".
-- ---------------------------------------------------------------------------
DO $ptrack_schema_check$
DECLARE
    target oid;
    target_name text;
    public_may_create boolean;
    creators text;
    strangers text;
BEGIN
    SELECT e.extnamespace INTO target FROM pg_catalog.pg_extension e WHERE e.extname = 'ptrack';
    IF target IS NULL THEN  -- not reached: the extension's row exists while its scripts run
        target := pg_catalog.to_regnamespace(pg_catalog.current_schema())::oid;
    END IF;
    SELECT n.nspname,
           EXISTS (SELECT 1 FROM pg_catalog.aclexplode(
                       COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a
                   WHERE a.grantee = 0 AND a.privilege_type = 'CREATE')
      INTO target_name, public_may_create
      FROM pg_catalog.pg_namespace n WHERE n.oid = target;
    -- Every role that may create there: the owner, the grantees, and their
    -- members.  pg_database_owner stands for the database's owner, who is
    -- listed in its own right.
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname), ', ' ORDER BY r.rolname)
      INTO creators
      FROM pg_catalog.pg_roles r
     WHERE NOT r.rolsuper AND r.rolname <> 'pg_database_owner'
       AND pg_catalog.has_schema_privilege(r.oid, target, 'CREATE');
    IF public_may_create OR creators IS NOT NULL THEN
        RAISE EXCEPTION 'ptrack refuses schema "%": roles other than superusers can create objects in it', target_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = CASE WHEN public_may_create
                                THEN format('PUBLIC (every role) has CREATE on schema "%s".', target_name)
                                ELSE format('These roles can create objects in schema "%s": %s.', target_name, creators)
                           END
                           || ' Such a role could create a function with the name of one of ptrack''s that a'
                           || ' backup tool''s call reaches instead, and the backup would silently miss blocks.',
                  HINT = format('Install ptrack into a schema of its own: CREATE SCHEMA ptrack; CREATE EXTENSION ptrack'
                                || ' WITH SCHEMA ptrack (for an update: ALTER EXTENSION ptrack SET SCHEMA ptrack, then'
                                || ' update). Or take CREATE away: REVOKE CREATE ON SCHEMA %s FROM PUBLIC (and from the'
                                || ' roles named), with ALTER SCHEMA %s OWNER TO a superuser if its owner is not one.',
                                pg_catalog.quote_ident(target_name), pg_catalog.quote_ident(target_name));
    END IF;
    -- A function named like ptrack's already there that is not ptrack's
    -- (planted before the schema was made safe): a caller could reach it.
    SELECT pg_catalog.string_agg(p.oid::pg_catalog.regprocedure::text, ', ' ORDER BY p.oid)
      INTO strangers
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = target AND p.proname OPERATOR(pg_catalog.~~) 'ptrack\_%'
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                        WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
                          AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                          AND d.deptype = 'e');
    IF strangers IS NOT NULL THEN
        RAISE EXCEPTION 'ptrack refuses schema "%": it holds functions named like ptrack''s that are not ptrack''s', target_name
            USING ERRCODE = 'duplicate_function',
                  DETAIL = format('Not part of the extension: %s.', strangers),
                  HINT = 'Find out who created them and why, drop them, then retry.';
    END IF;
END
$ptrack_schema_check$;

-- Every function takes typed arguments; call them schema-qualified with the
-- argument cast: ptrack.ptrack_get_pagemapset($1::pg_lsn).  The comments
-- are what \df+ shows.
COMMENT ON FUNCTION ptrack_version() IS
    'ptrack''s version, "major.minor" (text)';
COMMENT ON FUNCTION ptrack_init_lsn() IS
    'The LSN from which tracking is complete (pg_lsn): a backup from L >= it may be incremental';
COMMENT ON FUNCTION ptrack_get_pagemapset(pg_lsn) IS
    'start_lsn pg_lsn: one row (path, pagecount, pagemap) per relation segment file with a block changed at or after '
    'it. Call it schema-qualified with a typed argument: <schema>.ptrack_get_pagemapset($1::pg_lsn)';
COMMENT ON FUNCTION ptrack_get_change_stat(pg_lsn) IS
    'start_lsn pg_lsn: files, pages and size in MB changed at or after it. Call it schema-qualified with a typed '
    'argument: <schema>.ptrack_get_change_stat($1::pg_lsn)';
COMMENT ON FUNCTION ptrack_status() IS
    'One row for monitoring; never waits (docs/design.md 5.1)';
COMMENT ON FUNCTION ptrack_verify(pg_lsn) IS
    'start_lsn pg_lsn: blocks changed at or after it (page LSN) that ptrack_get_pagemapset(start_lsn) misses. Call '
    'it schema-qualified with a typed argument: <schema>.ptrack_verify($1::pg_lsn)';
