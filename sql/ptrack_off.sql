-- Library preloaded with ptrack.map_size = 0: tracking is off, functions say so.
CREATE EXTENSION ptrack;
SHOW ptrack.map_size;
SELECT ptrack_version();
SELECT ptrack_init_lsn();
SELECT * FROM ptrack_get_pagemapset('0/1');
SELECT * FROM ptrack_get_change_stat('0/1');
SELECT * FROM ptrack_verify('0/1');
-- ptrack_status() says why tracking is off, and answers every other column
SELECT capture, off_reason, map_size, map_fill, init_lsn, saves, failed_saves, follower_lsn, restarts
  FROM ptrack_status;
-- checkpoints are unaffected
CHECKPOINT;
DROP EXTENSION ptrack;
