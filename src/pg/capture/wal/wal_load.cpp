/*
 * wal_load.cpp -- the wal source's steps when the postmaster loads the map
 * (persist/map_load.cpp calls them through SourcePersistence,
 * map_persistence.h): the floor of a fresh map's ptrack_init_lsn() and, in
 * a data directory restored from a base backup, the relation file sizes and
 * the WAL read before recovery (docs/design.md section 4.7).  The follower
 * (follower_slot_start.cpp) starts from what these leave in the shared
 * state.
 *
 * Runs in the postmaster, before any other process exists; raises no ERROR
 * but for a data directory that cannot be read.
 */
extern "C" {
#include "postgres.h"

#include <sys/stat.h>

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"
}

#include "capture/file_growth.h"
#include "capture/startup_scan.h"
#include "capture/wal/scan_summary_writer.h"
#include "capture/wal/wal_load.h"
#include "persist/map_persistence.h"

namespace ptrack::pg {

namespace {

/*
 * The wal source's fresh map starts where the follower starts reading (a
 * retained slot position, or the redo LSN it reserves), but never before
 * something done to the stopped cluster without WAL: after a clean shutdown
 * (of a primary or a standby) an offline tool such as pg_checksums may have
 * rewritten blocks, so the floor is one byte past that checkpoint's start,
 * as for the hooks source.  After a crash no such tool runs (they refuse a
 * cluster that was not shut down cleanly), and the floor is 0.
 */
Lsn fresh_wal_init_floor(const ControlFileData* control)
{
    if (control == nullptr)
        return UINT64_MAX; /* unknown: the follower then starts at its own position, later */
    if (control->state == DB_SHUTDOWNED || control->state == DB_SHUTDOWNED_IN_RECOVERY)
        return control->checkPointCopy.redo + 1;
    return 0;
}

/*
 * The wal source's fresh map in a data directory restored from a base
 * backup: the relation file sizes before recovery, saved for the follower
 * (file_growth.h); returns the redo LSN they are saved for, or 0.
 *
 * Why: the follower starts once the server is consistent (on a standby) or
 * recovery is over, and marks the blocks files gain after its baseline of
 * sizes, while the WAL it reads from the backup's redo LSN on shows every
 * other change.  A baseline taken when it starts would hide the zero pages
 * replay added before it (XLogReadBufferExtended() fills a file up to the
 * block a record names), and a FULL backup on a fresh standby may copy a
 * file before them.  Sizes taken here, before the startup process exists,
 * are the files as the backup left them; every block added after is seen,
 * so the fresh map is complete from the backup's redo LSN, which is where a
 * FULL backup taken on the new standby right away starts (the redo LSN of
 * its latest restartpoint).  Blocks a primary added without WAL before the
 * backup copied the file are in the backup's copy and in every backup of
 * this server.  After a crash the files may hold blocks added without WAL
 * after the redo LSN and before a backup's start, so this proof does not
 * apply: the follower's own baseline stands, and ptrack_init_lsn() with it.
 */
Lsn presize_before_recovery()
{
    if (!backup_label_present())
        return 0;
    const Lsn redo = base_backup_redo_lsn();
    if (redo == 0 || !growth_save_before_recovery(redo))
        return 0;
    ereport(LOG, (errmsg("ptrack recorded the relation file sizes before recovery from the base backup's "
                         "redo LSN %X/%X", PTRACK_LSN_ARGS(redo))));
    return redo;
}

/*
 * The wal source's fresh map in a data directory restored from a base
 * backup: marks what the WAL in pg_wal changed from the backup's redo LSN
 * on (the WAL recovery is about to replay, beginning with the record that
 * ends at the redo LSN if pg_wal holds it), writes the same as change
 * summaries (scan_summary_writer.h), and records both ranges in `state` for the
 * follower (follower_slot_start.cpp).
 *
 * A standby's follower starts at consistency and reads from the redo LSN
 * itself; the scan adds the record ending exactly there, which reading from
 * the redo LSN skips.  A restored primary (neither standby.signal nor
 * recovery.signal) replays only what pg_wal holds and then writes its
 * end-of-recovery checkpoint; its follower starts after that and reserves
 * the WAL from that checkpoint on, so without the scan the fresh map would
 * start there, and the restored backup could not be the parent of the next
 * incremental one.  Recovery replays nothing beyond the end of the valid WAL
 * in pg_wal (with neither signal file there is no restore_command and no
 * streaming), and no backend writes WAL before the end-of-recovery
 * checkpoint, so the scan's range, then the follower reading on from the
 * scan's end, see every change after the redo LSN.
 */
void scan_restored_backup(const ControlFileData& control, Lsn redo, Map* map, SharedState* state)
{
    StartupScan scan;
    ScanSummaryWriter summaries(control.checkPointCopy.ThisTimeLineID);
    const char* why =
        scan_wal_at_startup(control, redo, control.checkPointCopy.ThisTimeLineID, map, &scan, &summaries);
    if (why != nullptr) {
        summaries.abandon();
        map->clear();
        ereport(LOG, (errmsg("ptrack cannot prove the WAL since the base backup's redo LSN %X/%X complete: %s",
                             PTRACK_LSN_ARGS(redo), why),
                      errdetail("ptrack_init_lsn() is established where the WAL follower starts reading.")));
        return;
    }
    log_startup_scan(scan, "since the base backup's redo LSN");
    state->restored_scan_from = scanned_from(scan, redo, control.xlog_seg_size);
    state->restored_scan_end = scan.end;
    /* The same range as summaries (scan_summary_writer.h): the follower's chain goes on from its end. */
    const ScanChain chain = summaries.finish(scan.end);
    state->restored_summary_from = chain.start_lsn;
    state->restored_summary_end = chain.end_lsn;
    state->restored_summary_timeline = control.checkPointCopy.ThisTimeLineID;
    /*
     * The follower may skip to the scan's end only on a restored primary.
     * And not when the scanned WAL truncates relations: the sizes saved
     * before recovery predate those truncations, which the follower, starting
     * after them, never applies, so a file cut there and grown again without
     * WAL, up to its old length, before the follower's first walk, would
     * show no growth.
     */
    struct stat st;
    const bool signalled = stat(STANDBY_SIGNAL_FILE, &st) == 0 || stat(RECOVERY_SIGNAL_FILE, &st) == 0;
    state->resume_at_scan_end = !signalled && scan.truncations == 0;
    if (!signalled && scan.truncations > 0)
        ereport(LOG, (errmsg("ptrack WAL follower cannot go on from the end of the WAL read before recovery: "
                             "%llu records there truncate relations",
                             static_cast<unsigned long long>(scan.truncations)),
                      errdetail("ptrack_init_lsn() is established where the WAL follower starts reading.")));
}

}  // namespace

void wal_before_load(const ControlFileData* control, SharedState* state)
{
    state->fresh_init_floor = fresh_wal_init_floor(control);
}

void wal_start_fresh(const ControlFileData* control, SharedState* state, Map* map)
{
    state->presized_redo_lsn = presize_before_recovery();
    if (state->presized_redo_lsn != 0 && control != nullptr)
        scan_restored_backup(*control, state->presized_redo_lsn, map, state);
}

const char* wal_continue_loaded(const ControlFileData*, const MapFileHeader&, Map*)
{
    return nullptr;
}

}  // namespace ptrack::pg
