/*
 * bypass_journal_io.h -- hooks source: durable marks for writes that bypass
 * shared buffers (docs/design.md section 3.6).  The entry format is the
 * engine's (ptrack/bypass_journal.h); this file does the I/O.
 *
 * The window: a bulk writer (btree CREATE INDEX, ALTER TABLE ... SET
 * TABLESPACE, CLUSTER, VACUUM FULL) WAL-logs a page, then writes it straight
 * to the file.  If a whole checkpoint (and its map save) falls between the
 * two and the server crashes before the next save, the mark made by the
 * write hook is lost, and neither recovery nor the startup scan (which both
 * start after that WAL record) makes it again.  Every such writer calls
 * smgrimmedsync() on the fork before it commits; the core patch's optional
 * mdimmedsync_hook calls bypass_journal_append() there, which makes the
 * marks of the whole fork durable in ptrack.bypass before the commit.  An
 * uncommitted writer leaves only a file no catalog names.
 */
#ifndef PTRACK_PG_BYPASS_JOURNAL_IO_H
#define PTRACK_PG_BYPASS_JOURNAL_IO_H

extern "C" {
#include "postgres.h"
}

#include "ptrack/map.h"

namespace ptrack::pg {

/*
 * In a backend, at the end of mdimmedsync(): blocks 0 .. nblocks-1 of `rel`
 * are on disk; appends an entry with the current mark LSN to ptrack.bypass
 * and fsyncs it.  Raises no ERROR: if the entry cannot be made durable,
 * tracking restarts (restart_tracking(), a WARNING), which never loses a
 * change.
 */
void bypass_journal_append(const RelFork& rel, BlockNumber nblocks) noexcept;

/*
 * In the checkpointer, before a map save takes its save point: moves
 * ptrack.bypass aside to ptrack.bypass.old (unless an older one is still
 * there), so that appends made from now on go to a new file.  Every entry in
 * the old file was appended after its blocks were marked in shared memory,
 * hence before the save copies the map.
 */
void bypass_journal_rotate() noexcept;

/* After that save succeeded: ptrack.bypass.old is covered by the saved map; removes it. */
void bypass_journal_retire() noexcept;

/*
 * In the postmaster at startup, whatever map is used (loaded or fresh):
 * marks in `map` every block each valid entry of both journals names, at
 * the entry's LSN.  Reading a file stops at its first invalid entry (a torn
 * append: its writer never committed).  Returns the number of entries.
 */
uint64_t bypass_journal_apply(Map* map) noexcept;

/* Removes both journals (ptrack.map_size = 0). */
void remove_bypass_journals();

}  // namespace ptrack::pg

#endif
