/*
 * growth_watch.h -- the WAL follower's watch of the relation directories
 * (Linux inotify), so that a walk for a call stat()s only the files changed
 * since the previous walk, not every relation file (docs/design.md section
 * 4.3).
 *
 * Why a walk at all: a file can gain blocks that no WAL record names before
 * the call (bulk extension, a COPY that extended and aborted before logging
 * its first page, a crash between the extension and its record), and the
 * follower dates such growth by looking at the files (file_growth.h).  A
 * full walk stat()s every relation file, a fraction of a second at 100,000
 * files (bench/RESULTS.md).  A watch of the WAL alone cannot replace it, for
 * the same reason: such growth shows in no record.  The kernel sees every
 * one.
 *
 * The kernel facts this rests on (Linux fs/notify, fs/read_write.c,
 * fs/open.c, fs/attr.c):
 *
 *   K1. write(), pwrite(), pwritev(), fallocate(), ftruncate()/truncate()
 *       and copy_file_range() queue an IN_MODIFY event for the file's parent
 *       directory's watch (fsnotify_modify() / fsnotify_change() with
 *       ATTR_SIZE) inside the system call, before it returns, under the
 *       notification group's lock that read() on the inotify descriptor also
 *       takes.  So an extension whose system call returned before a call
 *       began has its event in the queue before the follower, which learns
 *       of the call only afterwards (FollowerProgress::walk_requested, an
 *       acquire load), reads the descriptor.  Creation, unlink and renames
 *       queue IN_CREATE, IN_DELETE, IN_MOVED_* the same way.
 *   K2. A watch covers the directory's inode from inotify_add_watch() on,
 *       whatever path a writer opened (a tablespace's symbolic link is
 *       followed when the watch is added), and files opened before it.
 *   K3. When the queue is full (fs.inotify.max_queued_events) the kernel
 *       drops events and queues one IN_Q_OVERFLOW in their place.
 *   K4. A watch removed by the kernel (its directory deleted, its file
 *       system unmounted) ends with IN_IGNORED; no event follows for it.
 *
 * PostgreSQL writes relation files only through those calls (md.c,
 * fd.c: FileWrite/FileWriteV, FileZero, FileFallocate, FileTruncate; no
 * mmap writes; the asynchronous I/O of PostgreSQL 18 only reads), on a
 * local file system.  Writes by another host to a shared file system would
 * not queue events here; a PostgreSQL data directory is never written by
 * another host.
 *
 * The invariant.  The follower's size table (file_growth.cpp) holds, per
 * relation segment file, the size it last saw.  After a *full walk armed
 * by the watch* (watch_before_full_walk(): every relation directory --
 * global, base/<db>, pg_tblspc/<spc>/<version>/<db> -- and every parent
 * that new ones appear in -- base, pg_tblspc, pg_tblspc/<spc>, its version
 * directory -- watched first, then the queue drained and forgotten, then
 * the stat()s), for every relation file either its size is the one in the
 * table or an event for it is queued or held in the `touched` set here:
 * a change before the watch was added is seen by the stat(), one after it
 * queues an event (K1, K2).  The same ordering holds for a directory
 * created later: its parent's watch queues IN_CREATE, and the next walk
 * first adds the new directory's watch, then stat()s every file in it.
 * The size table also changes by the WAL: growth_truncated() and
 * growth_database_replaced() lower sizes, which a full walk would then find
 * as growth.  The follower tells this file (watch_note_lowered(),
 * watch_note_database()), so the next walk looks at those files too; sizes
 * raised by a block reference (growth_block_referenced()) only ever come
 * closer to the file's real size.  So a *watched walk* -- drain, add the
 * watches of new directories, stat() the touched files and walk the new
 * directories -- finds exactly the growth a full walk would, and dates it
 * the same way (the LSN read after the stat()s).
 *
 * Whenever the invariant cannot be vouched for, the next walk is full:
 * before the first armed full walk, after the size table is replaced (a
 * load, a baseline), IN_Q_OVERFLOW (K3), a watch that could not be added
 * (ENOSPC at fs.inotify.max_user_watches, EACCES), an event for an unknown
 * watch, more touched files than the size table holds (a full walk is then
 * cheaper anyway), a directory reached by two watched paths (a tablespace
 * created inside another's database directory, a link in base/: one watch
 * for both, whose events could be taken for either; every watch has the
 * same mask, so the second inotify_add_watch() never drops IN_MODIFY, and
 * the first path's entry is never replaced nor removed), a watch the
 * kernel removed with its file system
 * (IN_UNMOUNT), or an ERROR while events were being read or a walk made.
 * Each cause is LOGged once per follower process.  If inotify cannot be set
 * up at all (inotify_init1() fails: fs.inotify.max_user_instances), every
 * walk is full (LOGged once).  Saves keep making full
 * walks: the periodic background walk that bounds anything else.
 *
 * Only where it pays.  The watch costs every write of a relation file a
 * kernel event, paid by the writer, and the follower a read of each (the
 * queue reads are several percent of its CPU under an update-heavy load,
 * bench/RESULTS.md); what it saves is the stat() of every relation file at
 * a call, 3-4 us each.  So it is set up only once the size table knows
 * ptrack.wal_file_watch_min_files relation files (10,000 by default: a
 * full walk of fewer takes under 40 ms), and closed when they fall below
 * half of that; meanwhile every walk is full.
 *
 * Interface routines (the WAL follower only; C-style frames, may ERROR):
 *   watch_create()            at the follower's start (nothing is watched yet)
 *   watch_drain()             each loop iteration: reads the queued events
 *   watch_full_walk()         a walk of every relation file, arming the watch
 *   watch_walk_for_call()     a walk for a call: watched if it can be, else full
 *   watch_sizes_replaced()    the size table was loaded or reset
 *   watch_note_lowered()      the WAL lowered a relation fork's sizes
 *   watch_note_database()     the WAL replaced a whole database directory
 *   define_growth_watch_guc() ptrack.wal_file_watch (developer option),
 *                             ptrack.wal_file_watch_min_files (developer option)
 *
 * State lives in the follower's TopMemoryContext (two dynahash tables).
 * The follower reports the watch's state and its walks in its
 * pg_stat_activity row (query), e.g. "file watch: on, 7 directories;
 * walks: 12 watched, 3 full (last full: a save)".
 */
#ifndef PTRACK_PG_CAPTURE_WAL_GROWTH_WATCH_H
#define PTRACK_PG_CAPTURE_WAL_GROWTH_WATCH_H

#include "ptrack/relfork.h"

namespace ptrack::pg {

void watch_create();
void watch_drain();

/*
 * growth_walk(baseline): every relation file, the watch armed first (when
 * it is on and can be set up); `why` names the walk for the status line.
 */
Lsn watch_full_walk(bool baseline, const char* why);

/* A walk for a call (wait_for_follower()): only the files changed since, when the watch vouches for the rest. */
Lsn watch_walk_for_call();

void watch_sizes_replaced();
void watch_note_lowered(const RelFork& rel, BlockNumber nblocks);
void watch_note_database(uint32_t spc, uint32_t db);

void define_growth_watch_guc();

}  // namespace ptrack::pg

#endif
