-- The extension is relocatable and every function works with an empty search_path.
CREATE SCHEMA ptrack;
CREATE EXTENSION ptrack WITH SCHEMA ptrack;
SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'ptrack';

SET search_path = '';
SELECT ptrack.ptrack_version();
SELECT ptrack.ptrack_init_lsn() > '0/0'::pg_catalog.pg_lsn AS init_lsn_set;
SELECT pg_catalog.count(*) > 0 AS lists_rows FROM ptrack.ptrack_get_pagemapset(ptrack.ptrack_init_lsn());
SELECT files > 0 AS change_stat_works FROM ptrack.ptrack_get_change_stat(ptrack.ptrack_init_lsn());
RESET search_path;

CREATE SCHEMA other;
ALTER EXTENSION ptrack SET SCHEMA other;
SET search_path = '';
SELECT other.ptrack_version();
SELECT files > 0 AS change_stat_works FROM other.ptrack_get_change_stat(other.ptrack_init_lsn());
RESET search_path;

DROP EXTENSION ptrack;
DROP SCHEMA ptrack;
DROP SCHEMA other;
