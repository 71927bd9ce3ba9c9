-- Installing the base version 2.0 and updating: backup tools require >= 2.1.
CREATE EXTENSION ptrack VERSION '2.0';
SELECT extversion FROM pg_extension WHERE extname = 'ptrack';
SELECT count(*) AS change_stat_functions FROM pg_proc WHERE proname = 'ptrack_get_change_stat';

ALTER EXTENSION ptrack UPDATE TO '2.1';
SELECT extversion FROM pg_extension WHERE extname = 'ptrack';
SELECT files >= 0 AS change_stat_works FROM ptrack_get_change_stat(ptrack_init_lsn());
SELECT has_function_privilege('public', 'ptrack_get_change_stat(pg_lsn)', 'EXECUTE') AS public_can_execute;

-- 2.1 -> 2.2 adds ptrack_status() and its view, not open to PUBLIC
SELECT count(*) AS status_functions FROM pg_proc WHERE proname = 'ptrack_status';
ALTER EXTENSION ptrack UPDATE TO '2.2';
SELECT extversion, ptrack_version() FROM pg_extension WHERE extname = 'ptrack';
SELECT capture IN ('hooks', 'wal') AS status_works FROM ptrack_status;
SELECT has_function_privilege('public', 'ptrack_status()', 'EXECUTE') AS public_can_execute,
       has_table_privilege('public', 'ptrack_status', 'SELECT') AS public_can_select;

-- 2.2 -> 2.3 checks the schema (public is safe on a PostgreSQL 15 cluster), documents the
-- arguments and adds ptrack_status().follower_slot_releases (the 2.3 library serves the 2.2
-- columns until then); privileges granted on the status survive the update
CREATE ROLE ptrack_update_monitor;
GRANT SELECT ON ptrack_status TO ptrack_update_monitor;
ALTER EXTENSION ptrack UPDATE TO '2.3';
SELECT extversion, ptrack_version() FROM pg_extension WHERE extname = 'ptrack';
SELECT (follower_slot_releases IS NOT NULL) = (capture = 'wal') AS slot_releases_iff_wal FROM ptrack_status;
SELECT has_table_privilege('ptrack_update_monitor', 'ptrack_status', 'SELECT') AS monitor_can_select,
       has_function_privilege('public', 'ptrack_status()', 'EXECUTE') AS public_can_execute,
       has_table_privilege('public', 'ptrack_status', 'SELECT') AS public_can_select;
SELECT obj_description('ptrack_get_pagemapset(pg_lsn)'::regprocedure, 'pg_proc') LIKE 'start_lsn pg_lsn: %' AS documented;

-- 2.3 -> 2.4 checks the schema once more (the functions check it at every call from now on)
ALTER EXTENSION ptrack UPDATE TO '2.4';
SELECT extversion, ptrack_version() FROM pg_extension WHERE extname = 'ptrack';
SELECT count(*) AS transient_check_function FROM pg_proc WHERE proname = 'ptrack_check_schema';
SELECT obj_description('ptrack_init_lsn()'::regprocedure, 'pg_proc') LIKE '%Refuses to answer while roles%' AS documented;

-- a plain CREATE EXTENSION installs the default version through the update path
DROP EXTENSION ptrack;
CREATE EXTENSION ptrack;
SELECT extversion FROM pg_extension WHERE extname = 'ptrack';
DROP EXTENSION ptrack;
DROP ROLE ptrack_update_monitor;
