/*
 * map_persistence.h -- the map survives restarts and crashes (docs/design.md
 * section 4): loaded at postmaster start if it can be trusted (map_load.cpp),
 * saved by the process the capture source makes responsible (map_save.cpp).
 * The file format and the trust rules are in the engine (ptrack/map_file.h,
 * ptrack/map_delta.h); the file primitives in map_io.h.
 */
#ifndef PTRACK_PG_MAP_PERSISTENCE_H
#define PTRACK_PG_MAP_PERSISTENCE_H

#include "core/shared_state.h"

namespace ptrack::pg {

/* What a map save records, from the source that triggers it. */
struct SavePoint {
    Lsn covered_lsn;    /* every change whose record ends at or before it is marked (or re-marked by recovery) */
    Lsn next_threshold; /* every mark stored after the save's copy holds a value >= it (ptrack/map_delta.h) */
};

/*
 * In the postmaster, on a freshly created shared state: fills the map from
 * ptrack.map if it can be trusted, overwriting every byte of the region, and
 * sets init_lsn, loaded_covered_lsn and loaded_timeline from it.  Otherwise
 * clears the map, logs one WARNING naming the file and the reason (none when
 * there was no file), removes the rejected files, and sets init_lsn to what a
 * fresh map can prove (0: established later).  Never raises an ERROR (the
 * postmaster must start).
 */
void load_map(SharedState* state, Map* map);

/* Removes ptrack.map and its delta and temporary files (ptrack.map_size = 0). */
void remove_map_files();

/*
 * Saves the map as complete up to `point.covered_lsn`: the whole map to
 * ptrack.map (temporary file, fsync, durable rename), or the slots changed
 * since the previous save appended to ptrack.map.delta.  Only ever called by
 * one process per server run.  On an I/O failure logs a WARNING and returns
 * false; the next save then writes the whole map.
 */
bool flush_map(const SavePoint& point);

}  // namespace ptrack::pg

#endif
