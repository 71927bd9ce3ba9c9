/* ptrack--2.0.sql -- base install script of the ptrack extension */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION ptrack" to load this file. \quit

CREATE FUNCTION ptrack_version()
RETURNS text
AS 'MODULE_PATHNAME'
LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION ptrack_init_lsn()
RETURNS pg_lsn
AS 'MODULE_PATHNAME'
LANGUAGE C VOLATILE;

-- Not STRICT: a NULL start_lsn is an error, not an empty answer.
CREATE FUNCTION ptrack_get_pagemapset(start_lsn pg_lsn)
RETURNS TABLE (path text, pagecount bigint, pagemap bytea)
AS 'MODULE_PATHNAME'
LANGUAGE C VOLATILE;

-- These functions reveal the data directory's layout and can walk all of it.
REVOKE EXECUTE ON FUNCTION ptrack_version() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION ptrack_init_lsn() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION ptrack_get_pagemapset(pg_lsn) FROM PUBLIC;
