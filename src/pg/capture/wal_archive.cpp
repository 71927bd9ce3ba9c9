/*
 * wal_archive.cpp -- the WAL follower reads the segments pg_wal no longer
 * holds through restore_command (wal_archive.h; docs/design.md section 4.7).
 *
 * Why this way.  The follower of a data directory restored from a base
 * backup must read the WAL from the backup's redo LSN, and recovery has
 * removed it from pg_wal by then.  The alternatives are weaker: PostgreSQL's
 * own RestoreArchivedFile() (xlogarchive.c) serves the startup process only
 * (it does nothing unless ArchiveRecoveryRequested, which only the startup
 * process sets, and its signal handling around system() is the startup
 * process's); a slot cannot keep the WAL from the redo LSN, since the
 * startup process loads the slots and replays (and restartpoints remove
 * WAL) before any other process may create one, and keeping all the WAL of
 * a long recovery would fill the disk; an extension cannot see replay on a
 * stock server.  What recovery replayed is what this reads: pg_wal first
 * (recovery leaves a segment it restored there under its own name, and
 * prefers the archive's copy to the one the backup carried), then the
 * archive, through the same restore_command, for the segments removed since.
 * The page reader (read_local_xlog_page_no_wait()) picks the timeline of
 * each segment from the current timeline's history, as recovery did.
 *
 * Never a short answer: a segment that can be had from neither raises an
 * ERROR while the follower reads, and the follower then restarts tracking
 * with a WARNING and a later ptrack_init_lsn() (follower_main.cpp).  The
 * archive's copy is checked like any WAL: xlogreader verifies every page
 * header (address, timeline, system identifier) and every record's CRC.
 *
 * The command runs in the follower with system(), as the startup process
 * runs it: %p is a file of our own in pg_wal (never the startup process's
 * RECOVERYXLOG, which a hot standby's recovery may be using), %f the
 * segment's name, %r the oldest possible segment name, so that a command
 * that cleans up the archive (pg_archivecleanup-style %r) removes nothing.
 * A shutdown sends SIGTERM to the follower's process group, command
 * included, so it does not wait for a slow archive.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
#include "common/archive.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "utils/wait_event.h"
}

#include "core/shared_state.h"
#include "capture/wal_archive.h"
#include "capture/wal_records.h"

namespace ptrack::pg {

namespace {

/* The follower's restored copy of a segment: in pg_wal, whose file system restore_command already writes to. */
constexpr const char* kRestoredFileName = XLOGDIR "/ptrack.RESTOREDXLOG";

/* Segments that start before this LSN may come from the archive (0: none). */
Lsn fallback_until = 0;

/* How long a segment may stay missing while recovery replaces it (open_segment_in_recovery()), in ms. */
constexpr int kReplaceWaitMs = 30000;

/* Set when the follower is asked to exit: stops that wait (archive_stop_waiting_on()). */
const volatile sig_atomic_t* stop_flag = nullptr;

/*
 * Opens WAL segment file `path` of pg_wal; -1 with errno set if it cannot.
 * Recovery moves segments under the follower's feet, and a segment missing
 * for these reasons is not gone (PostgreSQL 15-18, xlogarchive.c and xlog.c):
 *
 *  - KeepFileRestoredFromArchive() replaces a segment that pg_wal already
 *    holds (recovery restores the last one again at its end, a standby
 *    retries) by unlinking it, then fsyncing and renaming its new copy: for
 *    a moment, no file has the name.  While recovery runs, a missing
 *    segment is waited for (up to kReplaceWaitMs), then taken as gone.
 *  - CleanupAfterArchiveRecovery() renames the old timeline's last segment
 *    to <name>.partial before recovery ends; until it has ended, the page
 *    reader (read_local_xlog_page_no_wait()) still reads that timeline, up
 *    to the replay position, which that file holds.  After the end, the
 *    reader takes the segment of the new timeline, a copy up to the switch.
 */
int open_segment_in_recovery(const char* path)
{
    for (int waited_ms = 0;; waited_ms += 10) {
        int fd = BasicOpenFile(path, O_RDONLY | PG_BINARY);
        if (fd >= 0 || errno != ENOENT)
            return fd;
        char partial[MAXPGPATH];
        snprintf(partial, sizeof(partial), "%s.partial", path);
        fd = BasicOpenFile(partial, O_RDONLY | PG_BINARY);
        if (fd >= 0) {
            ereport(LOG, (errmsg("ptrack WAL follower reads \"%s\", renamed at the end of recovery", partial)));
            return fd;
        }
        if (!RecoveryInProgress() || waited_ms >= kReplaceWaitMs || (stop_flag != nullptr && *stop_flag)) {
            errno = ENOENT;
            return -1;
        }
        pg_usleep(10 * 1000L); /* the follower's SIGTERM interrupts it */
    }
}

}  // namespace

bool restore_command_set()
{
    return recoveryRestoreCommand != NULL && recoveryRestoreCommand[0] != '\0';
}

