/*
 * limit_file_io.h -- ptrack.limits, the limit table (ptrack/limit_table.h)
 * an earlier version's WAL follower saved with its map in the data
 * directory, when it still marked the map (moved into pg_wal/ptrack with
 * the map at startup: state_files.h).  This version writes none: it reads
 * one only to migrate such a map into a change summary
 * (capture/wal/map_migration.h), and removes it at startup once the map is
 * loaded.  The format and its checks are in the engine (ptrack/limit_file.h);
 * this file does the I/O with PostgreSQL's file facilities (map_io.h).
 *
 * The saved table is complete up to its covered LSN: with a map complete up
 * to C, it can be used iff its covered LSN >= C.
 *
 * Nothing here raises an ERROR: the postmaster must start.
 */
#ifndef PTRACK_PG_LIMIT_FILE_IO_H
#define PTRACK_PG_LIMIT_FILE_IO_H

#include <cstdint>

#include "ptrack/relfork.h"

namespace ptrack::pg {

/*
 * At startup, before anything reads or writes `limits`: fills it from
 * ptrack.limits and sets *covered_lsn; returns nullptr.  Otherwise returns
 * why the file is not usable (completing "ptrack.limits is not usable
 * because ...", e.g. "it does not exist") and leaves `limits` as it was.
 * `system_identifier` is pg_control's.
 */
const char* load_limits(uint64_t system_identifier, Lsn* covered_lsn);

/* Removes ptrack.limits and its temporary file (at startup, once the map is loaded; tracking off). */
void remove_limits_files();

}  // namespace ptrack::pg

#endif
