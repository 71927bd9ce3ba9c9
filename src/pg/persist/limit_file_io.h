/*
 * limit_file_io.h -- the limit table (ptrack/limit_table.h) survives restarts
 * and crashes as ptrack.limits (in pg_wal/ptrack: state_files.h), saved with
 * the map by the WAL follower and loaded at startup.  The format and its checks are in the
 * engine (ptrack/limit_file.h); this file does the I/O with PostgreSQL's file
 * facilities (map_io.h).
 *
 * When a saved table can be used: it is complete up to its covered LSN, so a
 * follower that resumes reading at R loses no limit event iff the table
 * loaded and its covered LSN >= R.  Resuming earlier than the covered LSN
 * only repeats events, which the table folds in conservatively.  Hence the
 * order of a save: first ptrack.limits, then the map; if the limits save
 * fails, skip the map save (the saved map would otherwise be ahead of the
 * saved limits, and the next startup would have to refuse both).
 *
 * Like the map's load and save, nothing here raises an ERROR: the postmaster
 * must start, and the follower must not stop because of a failed save.
 */
#ifndef PTRACK_PG_LIMIT_FILE_IO_H
#define PTRACK_PG_LIMIT_FILE_IO_H

#include <cstdint>

#include "ptrack/relfork.h"

namespace ptrack::pg {

/*
 * Saves `limits` to ptrack.limits as complete up to `covered_lsn`: a
 * temporary file, fsync, durable rename.  Call from the table's writer (the
 * WAL follower), so the copy is consistent.  On failure logs a WARNING and
 * returns false; the previous file, if any, is left as it was.
 */
bool save_limits(Lsn covered_lsn);

/*
 * At startup, before anything reads or writes `limits`: fills it from
 * ptrack.limits and sets *covered_lsn; returns nullptr.  Otherwise returns
 * why the file is not usable (completing "ptrack.limits is not usable
 * because ...", e.g. "it does not exist") and leaves `limits` as it was.
 * `system_identifier` is pg_control's.
 */
const char* load_limits(uint64_t system_identifier, Lsn* covered_lsn);

}  // namespace ptrack::pg

#endif
