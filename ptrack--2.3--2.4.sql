/* ptrack--2.3--2.4.sql -- extension 2.4: the functions that answer about changes refuse an unsafe schema at every call */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ptrack UPDATE TO '2.4'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Schema safety, after the install.  CREATE EXTENSION and ALTER EXTENSION
-- UPDATE refuse a schema in which a role other than a superuser can create
-- objects (ptrack--2.2--2.3.sql); from 2.4 on the library refuses it at every
-- call of ptrack_init_lsn(), ptrack_get_pagemapset(), ptrack_get_change_stat()
-- and ptrack_verify() too (src/pg/sql/schema_check.h), so that a later GRANT
-- CREATE ON SCHEMA, a new owner of the schema or of the database, an owner
-- that is no longer a superuser, or ALTER EXTENSION ptrack SET SCHEMA into
-- such a schema fails the next backup instead of letting a role answer it.
-- The same check runs here once, so that an update of an installation whose
-- schema became unsafe since 2.3 checked it is refused with the same error
-- (CREATE EXTENSION passes here too, after the 2.3 check).  The function
-- exists only while this script runs.
-- ---------------------------------------------------------------------------
CREATE FUNCTION ptrack_check_schema() RETURNS void
    AS 'MODULE_PATHNAME', 'ptrack_check_schema'
    LANGUAGE C VOLATILE STRICT;
SELECT ptrack_check_schema();
DROP FUNCTION ptrack_check_schema();

COMMENT ON FUNCTION ptrack_init_lsn() IS
    'The LSN from which tracking is complete (pg_lsn): a backup from L >= it may be incremental. Refuses to '
    'answer while roles other than superusers can create objects in its schema, or the schema holds another '
    'function named like one of ptrack''s';
COMMENT ON FUNCTION ptrack_get_pagemapset(pg_lsn) IS
    'start_lsn pg_lsn: one row (path, pagecount, pagemap) per relation segment file with a block changed at or after '
    'it. Call it schema-qualified with a typed argument: <schema>.ptrack_get_pagemapset($1::pg_lsn). Refuses to '
    'answer while roles other than superusers can create objects in its schema';
COMMENT ON FUNCTION ptrack_get_change_stat(pg_lsn) IS
    'start_lsn pg_lsn: files, pages and size in MB changed at or after it. Call it schema-qualified with a typed '
    'argument: <schema>.ptrack_get_change_stat($1::pg_lsn). Refuses to answer while roles other than superusers '
    'can create objects in its schema';
COMMENT ON FUNCTION ptrack_verify(pg_lsn) IS
    'start_lsn pg_lsn: blocks changed at or after it (page LSN) that ptrack_get_pagemapset(start_lsn) misses. Call '
    'it schema-qualified with a typed argument: <schema>.ptrack_verify($1::pg_lsn). Refuses to answer while roles '
    'other than superusers can create objects in its schema';
