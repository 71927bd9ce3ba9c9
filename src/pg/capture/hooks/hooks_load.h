/*
 * hooks_load.h -- the hooks source's steps in the postmaster's load of the
 * map (hooks_load.cpp), entries of its SourcePersistence
 * (persist/map_persistence.h).
 */
#ifndef PTRACK_PG_HOOKS_LOAD_H
#define PTRACK_PG_HOOKS_LOAD_H

#include "persist/map_persistence.h"

namespace ptrack::pg {

/*
 * A fresh map: its ptrack_init_lsn() when it can be proven now (a base
 * backup's redo LSN, one byte past a clean shutdown's checkpoint, one byte
 * past the end of the WAL after a crash), marking in `map` what the startup
 * scan finds; else 0, and init_lsn() establishes it on first use.
 */
void hooks_start_fresh(const ControlFileData* control, SharedState* state, Map* map);

/*
 * A trusted map, complete up to its covered LSN: marks what the WAL after
 * it changed and, after a crash, the blocks relation files gained since the
 * save without WAL.  nullptr, or why the map cannot be trusted.
 */
const char* hooks_continue_loaded(const ControlFileData* control, const MapFileHeader& header, Map* map);

}  // namespace ptrack::pg

#endif
