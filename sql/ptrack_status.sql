-- ptrack_status() with tracking on (t/regress.conf: 1 MB map); deterministic columns only.
CREATE EXTENSION ptrack;
SELECT ptrack_init_lsn() > '0/0'::pg_lsn AS init_lsn_set;

-- the contract: column names and types, in order
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute WHERE attrelid = 'ptrack_status'::regclass AND attnum > 0 ORDER BY attnum;

SELECT capture IN ('hooks', 'wal') AS capture_known,
       off_reason IS NULL AS tracking_on,
       -- hooks: ptrack.map_size; wal: the few KB of a map that keeps only the resume point, with no fill
       CASE capture WHEN 'wal' THEN map_size < 16384 ELSE map_size = 1048576 END AS map_size_right,
       CASE capture WHEN 'wal' THEN map_fill IS NULL ELSE map_fill BETWEEN 0 AND 1 END AS fill_in_range,
       CASE capture WHEN 'wal' THEN false_positive_rate IS NULL
                    ELSE false_positive_rate = map_fill * map_fill END AS rate_is_fill_squared,
       init_lsn = ptrack_init_lsn() AS init_lsn_matches,
       failed_saves,
       restarts,
       last_restart_reason IS NULL AS no_restart_reason,
       (capture = 'wal') = (follower_lsn IS NOT NULL) AS follower_lsn_iff_wal,
       (capture = 'wal') = (follower_lag_bytes IS NOT NULL) AS follower_lag_iff_wal,
       follower_lag_bytes IS NULL OR follower_lag_bytes >= 0 AS lag_not_negative,
       (saves = 0) = (last_save_lsn IS NULL) AS last_save_iff_saved
  FROM ptrack_status;

-- the map holds marks once something was written (hooks; wal marks no map)
CREATE TABLE ptrack_status_t AS SELECT g FROM generate_series(1, 10000) g;
CHECKPOINT;
-- (wal capture: ptrack_init_lsn() waits until the follower has applied that WAL; ptrack_status() never waits)
SELECT ptrack_init_lsn() IS NOT NULL AS follower_caught_up;
SELECT CASE capture WHEN 'wal' THEN map_fill IS NULL ELSE map_fill > 0 END AS map_has_marks_iff_hooks
  FROM ptrack_status();

-- one row, from the view and the function alike
SELECT count(*) AS view_rows FROM ptrack_status;

-- neither the function nor the view is open to PUBLIC
SELECT has_function_privilege('public', 'ptrack_status()', 'EXECUTE') AS public_can_execute,
       has_table_privilege('public', 'ptrack_status', 'SELECT') AS public_can_select;

-- ptrack_verify() finds nothing missing on a healthy cluster (its NOTICEs vary: not shown)
SET client_min_messages = warning;
SELECT count(*) AS blocks_not_listed FROM ptrack_verify(ptrack_init_lsn());
RESET client_min_messages;
SELECT * FROM ptrack_verify(NULL);
SELECT has_function_privilege('public', 'ptrack_verify(pg_lsn)', 'EXECUTE') AS public_can_execute;

-- the parameters a DBA sees; the developer setting is hidden but still works
SELECT name, vartype, unit, boot_val, min_val, max_val FROM pg_settings WHERE name LIKE 'ptrack.%' ORDER BY name;
SHOW ptrack.use_segment_summary;

DROP TABLE ptrack_status_t;
DROP EXTENSION ptrack;