int restore_segment(const char* name, int segment_bytes, char* why, size_t why_size)
{
    if (unlink(kRestoredFileName) != 0 && errno != ENOENT) {
        snprintf(why, why_size, "could not remove file \"%s\": %m", kRestoredFileName);
        return -1;
    }
    char oldest[MAXFNAMELEN];
    XLogFileName(oldest, 0, 0, segment_bytes);
    char* command = BuildRestoreCommand(recoveryRestoreCommand, kRestoredFileName, name, oldest);
    if (command == NULL) {
        snprintf(why, why_size, "restore_command \"%s\" could not be expanded", recoveryRestoreCommand);
        return -1;
    }
    fflush(NULL);
    pgstat_report_wait_start(WAIT_EVENT_RESTORE_COMMAND);
    const int rc = system(command);
    pgstat_report_wait_end();
    pfree(command);
    struct stat st;
    const bool present = stat(kRestoredFileName, &st) == 0;
    if (rc != 0 || !present || st.st_size != segment_bytes) {
        (void) unlink(kRestoredFileName);
        if (rc != 0) {
            char* text = wait_result_to_str(rc);
            snprintf(why, why_size, "restore_command %s", text);
            pfree(text);
        } else if (!present) {
            snprintf(why, why_size, "restore_command left no file");
        } else {
            snprintf(why, why_size, "restore_command left %lld bytes, not %d", static_cast<long long>(st.st_size),
                     segment_bytes);
        }
        return -1;
    }
    const int fd = BasicOpenFile(kRestoredFileName, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        snprintf(why, why_size, "could not open file \"%s\": %m", kRestoredFileName);
        (void) unlink(kRestoredFileName);
        return -1;
    }
    (void) unlink(kRestoredFileName); /* the descriptor keeps the data; nothing is left behind */
    return fd;
}

void archive_stop_waiting_on(const volatile sig_atomic_t* flag)
{
    stop_flag = flag;
}

void archive_fallback_until(Lsn lsn)
{
    fallback_until = lsn;
}

void archive_segment_open(XLogReaderState* reader, XLogSegNo segno, TimeLineID* tli)
{
    const int segment_bytes = reader->segcxt.ws_segsize;
    char name[MAXFNAMELEN];
    char path[MAXPGPATH];
    XLogFileName(name, *tli, segno, segment_bytes);
    snprintf(path, sizeof(path), XLOGDIR "/%s", name);
    XLogRecPtr segment_start;
    XLogSegNoOffsetToRecPtr(segno, 0, segment_bytes, segment_start);
    /* Below the slot's position a missing segment is gone, and the archive has it: no wait. */
    const bool from_archive = segment_start < fallback_until && restore_command_set();
    reader->seg.ws_file = from_archive ? BasicOpenFile(path, O_RDONLY | PG_BINARY) : open_segment_in_recovery(path);
    if (reader->seg.ws_file >= 0)
        return;
    if (errno != ENOENT)
        ereport(ERROR, (errcode_for_file_access(), errmsg("could not open file \"%s\": %m", path)));
    if (from_archive) {
        char why[MAXPGPATH + 128];
        reader->seg.ws_file = restore_segment(name, segment_bytes, why, sizeof(why));
        if (reader->seg.ws_file < 0)
            ereport(ERROR,
                    (errcode(ERRCODE_UNDEFINED_FILE),
                     errmsg("ptrack could not restore WAL segment \"%s\" from the archive: %s", name, why),
                     errdetail("The WAL follower reads the WAL since the base backup's redo LSN, which is no longer "
                               "in pg_wal."),
                     errhint("Check restore_command. Unless the server is shutting down (which stops the command), "
                             "tracking restarts at a later ptrack_init_lsn(): the next backup must be a full "
                             "backup.")));
        ereport(LOG, (errmsg("ptrack WAL follower restored WAL segment \"%s\" from the archive", name)));
        return;
    }
    ereport(ERROR, (errcode_for_file_access(),
                    errmsg("WAL segment \"%s\" that ptrack's WAL follower needs has already been removed", path)));
}

const char* archive_catch_up_blocker(Lsn from, Lsn to)
{
    if (restore_command_set())
        return nullptr;
    XLogSegNo first, end;
    XLByteToSeg(from > 0 ? from - 1 : 0, first, wal_segment_size);
    XLByteToSeg(to, end, wal_segment_size); /* the slot keeps segment `end` and later ones */
    if (end <= first)
        return nullptr;
    const uint64_t count = end - first;
    bool* present = static_cast<bool*>(palloc0(count * sizeof(bool)));
    DIR* dir = AllocateDir(XLOGDIR);
    struct dirent* de;
    while ((de = ReadDir(dir, XLOGDIR)) != NULL) {
        if (!IsXLogFileName(de->d_name))
            continue;
        TimeLineID tli;
        XLogSegNo segno;
        XLogFromFileName(de->d_name, &tli, &segno, wal_segment_size);
        if (segno >= first && segno < end)
            present[segno - first] = true;
    }
    FreeDir(dir);
    const char* why = nullptr;
    for (uint64_t i = 0; i < count && why == nullptr; ++i) {
        if (!present[i]) {
            XLogRecPtr start;
            XLogSegNoOffsetToRecPtr(first + i, 0, wal_segment_size, start);
            why = reason("pg_wal no longer holds the WAL segment that starts at %X/%X, and restore_command is not set",
                         PTRACK_LSN_ARGS(start));
        }
    }
    pfree(present);
    return why;
}

void remove_archive_leftover()
{
    if (unlink(kRestoredFileName) == 0)
        ereport(LOG, (errmsg("ptrack removed leftover restored WAL segment \"%s\"", kRestoredFileName)));
}

}  // namespace ptrack::pg
