/*
 * map_persistence.h -- the map survives restarts and crashes (docs/design.md
 * section 4): loaded at postmaster start if it can be trusted, flushed at the
 * end of every checkpoint and restartpoint sync phase.  The file format and
 * the trust rules are in the engine (ptrack/map_file.h); this file does the
 * I/O with PostgreSQL's file facilities and gathers the facts from pg_control.
 */
#ifndef PTRACK_PG_MAP_PERSISTENCE_H
#define PTRACK_PG_MAP_PERSISTENCE_H

#include "shared_state.h"

namespace ptrack::pg {

/*
 * In the postmaster, on a freshly created shared state: fills the map from
 * ptrack.map if it can be trusted (init_lsn included), overwriting every
 * byte of the region; otherwise clears it (so the caller need not).  Otherwise logs one
 * WARNING naming the file and the reason, removes the file, and leaves the
 * map empty with init_lsn unset, so a new one is established.  Never raises
 * an ERROR (the postmaster must start).
 */
void load_map(SharedState* state, Map* map);

/* Removes ptrack.map and its temporary file (ptrack.map_size = 0). */
void remove_map_files();

/*
 * In the checkpointer, at the end of the sync phase: writes the map to
 * ptrack.map.tmp, fsyncs it and durably renames it over ptrack.map.  On an
 * I/O failure logs a WARNING and returns: the stale file will then be
 * older than the next checkpoint and rejected at startup.
 */
void flush_map();

}  // namespace ptrack::pg

#endif
