/*
 * map_migration.h -- a trusted map that comes without change summaries
 * becomes one: the summary of [ptrack_init_lsn(), covered + 1), so that
 * answering from the summaries (docs/design.md section 4.8) does not move
 * ptrack_init_lsn() forward and force a full backup.
 *
 * When: at startup, a trusted full-size map of an earlier run (its covered
 * LSN C) that comes without a chain ending at C + 1 in pg_wal/ptrack: an
 * upgrade from a version of ptrack whose WAL follower marked the map and
 * saved its limit table as ptrack.limits.  The postmaster reads that map
 * and that table privately and migrates them (wal_migrate_loaded()).  A
 * small, unmarked map without its chain restarts tracking instead
 * (docs/design.md section 4.10).  The map is complete from init_lsn up to C
 * (that is what trusting it means), so its answer since init_lsn, taken
 * file by file as ptrack_get_pagemapset() would (core/map_answer.h, with
 * the limit table), lists every block changed in [init_lsn, C + 1): exactly
 * what that summary must hold, plus the map's false positives.
 * Growth without WAL after the map's last walk is found by the follower's
 * next walk against the sizes saved with the map, and goes into a later
 * summary (dated later: safe).
 */
#ifndef PTRACK_PG_MAP_MIGRATION_H
#define PTRACK_PG_MAP_MIGRATION_H

extern "C" {
#include "catalog/pg_control.h"
}

#include "core/shared_state.h"
#include "ptrack/map_file.h"

namespace ptrack::pg {

/*
 * The wal source's SourcePersistence::migrate_loaded (persist/map_persistence.h),
 * in the postmaster: `old_map`, a trusted ptrack.map of the size
 * ptrack.map_size gave when the follower still marked the map, read into
 * private memory and complete from header.init_lsn up to its covered LSN C.
 * The summaries it comes with are kept if they chain to C + 1
 * (summary_keep_chain_to()); otherwise its answer since init_lsn, with the
 * limit table of ptrack.limits (which must be complete up to C), becomes
 * the summary of [init_lsn, C + 1), so that the follower, which resumes at
 * C and finds no marks in the small map, goes on from a whole chain.
 *
 * The summary: a change set of its own (budget ptrack.wal_summary_memory,
 * freed before returning) filled with the map's answer since init_lsn for
 * every relation file (a walk of the data directory: one stat() per file
 * the map or the limit table may list, one map lookup per block), written
 * as the summary of [init_lsn, C + 1) on the map's timeline.  Blocks are
 * added one by one while the set has room; once it is nearly full, every
 * further file adds its fork's first listed block as a limit instead (every
 * block from it on: more blocks, never fewer).  If that cannot be done (a
 * WARNING says why), the follower restarts tracking at C + 1 when it
 * resumes.  May raise
 * an ERROR (a data directory that cannot be read), which in the postmaster
 * stops the server from starting, as its other walks do (wal_load.cpp):
 * never a short answer, and the migration runs again at the next start.
 */
void wal_migrate_loaded(const ControlFileData* control, const MapFileHeader& header, const Map& old_map);

}  // namespace ptrack::pg

#endif
