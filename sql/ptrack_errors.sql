-- Bad input gets a clear error with a hint, and changes nothing.
CREATE EXTENSION ptrack;
\set VERBOSITY default

SELECT * FROM ptrack_get_pagemapset(NULL);
SELECT * FROM ptrack_get_change_stat(NULL);
SELECT * FROM ptrack_get_pagemapset('not an lsn');

-- An LSN older than ptrack_init_lsn(): the LSNs vary, so show the error with them masked.
CREATE FUNCTION show_error(query text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    state text; message text; detail text; hint text;
BEGIN
    EXECUTE query;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RAISE NOTICE E'%: %\nDETAIL: %\nHINT: %', state,
        regexp_replace(message, '[0-9A-F]+/[0-9A-F]+', 'X/X', 'g'),
        regexp_replace(detail, '[0-9A-F]+/[0-9A-F]+', 'X/X', 'g'), hint;
END $$;
SELECT show_error($$SELECT * FROM ptrack_get_pagemapset('0/0')$$);
SELECT show_error($$SELECT * FROM ptrack_get_change_stat('0/1')$$);
SELECT show_error(format('SELECT * FROM ptrack_get_pagemapset(%L)', ptrack_init_lsn() - 1));
-- ptrack_init_lsn() itself is accepted
SELECT count(*) >= 0 AS accepted FROM ptrack_get_pagemapset(ptrack_init_lsn());

-- nothing changed: init_lsn is the same after the errors
SELECT ptrack_init_lsn() AS init_lsn \gset
SELECT show_error($$SELECT * FROM ptrack_get_pagemapset('0/0')$$);
SELECT ptrack_init_lsn() = :'init_lsn' AS init_lsn_unchanged;

-- an LSN the server has not reached is refused (it would list next to nothing)
SELECT show_error($$SELECT * FROM ptrack_get_pagemapset('FFFFFFFF/FFFFFFFF')$$);
SELECT show_error($$SELECT * FROM ptrack_get_change_stat('FFFFFFFF/FFFFFFFF')$$);
SELECT show_error(format('SELECT * FROM ptrack_get_pagemapset(%L)', pg_current_wal_insert_lsn() + 100000000));
-- the current WAL position itself is accepted
SELECT count(*) >= 0 AS accepted FROM ptrack_get_pagemapset(pg_current_wal_insert_lsn());

-- the map size cannot change at run time
SET ptrack.map_size = '2MB';
-- the developer option is for superusers only
CREATE ROLE ptrack_regress_user;
SET ROLE ptrack_regress_user;
SET ptrack.use_segment_summary = off;
SELECT ptrack_version();
RESET ROLE;
DROP ROLE ptrack_regress_user;

DROP FUNCTION show_error(text);
DROP EXTENSION ptrack;
