/*
 * follower_slot_start.cpp -- the WAL follower's replication slot
 * (kFollowerSlotName), which keeps the WAL it still needs, and where its
 * reading starts.  A trusted map is resumed at its covered LSN (or at a
 * timeline's branch point before it), with the summaries' chain that ends
 * there; otherwise tracking starts afresh at the slot's position, or, in a
 * data directory restored from a base backup, from what the postmaster
 * prepared before recovery (wal_load.cpp): the sizes recorded then, the
 * WAL it read and summarized, or a catch-up from the backup's redo LSN
 * through restore_command.  ptrack_init_lsn() is established here.
 *
 * A fresh map starts where the follower starts reading (the slot's
 * position: at worst the latest checkpoint's redo LSN), so
 * ptrack_init_lsn() is that position, no later than the start of any backup
 * taken afterwards (wal_load.cpp adds a floor after a clean shutdown), nor
 * earlier than the baseline of file sizes it marks growth from: a walk when
 * it starts, or, in a data directory restored from a base backup, the sizes
 * recorded before recovery, which make the map complete from the backup's
 * redo LSN (a FULL backup on a fresh standby is then a valid parent).
 * There the follower reads the WAL from that redo LSN even when its slot
 * starts later (recovery's restartpoints, or its end-of-recovery checkpoint
 * when the follower starts after recovery, removed the WAL before it):
 * segments pg_wal no longer holds come through restore_command
 * (wal_archive.h), and the record that ends exactly at the redo LSN is read
 * too, so ptrack_init_lsn() is the redo LSN itself, the start LSN a backup
 * tool gives the restored backup.
 */
extern "C" {
#include "postgres.h"

#include "access/timeline.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "replication/slot.h"
#include "storage/spin.h"
}

#include "capture/capture.h"
#include "capture/file_growth.h"
#include "capture/wal/capture_wal.h"
#include "capture/wal/follower.h"
#include "capture/wal/growth_watch.h"
#include "capture/wal_archive.h"
#include "capture/wal_records.h"
#include "compat/compat.h"

