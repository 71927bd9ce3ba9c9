/*
 * hooks_load.cpp -- the hooks source's steps when the postmaster loads the
 * map (persist/map_load.cpp calls them through SourcePersistence,
 * map_persistence.h): where a fresh map can start, and what a loaded map
 * needs before it is used (docs/design.md sections 3.5, 3.8 and 5.2).
 *
 * The hooks mark blocks as they are written, and a saved map is complete up
 * to its covered LSN; what happened after it (a crash lost the marks made in
 * memory) is read from the WAL left in pg_wal by the startup scan
 * (startup_scan.h), and the blocks relation files gained without WAL are
 * found from the sizes saved with the map (file_growth.h).
 *
 * Runs in the postmaster, before any other process exists; raises no ERROR.
 */
extern "C" {
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_control.h"
}

#include "capture/file_growth.h"
#include "capture/hooks/hooks_load.h"
#include "capture/startup_scan.h"
#include "capture/wal_records.h"
#include "persist/map_persistence.h"

namespace ptrack::pg {

namespace {

/*
 * Hooks, a base backup: its redo LSN, or one byte past it.  Replay writes,
 * hence marks, every page changed after the redo LSN (see below), but no one
 * replays the record that ends exactly there, if any: the startup scan marks
 * it when pg_wal holds it (the backup's WAL starts with the segment of the
 * redo LSN), and everything after it while at it; when pg_wal does not (the
 * WAL comes through restore_command: pg_probackup's ARCHIVE mode,
 * pg_basebackup -X none), that one record is read through restore_command
 * (mark_record_ending_at()).  0 for pg_rewind's label.
 */
Lsn base_backup_init_lsn(const ControlFileData& control, Map* map)
{
    const Lsn redo = base_backup_redo_lsn();
    if (redo == 0)
        return 0;
    StartupScan scan;
    if (scan_wal_at_startup(control, redo, control.checkPointCopy.ThisTimeLineID, map, &scan) == nullptr) {
        log_startup_scan(scan, "since the base backup's redo LSN");
        return scanned_from(scan, redo, control.xlog_seg_size);
    }
    if (no_record_ends_at(redo, control.xlog_seg_size))
        return redo;
    if (const char* why = mark_record_ending_at(control, redo, control.checkPointCopy.ThisTimeLineID, map)) {
        ereport(LOG, (errmsg("ptrack cannot mark the WAL record that ends at the base backup's redo LSN %X/%X: %s",
                             PTRACK_LSN_ARGS(redo), why),
                      errdetail("ptrack_init_lsn() is one byte past it, %X/%X.", PTRACK_LSN_ARGS(redo + 1))));
        return redo + 1;
    }
    ereport(LOG, (errmsg("ptrack marked the WAL record that ends at the base backup's redo LSN %X/%X",
                         PTRACK_LSN_ARGS(redo))));
    return redo;
}

/*
 * ptrack_init_lsn() of a fresh map, when it can be known at startup (the wal
 * source: never, the follower establishes it where it starts reading,
 * capture/wal/follower_slot_start.cpp).  Fills `map` with what the
 * startup scan marks.  0 when nothing can be proven: established on first
 * use instead (init_lsn()).
 *
 *   A base backup (backup_label of pg_backup_start()): its redo LSN.  Every
 *   page changed after it is written again by replay, hence marked: the
 *   first change of each page after the backup's checkpoint carries a
 *   full-page image (pg_backup_start() forces them on a primary; on a
 *   standby pg_backup_stop() fails if the replayed WAL lacked them), and
 *   replay restores an image whatever the page on disk holds.
 *
 *   After a clean shutdown of a primary (pg_control "shut down"): one byte
 *   past the shutdown checkpoint's start (its redo LSN).  Every change before
 *   it is on disk, and every WAL record after it is written in this run,
 *   after the map exists.  The byte past it excludes the record itself and
 *   whatever was done to the stopped cluster without WAL (pg_checksums),
 *   while the start LSN of any backup taken in this run lies after it.
 *
 *   After a crash or a standby's shutdown (wal_level >= replica): one byte
 *   past the end of the valid WAL, if the startup scan reads the WAL to its
 *   end (startup_scan.h).  Not the redo LSN: the WAL names every block a
 *   record changed, but not the zero pages relation extension added after
 *   the redo LSN (a heap extended by several pages, the pages replay fills
 *   up to a block a record names), whose marks the lost map held, and no
 *   record of the files' sizes at the redo LSN exists (the sizes saved with
 *   a map are taken after it, docs/design.md section 3.7).  Every backup
 *   taken before the crash started at or before the WAL's end, so the next
 *   one must be full; every change after the end is made in this run.
 */
Lsn fresh_map_init_lsn(const ControlFileData* control, Map* map)
{
    if (control == nullptr)
        return 0;
    if (backup_label_present())
        return base_backup_init_lsn(*control, map);
    const Lsn redo = control->checkPointCopy.redo;
    if (control->state == DB_SHUTDOWNED)
        return redo + 1;
    if (control->wal_level < WAL_LEVEL_REPLICA || wal_level < WAL_LEVEL_REPLICA)
        return 0;
    StartupScan scan;
    const char* why = scan_wal_at_startup(*control, redo, control->checkPointCopy.ThisTimeLineID, map, &scan);
    if (why != nullptr) {
        map->clear();
        ereport(LOG, (errmsg("ptrack cannot find the end of the WAL after the redo LSN %X/%X: %s",
                             PTRACK_LSN_ARGS(redo), why),
                      errdetail("ptrack_init_lsn() is established when tracking is first used.")));
        return 0;
    }
    log_startup_scan(scan, "since the redo LSN recovery starts from");
    return scan.end + 1;
}

/*
 * The hooks source's loaded map, complete up to its covered LSN: marks what
 * the WAL after it changed (startup_scan.h) and, after a crash, the blocks
 * relation files gained since the save without WAL (file_growth.h: relation
 * extension writes zero pages that get a WAL record only when first used,
 * and their marks were in memory).  nullptr, or why the map cannot be
 * trusted.
 */
const char* rescan_loaded_map(const ControlFileData* control, const MapFileHeader& header, Map* map)
{
    static char text[512];
    StartupScan scan;
    const char* why = scan_wal_at_startup(*control, header.covered_lsn, header.timeline, map, &scan);
    if (why != nullptr) {
        snprintf(text, sizeof(text), "the WAL after it cannot be proven complete: %s", why);
        return text;
    }
    log_startup_scan(scan, "after the map's covered LSN");
    /*
     * After a primary's clean shutdown the map was saved once every backend
     * had exited: no block was added since.  Not so on a standby: its
     * shutdown restartpoint is skipped when no checkpoint record was replayed
     * since the last one, and nothing is saved then, while replay may have
     * added blocks.
     */
    if (control->state == DB_SHUTDOWNED)
        return nullptr;
    /*
     * The end of the valid WAL bounds every change a backup taken before the
     * crash may need listed: its start LSN is at most the WAL flushed then.
     */
    uint64_t blocks = 0;
    if (const char* why_not = growth_mark_since_save(header.covered_lsn, scan.end, map, &blocks)) {
        snprintf(text, sizeof(text), "%s, so the blocks relation files gained without WAL since it was saved "
                 "cannot be found", why_not);
        return text;
    }
    ereport(LOG, (errmsg("ptrack marked %llu blocks that relation files gained since the map was saved",
                         static_cast<unsigned long long>(blocks)),
                  errdetail("Relation extension writes pages with no WAL record until they are used; a "
                            "crash lost their marks.")));
    return nullptr;
}

}  // namespace

void hooks_start_fresh(const ControlFileData* control, SharedState* state, Map* map)
{
    state->init_lsn.store(fresh_map_init_lsn(control, map), Order::kRelaxed); /* no other process yet */
}

const char* hooks_continue_loaded(const ControlFileData* control, const MapFileHeader& header, Map* map)
{
    return rescan_loaded_map(control, header, map);
}

}  // namespace ptrack::pg
