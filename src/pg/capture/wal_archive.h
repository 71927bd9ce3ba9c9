/*
 * wal_archive.h -- the WAL follower's segments that are no longer in pg_wal,
 * read through restore_command (wal_archive.cpp; docs/design.md section 4.7).
 *
 * Why: a data directory restored from a base backup whose WAL comes from an
 * archive (recovery.signal or standby.signal with restore_command,
 * pg_probackup's ARCHIVE mode) has a fresh map that can be complete from the
 * backup's redo LSN only if the follower reads the WAL from there.  Recovery
 * restores that WAL into pg_wal, but its restartpoints and its end-of-recovery
 * checkpoint remove it again before the follower (started at consistency, or
 * after recovery with hot_standby off) has reserved its slot.  The archive
 * still holds it: the follower reads the segments it lacks from there, with
 * the command recovery used.
 */
#ifndef PTRACK_PG_WAL_ARCHIVE_H
#define PTRACK_PG_WAL_ARCHIVE_H

extern "C" {
#include "postgres.h"

#include "access/xlogreader.h"
}

#include <csignal>

#include "core/boundary.h"
#include "ptrack/map.h"

namespace ptrack::pg {

/*
 * Segments that start before `lsn` may be restored through restore_command
 * when pg_wal lacks them (0: never).  The follower sets it to the position
 * its slot keeps the WAL from; the slot keeps everything after.
 */
void archive_fallback_until(Lsn lsn);

/*
 * `flag` (the follower's SIGTERM flag) becoming true ends the wait of
 * archive_segment_open() for a segment that recovery is replacing.
 */
void archive_stop_waiting_on(const volatile sig_atomic_t* flag);

/*
 * The follower's segment_open callback for xlogreader (XLogReaderRoutine):
 * opens segment `segno` of timeline *tli from pg_wal (during recovery, a
 * segment missing for a moment while recovery replaces it is waited for, up
 * to 30 s, and the old timeline's last segment, renamed <name>.partial just
 * before recovery ends, is read under that name), else, below the
 * fallback limit and with restore_command set, restores it into a file of
 * its own in pg_wal, opens it and removes its name at once.  Raises an ERROR
 * when the segment can be had from neither (a read error: the follower
 * restarts tracking, never answers short).  Runs restore_command with
 * system(), like the startup process; %r is the oldest possible segment name
 * (nothing is to be cleaned up from the archive for the follower).
 */
void archive_segment_open(XLogReaderState* reader, XLogSegNo segno, TimeLineID* tli);

/*
 * nullptr if the follower can hope to read the WAL from `from` to `to`
 * (restore_command is set, or every segment of that range, and the one
 * before `from`, is in pg_wal under some timeline), else why not,
 * completing "... because ...".
 */
const char* archive_catch_up_blocker(Lsn from, Lsn to);

/* restore_command is set (the process's value of the setting). */
bool restore_command_set();

/*
 * Runs restore_command for WAL segment file `name` (`segment_bytes` long)
 * into a file of ptrack's own in pg_wal; returns a descriptor open on it
 * (its name already removed: nothing is left behind), or -1 with `why`
 * saying what failed.  Raises no ERROR (the postmaster calls it too).
 */
int restore_segment(const char* name, int segment_bytes, char* why, size_t why_size);

/* In the postmaster at startup: removes a restored segment a crash left behind. */
void remove_archive_leftover();

}  // namespace ptrack::pg

#endif