namespace ptrack::pg::wal_follower {

namespace {

/* Acquires the follower's slot for the life of the process, creating it if missing. */
void acquire_slot()
{
    if (MyReplicationSlot != NULL)
        return;
    if (SearchNamedReplicationSlot(kFollowerSlotName, true) == NULL) {
        slot_create(kFollowerSlotName);
        ereport(LOG, (errmsg("ptrack created replication slot \"%s\" to keep the WAL its follower needs",
                             kFollowerSlotName)));
    } else {
        slot_acquire(kFollowerSlotName);
    }
}

/*
 * A trusted map is complete up to its covered LSN on the timeline it was
 * saved on.  If this server is now on a later timeline that branched off
 * before that LSN, the WAL after the branch point differs: resume at the
 * branch point instead (re-marking is harmless).  nullptr, or why the map
 * cannot be continued here.
 */
const char* resume_point(Lsn covered, TimeLineID saved_tli, Lsn* out)
{
    *out = covered;
    const TimeLineID tli = current_timeline();
    if (saved_tli == 0 || saved_tli == tli)
        return nullptr;
    List* history = readTimeLineHistory(tli);
    if (!tliInHistory(saved_tli, history)) {
        list_free_deep(history);
        return "the map was saved on a timeline that is not in this server's history";
    }
    const Lsn branch = tliSwitchPoint(saved_tli, history, NULL);
    if (branch < covered)
        *out = branch;
    list_free_deep(history);
    return nullptr;
}

/*
 * A data directory restored from a base backup whose WAL pg_wal no longer
 * holds from the backup's redo LSN (recovery restored it through
 * restore_command, then removed it): where the follower reads from instead
 * of its slot's position `restart`, the redo LSN, with the segments before
 * `restart` coming from the archive (wal_archive.h); 0 when the slot's
 * position does (the startup scan covered the redo LSN and reading goes on
 * where it ends, or nothing was recorded before recovery) or when that WAL
 * cannot be had (logged).  *with_previous: the record ending exactly at the
 * redo LSN must be read too (the startup scan did not).
 */
Lsn catch_up_from_redo(Lsn restart, bool* with_previous)
{
    const Lsn presized = shared->presized_redo_lsn;
    const Lsn scan_from = shared->restored_scan_from;
    const Lsn scan_end = shared->restored_scan_end;
    *with_previous = false;
    if (presized == 0 || presized > restart)
        return 0;
    const bool scanned = scan_end != 0 && scan_from <= presized;
    if (scanned && restart <= scan_end)
        return 0; /* reading from the slot's position goes on from the scan (start_fresh()) */
    if (const char* why = archive_catch_up_blocker(presized, restart)) {
        ereport(LOG, (errmsg("ptrack WAL follower cannot read the WAL since the base backup's redo LSN %X/%X: %s",
                             PTRACK_LSN_ARGS(presized), why),
                      errdetail("ptrack_init_lsn() is established where the WAL follower starts reading.")));
        return 0;
    }
    *with_previous = !scanned;
    return presized;
}

}  // namespace

Lsn slot_restart_lsn()
{
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    const Lsn lsn = slot->data.restart_lsn;
    SpinLockRelease(&slot->mutex);
    return lsn;
}

/* Reserves WAL from the latest redo LSN (the slot holds none: new, invalidated or reset). */
Lsn reserve_wal()
{
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    slot->data.restart_lsn = InvalidXLogRecPtr;
    SpinLockRelease(&slot->mutex);
    ReplicationSlotReserveWal();
    ReplicationSlotMarkDirty();
    ReplicationSlotSave();
    return slot_restart_lsn();
}

/* After a save complete up to `lsn`: the WAL before it may go. */
void advance_slot(Lsn lsn)
{
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    const bool forward = slot->data.restart_lsn != InvalidXLogRecPtr && lsn > slot->data.restart_lsn;
    if (forward)
        slot->data.restart_lsn = lsn;
    SpinLockRelease(&slot->mutex);
    if (!forward)
        return;
    ReplicationSlotMarkDirty();
    ReplicationSlotSave();
    ReplicationSlotsComputeRequiredLSN();
}

/*
 * Establishes where reading starts and ptrack_init_lsn(): at the saved map's
 * covered LSN if the map was trusted, else at the slot's position.
 */
void establish_start()
{
    acquire_slot();
    Lsn restart = slot_restart_lsn();
    const Lsn init = shared->init_lsn.load(Order::kAcquire);
    const Lsn covered = shared->loaded_covered_lsn;
    const char* restart_reason = nullptr;
    if (init != 0 && covered != 0) {
        Lsn start = covered;
        const char* problem = resume_point(covered, shared->loaded_timeline, &start);
        char why[160];
        if (problem == nullptr && !growth_load(covered, why, sizeof(why)))
            problem = reason("no relation file sizes were saved with the map (%s)", why);
        watch_sizes_replaced();
        if (problem == nullptr) {
            if (restart == InvalidXLogRecPtr)
                restart = reserve_wal(); /* keep what is left; reading tells whether the WAL from `start` is there */
            /*
             * Before the slot's position (a catch-up from a base backup's redo
             * LSN that a restart interrupted, a branch point) pg_wal may lack
             * segments that the archive holds (wal_archive.h).
             */
            archive_fallback_until(restart);
            follower.next = start;
            follower.next_is_record_end = false;
            follower.read_record_ending_at_next = false; /* a half-done fresh start before an ERROR may have set it */
            follower.started = true;
            summaries_resume(start, covered);
            ereport(LOG, (errmsg("ptrack WAL follower resumes at %X/%X, where the saved map is complete",
                                 PTRACK_LSN_ARGS(start))));
            return;
        }
        restart_reason = problem; /* said once the fresh map's ptrack_init_lsn() is known */
    }
    if (restart == InvalidXLogRecPtr)
        restart = reserve_wal();
    /*
     * A restored primary's WAL was read before recovery up to the scan's end
     * (wal_load.cpp); read on from there.  That WAL is in the segment of the
     * end-of-recovery checkpoint or just before it: if it is gone after all,
     * reading fails and tracking restarts, never silently.
     */
    const Lsn scan_end = shared->resume_at_scan_end ? shared->restored_scan_end : 0;
    bool with_previous = false;
    const Lsn catch_up = scan_end != 0 && scan_end < restart ? 0 : catch_up_from_redo(restart, &with_previous);
    if (catch_up != 0) {
        archive_fallback_until(restart);
        if (catch_up < restart)
            ereport(LOG, (errmsg("ptrack WAL follower reads the WAL from the base backup's redo LSN %X/%X, before "
                                 "its slot's position %X/%X; what pg_wal no longer holds comes through "
                                 "restore_command",
                                 PTRACK_LSN_ARGS(catch_up), PTRACK_LSN_ARGS(restart))));
        start_fresh(catch_up, shared->fresh_init_floor, with_previous);
    } else {
        start_fresh(scan_end != 0 && scan_end < restart ? scan_end : restart, shared->fresh_init_floor);
    }
    /* The WARNING names the LSN ptrack_init_lsn() now returns, not an earlier one. */
    if (restart_reason != nullptr)
        restart_tracking_at(init_lsn(), restart_reason);
}

/*
 * A fresh map, read from `start` on: extensions are seen from a baseline of
 * sizes on, so ptrack_init_lsn() is no earlier than the LSN of that baseline
 * (the LSN read after a walk, or the redo LSN the sizes recorded before
 * recovery belong to), nor than `floor` (wal_load.cpp; UINT64_MAX: unknown,
 * take the baseline's LSN).  `with_record_ending_at_start`: reading begins
 * with the record that ends exactly at `start`, if any (apply_available()),
 * so `start` itself is proven.
 */
void start_fresh(Lsn start, Lsn floor, bool with_record_ending_at_start)
{
    /*
     * What wal_load.cpp prepared before recovery serves the first fresh
     * start: the sizes, if no WAL between them and `start` goes unread
     * (reading starts before them, or the scan read up to `start`); the
     * scan's range, if reading goes on from its end.  It stays until that
     * start's first save (forget_restored_start()): a follower stopped
     * before it saved anything (a catch-up through the archive takes a
     * while) leaves nothing to resume from, and the next one starts the same
     * way again instead of at its slot's later position.
     */
    const Lsn presized = shared->presized_redo_lsn;
    const Lsn scan_from = shared->restored_scan_from;
    const Lsn scan_end = shared->restored_scan_end;
    /* Reading from `start` skips a record that ends exactly there (wal_records.h). */
    const bool scanned = scan_end != 0 && start <= scan_end;
    const Lsn read_from = with_record_ending_at_start                  ? start
                          : scanned                                    ? Min(start, scan_from)
                          : no_record_ends_at(start, wal_segment_size) ? start
                                                                       : start + 1;
    Lsn walked;
    if (presized != 0 && start <= Max(presized, scanned ? scan_end : 0) && growth_load(presized)) {
        watch_sizes_replaced();
        walked = presized;
        ereport(LOG, (errmsg("ptrack WAL follower takes the relation file sizes recorded before recovery, "
                             "which started at %X/%X", PTRACK_LSN_ARGS(presized))));
    } else {
        growth_reset();
        walked = watch_full_walk(true, "a baseline");
    }
    if (floor == UINT64_MAX)
        floor = walked;
    const Lsn fresh_init = Max(Max(read_from, floor), walked);
    follower.next = start;
    follower.next_is_record_end = false;
    follower.read_record_ending_at_next = with_record_ending_at_start;
    follower.started = true;
    follower.save_due = true; /* a first save makes the fresh map resumable */
    uint64_t expected = 0;
    if (!shared->init_lsn.compare_exchange(&expected, fresh_init))
        shared->init_lsn.store_max(fresh_init); /* a restart already moved it */
    /* Reading from `start` skips a record that ends there, unless it is read first or none can end there. */
    const bool start_claimed = with_record_ending_at_start || no_record_ends_at(start, wal_segment_size);
    const Lsn reads_from = start_claimed ? start : start + 1;
    if (!summaries_continue_scan(Max(fresh_init, init_lsn()), reads_from))
        summaries_start_fresh(Max(Max(fresh_init, init_lsn()), reads_from));
    ereport(LOG, (errmsg("ptrack WAL follower starts a fresh map at %X/%X; ptrack_init_lsn() is %X/%X",
                         PTRACK_LSN_ARGS(start), PTRACK_LSN_ARGS(init_lsn()))));
}

}  // namespace ptrack::pg::wal_follower
