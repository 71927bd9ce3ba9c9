-- The SQL API on a server with tracking on (t/regress.conf: 1 MB map).
CREATE EXTENSION ptrack;

SELECT extversion FROM pg_extension WHERE extname = 'ptrack';
SELECT ptrack_version();
SHOW ptrack.map_size;

-- init_lsn is established and never 0/0 while tracking is on
SELECT ptrack_init_lsn() > '0/0'::pg_lsn AS init_lsn_set;
SELECT ptrack_init_lsn() <= pg_current_wal_insert_lsn() AS init_lsn_in_past;

-- A new table is listed after its blocks reach disk; block numbers decode as documented.
CREATE TABLE ptrack_t (id int, pad text) WITH (autovacuum_enabled = off);
SELECT pg_current_wal_insert_lsn() AS before_insert \gset
INSERT INTO ptrack_t SELECT g, repeat('x', 500) FROM generate_series(1, 1000) g;
CHECKPOINT;
SELECT pg_relation_filepath('ptrack_t') AS relpath \gset
SELECT pagecount = pg_relation_size('ptrack_t') / current_setting('block_size')::int AS all_blocks_listed,
       get_byte(pagemap, 0) = 255 AS first_eight_blocks_set
  FROM ptrack_get_pagemapset(:'before_insert') WHERE path = :'relpath';

-- pagecount is the number of set bits of pagemap, for every row
SELECT count(*) > 0 AS rows_listed, bool_and(pagecount = bit_count(pagemap)) AS pagecount_matches
  FROM ptrack_get_pagemapset(:'before_insert');

-- paths are relative to the data directory
SELECT bool_and(path ~ '^(global|base/[0-9]+|pg_tblspc/[0-9]+/PG_[^/]+/[0-9]+)/[0-9]+(_fsm|_vm|_init)?(\.[0-9]+)?$')
       AS paths_well_formed
  FROM ptrack_get_pagemapset(ptrack_init_lsn());

-- A later start LSN lists less, and a block changed after it is listed.
CHECKPOINT;
SELECT pg_current_wal_insert_lsn() AS after_checkpoint \gset
UPDATE ptrack_t SET pad = 'y' WHERE id = 1;
CHECKPOINT;
SELECT pagecount >= 1 AS updated_block_listed, get_byte(pagemap, 0) & 1 = 1 AS block_zero_set
  FROM ptrack_get_pagemapset(:'after_checkpoint') WHERE path = :'relpath';

-- change stat summarises the same set
SELECT s.files = (SELECT count(*) FROM ptrack_get_pagemapset(:'before_insert')) AS files_match,
       s.pages = (SELECT sum(pagecount) FROM ptrack_get_pagemapset(:'before_insert')) AS pages_match,
       s."size, MB" = s.pages * current_setting('block_size')::numeric / (1024 * 1024) AS size_matches
  FROM ptrack_get_change_stat(:'before_insert') s;

-- EXECUTE is revoked from PUBLIC
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'ptrack'
 ORDER BY 1;

DROP TABLE ptrack_t;
DROP EXTENSION ptrack;
