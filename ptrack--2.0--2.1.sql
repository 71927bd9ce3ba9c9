/* ptrack--2.0--2.1.sql -- adds ptrack_get_change_stat() */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ptrack UPDATE TO '2.1'" to load this file. \quit

-- Not STRICT: a NULL start_lsn is an error, not an empty answer.
CREATE FUNCTION ptrack_get_change_stat(start_lsn pg_lsn,
    OUT files bigint, OUT pages numeric, OUT "size, MB" numeric)
RETURNS record
AS 'MODULE_PATHNAME'
LANGUAGE C VOLATILE;

REVOKE EXECUTE ON FUNCTION ptrack_get_change_stat(pg_lsn) FROM PUBLIC;
