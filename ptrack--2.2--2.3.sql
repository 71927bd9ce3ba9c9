/* ptrack--2.2--2.3.sql -- extension 2.3: see each block */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ptrack UPDATE TO '2.3'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Block (issue 18, items 1 and 4): ptrack_status() gains follower_slot_releases.
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
    SELECT relacl INTO view_acl FROM pg_class WHERE oid = 'ptrack_status'::regclass;
    SELECT proacl INTO function_acl FROM pg_proc WHERE oid = 'ptrack_status()'::regprocedure;
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
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(view_acl) a
         WHERE a.grantee <> a.grantor
    LOOP
        EXECUTE format('GRANT %s ON ptrack_status TO %s%s', grant_row.privilege_type,
                       CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(grant_row.grantee)) END,
                       CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    FOR grant_row IN
        SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(function_acl) a
         WHERE a.grantee <> a.grantor
    LOOP
        EXECUTE format('GRANT %s ON FUNCTION ptrack_status() TO %s%s', grant_row.privilege_type,
                       CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(grant_row.grantee)) END,
                       CASE WHEN grant_row.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$ptrack_status$;
-- ---------------------------------------------------------------------------
-- End of block (issue 18, items 1 and 4).
-- ---------------------------------------------------------------------------
