/* ptrack--2.2--2.3.sql -- extension 2.3: refuses an unsafe schema; ptrack_status() gains follower_slot_releases */

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
-- Every name in the DO blocks below is pg_catalog-qualified (functions,
-- and operators whose argument types have no exact match there): a
-- function or operator planted earlier in this schema (format(text, text)
-- beats pg_catalog.format(text, VARIADIC "any") for those arguments) would
-- otherwise run as the superuser running this script.
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
                   WHERE a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid AND a.privilege_type = 'CREATE')
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
                  DETAIL = pg_catalog.format('%s Such a role could create a function with the name of one of'
                                             ' ptrack''s that a backup tool''s call reaches instead, and the'
                                             ' backup would silently miss blocks.',
                               CASE WHEN public_may_create
                                    THEN pg_catalog.format('PUBLIC (every role) has CREATE on schema "%s".',
                                                           target_name)
                                    ELSE pg_catalog.format('These roles can create objects in schema "%s": %s.',
                                                           target_name, creators)
                               END),
                  HINT = pg_catalog.format('Install ptrack into a schema of its own: CREATE SCHEMA ptrack; CREATE'
                                           ' EXTENSION ptrack WITH SCHEMA ptrack (for an update: ALTER EXTENSION'
                                           ' ptrack SET SCHEMA ptrack, then update). Or take CREATE away: REVOKE'
                                           ' CREATE ON SCHEMA %s FROM PUBLIC (and from the roles named), with ALTER'
                                           ' SCHEMA %s OWNER TO a superuser if its owner is not one.',
                                           pg_catalog.quote_ident(target_name), pg_catalog.quote_ident(target_name));
    END IF;
    -- A function named like ptrack's already there that is not ptrack's
    -- (planted before the schema was made safe): a caller could reach it.
    SELECT pg_catalog.string_agg(p.oid::pg_catalog.regprocedure::pg_catalog.text, ', ' ORDER BY p.oid)
      INTO strangers
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = target AND p.proname OPERATOR(pg_catalog.~~) 'ptrack\_%'
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                        WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid
                          AND d.objid = p.oid
                          AND d.refclassid OPERATOR(pg_catalog.=)
                              'pg_catalog.pg_extension'::pg_catalog.regclass::pg_catalog.oid
                          AND d.deptype = 'e');
    IF strangers IS NOT NULL THEN
        RAISE EXCEPTION 'ptrack refuses schema "%": it holds functions named like ptrack''s that are not ptrack''s', target_name
            USING ERRCODE = 'duplicate_function',
                  DETAIL = pg_catalog.format('Not part of the extension: %s.', strangers),
                  HINT = 'Find out who created them and why, drop them, then retry.';
    END IF;
END
$ptrack_schema_check$;

-- ---------------------------------------------------------------------------
-- ptrack_status() gains follower_slot_releases (issue 18, items 1 and 4).
-- A function's OUT columns cannot be altered in place: the view and the
-- function are dropped and created again, and the privileges granted on
-- them (README: GRANT SELECT ON ptrack_status TO pg_monitor) are granted
-- again; the new ones are not open to PUBLIC, as in 2.2.  One DO block, so
-- that the saved privileges live across the statements.  A view of yours
-- built on ptrack_status makes the update fail (drop it first).  A library
-- of 2.3 still serves a 2.2 installation (the 21 columns it declares) until
-- this update runs.
DO $ptrack_status$
DECLARE
    view_acl aclitem[];
    function_acl aclitem[];
    grant_row record;
BEGIN
    SELECT relacl INTO view_acl FROM pg_catalog.pg_class
     WHERE oid OPERATOR(pg_catalog.=) 'ptrack_status'::pg_catalog.regclass::pg_catalog.oid;
    SELECT proacl INTO function_acl FROM pg_catalog.pg_proc
     WHERE oid OPERATOR(pg_catalog.=) 'ptrack_status()'::pg_catalog.regprocedure::pg_catalog.oid;
    DROP VIEW ptrack_status;
    DROP FUNCTION ptrack_status();
    CREATE FUNCTION ptrack_status(
        OUT capture text,                 -- hooks | wal | off
        OUT off_reason text,              -- why tracking is off, or (wal) why the follower cannot start; NULL when on
        OUT map_size bigint,              -- bytes of shared memory for the map (ptrack.map_size)
        OUT map_fill double precision,    -- share of block slots holding a mark (sampled)
        OUT false_positive_rate double precision, -- expected at that fill: map_fill^2
        OUT init_lsn pg_lsn,              -- ptrack_init_lsn(); NULL until established
        OUT last_save_lsn pg_lsn,         -- the last saved map is complete up to this LSN
        OUT last_save_time timestamptz,
        OUT last_save_bytes bigint,
        OUT last_save_ms double precision,
        OUT last_save_full boolean,       -- whole map (true) or delta (false)
        OUT saves bigint,                 -- successful saves since the server started
        OUT failed_saves bigint,          -- failed saves since the server started
        OUT follower_pid integer,         -- wal capture: the WAL follower; NULL under hooks
        OUT follower_tli integer,
        OUT follower_lsn pg_lsn,          -- every record ending at or before it is marked
        OUT follower_lag_bytes bigint,    -- flushed (replayed) WAL not yet applied
        OUT follower_lag_seconds double precision,
        OUT restarts bigint,              -- tracking restarts since the server started
        OUT last_restart_time timestamptz,
        OUT last_restart_reason text,
        OUT follower_slot_releases bigint) -- wal: times the server stopped the follower to release its
                                           -- slot (over max_slot_wal_keep_size); it saved and resumed
    RETURNS record
    AS 'MODULE_PATHNAME'
    LANGUAGE C VOLATILE;
    CREATE VIEW ptrack_status AS SELECT * FROM ptrack_status();
    REVOKE EXECUTE ON FUNCTION ptrack_status() FROM PUBLIC;
    REVOKE ALL ON ptrack_status FROM PUBLIC;
    FOR grant_row IN
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_catalog.aclexplode(view_acl) a
         WHERE a.grantee <> a.grantor
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON ptrack_status TO %s%s', grant_row.privilege_type,
                       CASE WHEN grant_row.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                            ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(grant_row.grantee)) END,
                       CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    FOR grant_row IN
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM pg_catalog.aclexplode(function_acl) a
         WHERE a.grantee <> a.grantor
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON FUNCTION ptrack_status() TO %s%s', grant_row.privilege_type,
                       CASE WHEN grant_row.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                            ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(grant_row.grantee)) END,
                       CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$ptrack_status$;

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
