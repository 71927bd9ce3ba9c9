/*
 * wal_load.h -- the wal source's steps in the postmaster's load of the map
 * (wal_load.cpp), entries of its SourcePersistence
 * (persist/map_persistence.h).
 */
#ifndef PTRACK_PG_WAL_LOAD_H
#define PTRACK_PG_WAL_LOAD_H

#include "persist/map_persistence.h"

namespace ptrack::pg {

/* Before the map file is read: state->fresh_init_floor, the floor of a fresh map's ptrack_init_lsn(). */
void wal_before_load(const ControlFileData* control, SharedState* state);

/*
 * A fresh map (ptrack_init_lsn() stays 0: the follower sets it): in a data
 * directory restored from a base backup, records the relation file sizes
 * before recovery and reads the WAL pg_wal holds from the backup's redo LSN
 * (state->presized_redo_lsn, restored_scan_from, restored_scan_end,
 * resume_at_scan_end).
 */
void wal_start_fresh(const ControlFileData* control, SharedState* state, Map* map);

/*
 * A trusted map: nothing more to check here (nullptr).  The follower checks
 * what it resumes with itself: the sizes saved with the map (growth_load())
 * and the timeline (follower_slot_start.cpp).
 */
const char* wal_continue_loaded(const ControlFileData* control, const MapFileHeader& header, Map* map);

}  // namespace ptrack::pg

#endif
