/* ptrack--2.1--2.2.sql -- adds ptrack_status() and its view, for monitoring, and ptrack_verify() */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ptrack UPDATE TO '2.2'" to load this file. \quit

-- One row a monitoring system can poll; never waits, works with tracking off.
CREATE FUNCTION ptrack_status(
    OUT capture text,                 -- hooks | wal | off
    OUT off_reason text,              -- why tracking is off; NULL when on
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
    OUT last_restart_reason text)
RETURNS record
AS 'MODULE_PATHNAME'
LANGUAGE C VOLATILE;

CREATE VIEW ptrack_status AS SELECT * FROM ptrack_status();

-- The self-check: blocks whose page LSN is >= start_lsn but that
-- ptrack_get_pagemapset(start_lsn) does not list.  Reads every relation file
-- (throttled by ptrack.verify_max_rate).  Not STRICT: NULL is an error.
CREATE FUNCTION ptrack_verify(start_lsn pg_lsn)
RETURNS TABLE (path text, block bigint, page_lsn pg_lsn)
AS 'MODULE_PATHNAME'
LANGUAGE C VOLATILE;

REVOKE EXECUTE ON FUNCTION ptrack_status() FROM PUBLIC;
REVOKE ALL ON ptrack_status FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION ptrack_verify(pg_lsn) FROM PUBLIC;

-- CREATE EXTENSION and ALTER EXTENSION UPDATE: ptrack_status() raises a
-- WARNING here when change tracking is off, saying how to turn it on.
SELECT capture FROM ptrack_status();
