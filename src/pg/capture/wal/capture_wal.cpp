/*
 * capture_wal.cpp -- the WAL follower: the capture source of servers without
 * the core patch's hooks (docs/design.md section 7).
 *
 * A background worker reads the server's WAL with PostgreSQL's xlogreader
 * (the no-wait page reader of xlogutils.c, which also follows timeline
 * switches through the timeline history files) up to the flush position, or
 * the replay position on a hot standby, and marks what each record changed
 * with the record's end LSN (wal_records.cpp).  A record that ends at or
 * after L marks with an LSN >= L, so pagemapset(L) lists its blocks.
 *
 * Its clock and its saves (capture_source.h): the follower itself saves the
 * map, complete up to the end of the last record it applied (covered LSN),
 * after every checkpoint record it reads and when it stops.  The WAL after
 * that point stays on disk through a physical replication slot of its own
 * (kFollowerSlotName), advanced only after the save that covers it, so after
 * a restart or a crash the follower resumes at the saved covered LSN and
 * nothing is lost.  The slot honours max_slot_wal_keep_size: a stalled
 * follower never fills the disk; if its WAL is removed anyway (the slot was
 * invalidated or dropped, pg_resetwal), reading fails and tracking restarts
 * with a WARNING, never silently.
 *
 * A fresh map starts where the follower starts reading (the slot's position:
 * at worst the latest checkpoint's redo LSN), so ptrack_init_lsn() is that
 * position, no later than the start of any backup taken afterwards
 * (wal_load.cpp adds a floor after a clean shutdown), nor earlier than the
 * baseline of file sizes it marks growth from: a walk when it starts, or,
 * in a data directory restored from a base backup, the sizes wal_load.cpp
 * recorded before recovery, which make the map complete from the backup's
 * redo LSN (a FULL backup on a fresh standby is then a valid parent).
 * There the follower reads the WAL from that redo LSN even when its slot
 * starts later (recovery's restartpoints, or its end-of-recovery checkpoint
 * when the follower starts after recovery, removed the WAL before it):
 * segments pg_wal no longer holds come through restore_command
 * (wal_archive.h), and the record that ends exactly at the redo LSN is read
 * too, so ptrack_init_lsn() is the redo LSN itself, the start LSN a backup
 * tool gives the restored backup.
 *
 * Errors: the main loop catches a PostgreSQL ERROR (sigsetjmp, as every
 * auxiliary process does), reports it, frees what the attempt allocated and
 * starts over after a pause (1 s, doubling up to 30 s): a persistent error
 * (no free replication slot, max_replication_slots) costs two log lines per
 * pause, never a spin.  An ERROR while reading the WAL restarts tracking,
 * since marks may be missing.  An ERROR before the start is established is
 * published (FollowerStartError, shared_state.h): ptrack_status() shows it
 * as off_reason, and the SQL functions fail at once with it.  SIGTERM
 * (shutdown, or the checkpointer releasing the slot) is obeyed at the top of
 * every loop and after every ERROR, before anything is retried: the
 * follower saves what it applied and exits.  No C++ object with a
 * destructor lives in these frames.
 */
extern "C" {
#include "postgres.h"

#include <unistd.h>

#include <sys/stat.h>

#include "access/rmgr.h"
#include "access/timeline.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "catalog/pg_control.h"
#include "common/file_utils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include "core/boundary.h"
#include "capture/capture.h"
#include "capture/capture_source.h"
#include "capture/wal/capture_wal.h"
#include "capture/wal/wal_load.h"
#include "capture/file_growth.h"
#include "persist/limit_file_io.h"
#include "persist/map_persistence.h"
#include "core/shared_state.h"
#include "capture/wal_archive.h"
#include "capture/wal_records.h"
#include "compat/compat.h"

namespace ptrack::pg {

namespace {

/* ptrack.wal_wait_timeout, in ms: how long the SQL functions wait for the follower. */
int wal_wait_timeout_ms = 60000;

/* How long the follower sleeps when it has caught up, unless woken (ms). */
constexpr long kIdlePollMs = 50;

volatile sig_atomic_t shutdown_requested = false;

/* Seconds the follower waits after an ERROR before it tries again (grows while errors repeat). */
int error_backoff_s = 1;

void follower_sigterm(SIGNAL_ARGS)
{
    const int save_errno = errno;
    shutdown_requested = true;
    SetLatch(MyLatch);
    errno = save_errno;
}

/* The follower's changes go to the map, the limit table and the file growth watch. */
class FollowerSink final : public WalChangeSink {
public:
    void block(const RelFork& rel, BlockNumber block, Lsn lsn, bool referenced) noexcept override
    {
        capture_block_at(rel, block, lsn);
        /* A named block existed before the record: date the extension of those before it. */
        if (referenced)
            growth_block_referenced(rel, block, lsn);
    }
    void relation_limit(const RelFork& rel, BlockNumber limit, Lsn lsn) noexcept override
    {
        /*
         * Regrowth past the cut must show as growth (file_growth.h; a lookup,
         * never an allocation).  For a file created or dropped (limit 0) that
         * is enough: every block it gets afterwards is either named by a
         * record or found by a walk as growth from size 0, each marked no
         * earlier than it was added; capture_limit() makes no entry for it.
         */
        growth_truncated(rel, limit);
        capture_limit(rel, limit, lsn);
    }
    void database(uint32_t spc, uint32_t db, Lsn lsn) noexcept override
    {
        capture_database(spc, db, lsn);
        growth_database_replaced(spc, db);
    }
};
FollowerSink follower_sink;

/* The follower process's own state. */
struct Follower {
    MemoryContext cxt;                      /* the reader and everything it allocates */
    XLogReaderState* reader;                /* nullptr until positioned */
    ReadLocalXLogPageNoWaitPrivate* page;   /* end_of_wal flag of the no-wait page reader */
    Lsn next;                               /* where reading resumes: every record ending <= next is applied */
    bool started;                           /* the start position and init_lsn are established */
    bool next_is_record_end;                /* next is the end of a record read: XLogBeginRead() can start there */
    bool read_record_ending_at_next;        /* the record ending exactly at next must be read too (a catch-up from
                                               a base backup's redo LSN); nothing is saved until it is */
    bool reading;                           /* an ERROR now means WAL could not be read */
    bool save_due;                          /* a checkpoint record was applied since the last save */
    Lsn saved;                              /* covered LSN of the last save */
    TimestampTz save_retry_at;              /* after a failed save: no new attempt before this */
    int save_backoff_s;                     /* pause after the last failed save (0 after a success) */
};
PTRACK_FRAME_SAFE(Follower, SavePoint);
Follower follower;

void publish(Atomic<uint64_t>* field, Lsn lsn)
{
    field->store(lsn, Order::kRelease);
}

/* --- the replication slot ---------------------------------------------------- */

Lsn slot_restart_lsn()
{
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    const Lsn lsn = slot->data.restart_lsn;
    SpinLockRelease(&slot->mutex);
    return lsn;
}

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

TimeLineID current_timeline()
{
    TimeLineID tli = 0;
    if (RecoveryInProgress())
        (void) GetXLogReplayRecPtr(&tli);
    else
        tli = GetWALInsertionTimeLine();
    return tli;
}

/* --- saves ------------------------------------------------------------------ */

/*
 * The preparation wal_load.cpp made before recovery (shared_state.h) has
 * served: a save now covers the fresh start it made (a restarted follower
 * resumes from the save), or tracking restarted after a read error.
 */
void forget_restored_start()
{
    shared->presized_redo_lsn = 0;
    shared->restored_scan_from = 0;
    shared->restored_scan_end = 0;
    shared->resume_at_scan_end = false;
}

/*
 * The follower's steps of save_map() (capture_source.h): the map complete
 * up to follower.next, with the file sizes its marks were made from
 * (file_growth.h): first a walk, so the map holds the marks of every
 * extension seen.  If the sizes or the limits cannot be written, the
 * previous save stays in force (and the slot keeps its WAL).
 */
void wal_save_prepare()
{
    (void) growth_walk(false);
}

Lsn wal_save_covered_lsn()
{
    return follower.next;
}

SavePoint wal_save_point(Lsn covered)
{
    /* Every mark from now on carries the end of a record after `covered`. */
    return SavePoint{covered, covered};
}

void wal_save_done(Lsn covered)
{
    follower.save_backoff_s = 0;
    forget_restored_start();
    follower.saved = covered;
    follower.save_due = false;
    /* A follower that restarts (its process only) resumes from this save. */
    shared->loaded_covered_lsn = follower.saved;
    shared->loaded_timeline = current_timeline();
    publish(&shared->follower.saved_lsn, follower.saved);
    advance_slot(follower.saved);
}

void save_now()
{
    /* A save now would claim the record ending at follower.next, not read yet (apply_available()). */
    if (follower.read_record_ending_at_next)
        return;
    if (save_map(kWalSource))
        return;
    /*
     * Retry, but not on every loop (20 a second when idle): a full disk
     * or a wrong permission does not go away by itself.  1 s, doubling
     * up to a minute; the WARNINGs are rate-limited too (map_io.h).
     */
    follower.save_backoff_s = follower.save_backoff_s == 0 ? 1 : Min(follower.save_backoff_s * 2, 60);
    follower.save_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), follower.save_backoff_s * 1000L);
}

/* --- where to start ---------------------------------------------------------- */

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

void start_fresh(Lsn start, Lsn floor, bool with_record_ending_at_start = false);

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
            follower.started = true;
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
        walked = presized;
        ereport(LOG, (errmsg("ptrack WAL follower takes the relation file sizes recorded before recovery, "
                             "which started at %X/%X", PTRACK_LSN_ARGS(presized))));
    } else {
        growth_reset();
        walked = growth_walk(true);
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
    ereport(LOG, (errmsg("ptrack WAL follower starts a fresh map at %X/%X; ptrack_init_lsn() is %X/%X",
                         PTRACK_LSN_ARGS(start), PTRACK_LSN_ARGS(init_lsn()))));
}

/* --- reading ------------------------------------------------------------------ */

void open_reader()
{
    XLogReaderRoutine routine{};
    routine.page_read = read_local_xlog_page_no_wait;
    routine.segment_open = archive_segment_open; /* pg_wal, else the archive below its limit (wal_archive.h) */
    routine.segment_close = wal_segment_close;
    MemoryContext old = MemoryContextSwitchTo(follower.cxt);
    follower.page = static_cast<ReadLocalXLogPageNoWaitPrivate*>(palloc0(sizeof(ReadLocalXLogPageNoWaitPrivate)));
    follower.reader = XLogReaderAllocate(wal_segment_size, NULL, &routine, follower.page);
    MemoryContextSwitchTo(old);
    if (follower.reader == NULL)
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory"),
                        errdetail("ptrack could not allocate a WAL reading processor.")));
    /* Never another cluster's WAL, e.g. from a misconfigured archive: long page headers must carry ours. */
    follower.reader->system_identifier = GetSystemIdentifier();
}

/* Frees the reader and its open segment (also after an ERROR). */
void close_reader()
{
    if (follower.reader != NULL && follower.reader->seg.ws_file >= 0)
        close(follower.reader->seg.ws_file);
    follower.reader = NULL;
    follower.page = NULL;
    MemoryContextReset(follower.cxt);
}

bool is_checkpoint_record(XLogReaderState* reader)
{
    if (XLogRecGetRmid(reader) != RM_XLOG_ID)
        return false;
    const uint8 info = XLogRecGetInfo(reader) & ~XLR_INFO_MASK;
    return info == XLOG_CHECKPOINT_ONLINE || info == XLOG_CHECKPOINT_SHUTDOWN || info == XLOG_END_OF_RECOVERY;
}

/*
 * For ptrack_status(): the follower has applied all the WAL available when
 * it looked (the lag in seconds counts from the last such moment), on this
 * timeline.
 */
void publish_caught_up(TimeLineID tli)
{
    shared->follower.caught_up_time.store(static_cast<int64_t>(GetCurrentTimestamp()), Order::kRelease);
    if (tli != 0)
        shared->follower.timeline.store(static_cast<uint32_t>(tli), Order::kRelease);
}

/*
 * The start of the record before the one at `first` if it ends at or before
 * `first` (the record ending exactly at a start LSN, which reading from that
 * LSN skips), else `first`; InvalidXLogRecPtr if the WAL at `first` is not
 * available yet.  Raises an ERROR if the WAL cannot be read: the record's
 * changes must be marked before the start LSN is claimed.
 */
Lsn start_with_previous_record(XLogReaderState* reader, Lsn first)
{
    char* errormsg = NULL;
    XLogBeginRead(reader, first);
    if (XLogReadRecord(reader, &errormsg) == NULL) {
        if (follower.page->end_of_wal)
            return InvalidXLogRecPtr;
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("ptrack could not read the WAL record at %X/%X: %s", PTRACK_LSN_ARGS(first),
                               errormsg != NULL ? errormsg : "no reason given")));
    }
    const Lsn previous = XLogRecGetPrev(reader);
    if (previous == InvalidXLogRecPtr || previous >= first)
        return first;
    XLogBeginRead(reader, previous);
    if (XLogReadRecord(reader, &errormsg) == NULL)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("ptrack could not read the WAL record at %X/%X, before %X/%X: %s",
                               PTRACK_LSN_ARGS(previous), PTRACK_LSN_ARGS(first),
                               errormsg != NULL ? errormsg : "no reason given")));
    return reader->EndRecPtr <= first ? previous : first;
}

/*
 * Applies the records available from follower.next, at most `budget` of
 * them; returns how many.  Raises an ERROR if the WAL cannot be read.
 */
int apply_available(int budget)
{
    if (follower.reader == NULL)
        open_reader();
    XLogReaderState* reader = follower.reader;
    follower.page->end_of_wal = false;
    /* A start position (a redo LSN, a saved covered LSN) is looked up once; after that, reading goes on. */
    Lsn first = follower.next;
    if (!follower.next_is_record_end) {
        first = XLogFindNextRecord(reader, follower.next);
        if (first == InvalidXLogRecPtr) {
            if (follower.page->end_of_wal) {
                publish_caught_up(reader->currTLI);
                return 0;
            }
            ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                            errmsg("ptrack could not find a valid WAL record at or after %X/%X",
                                   PTRACK_LSN_ARGS(follower.next))));
        }
        if (follower.read_record_ending_at_next) {
            const Lsn begin = start_with_previous_record(reader, first);
            if (begin == InvalidXLogRecPtr) {
                publish_caught_up(reader->currTLI);
                return 0;
            }
            /* A record's start is where XLogBeginRead() may begin; saves now claim no more than was read. */
            first = begin;
            follower.next = begin;
            follower.next_is_record_end = true;
            follower.read_record_ending_at_next = false;
        }
    }
    XLogBeginRead(reader, first);
    int applied = 0;
    while (applied < budget) {
        char* errormsg = NULL;
        if (XLogReadRecord(reader, &errormsg) == NULL) {
            if (follower.page->end_of_wal) {
                publish_caught_up(reader->currTLI);
                break;
            }
            ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                            errmsg("ptrack could not read the WAL at %X/%X: %s", PTRACK_LSN_ARGS(reader->EndRecPtr),
                                   errormsg != NULL ? errormsg : "no reason given")));
        }
        if (const char* reason = capture_wal_record(reader, follower_sink))
            restart_tracking_at(reader->EndRecPtr, reason);
        if (is_checkpoint_record(reader))
            follower.save_due = true;
        follower.next = reader->EndRecPtr;
        follower.next_is_record_end = true;
        publish(&shared->follower.applied_lsn, follower.next);
        ++applied;
    }
    return applied;
}

/* --- errors before the start, slot releases, exit ------------------------------- */

/*
 * Publishes `edata`, an ERROR raised before the start was established, as
 * the reason the follower cannot start (shared_state.h).
 */
void record_start_error(const ErrorData* edata)
{
    FollowerStartError& e = shared->follower_start_error;
    const TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&e.mutex);
    e.time = now;
    e.sqlerrcode = edata->sqlerrcode;
    strlcpy(e.message, edata->message != NULL ? edata->message : "no message", sizeof(e.message));
    strlcpy(e.hint, edata->hint != NULL ? edata->hint : "", sizeof(e.hint));
    SpinLockRelease(&e.mutex);
}

/* The follower has started: nothing prevents it any more. */
void clear_start_error()
{
    FollowerStartError& e = shared->follower_start_error;
    SpinLockAcquire(&e.mutex);
    e.time = 0;
    SpinLockRelease(&e.mutex);
}

/*
 * Called on SIGTERM, before the exit's save advances the slot: if the slot
 * holds more WAL than max_slot_wal_keep_size allows, the checkpointer sent
 * the signal to release it (InvalidatePossiblyObsoleteSlot() in slot.c
 * terminates the slot's holder): count it for ptrack_status() and say what
 * follows.  Nothing is lost: the save makes the map complete up to
 * follower.next and the restarted follower resumes there; the slot is
 * invalidated only if that is still beyond the limit.
 */
void note_slot_release()
{
    if (max_slot_wal_keep_size_mb < 0 || MyReplicationSlot == NULL || !follower.started)
        return;
    const Lsn restart = slot_restart_lsn();
    if (restart == InvalidXLogRecPtr)
        return;
    const WALAvailability availability = GetWALAvailability(restart);
    if (availability != WALAVAIL_UNRESERVED && availability != WALAVAIL_REMOVED)
        return;
    (void) shared->follower.slot_releases.add(1, Order::kAcqRel);
    ereport(LOG, (errmsg("ptrack WAL follower stops to release its replication slot \"%s\", which keeps more WAL "
                         "than max_slot_wal_keep_size (%d MB) allows",
                         kFollowerSlotName, max_slot_wal_keep_size_mb),
                  errdetail("It saves the map complete up to %X/%X, moves the slot there and resumes from it; "
                            "the slot is invalidated (and tracking restarts) only if that is still too far "
                            "behind.",
                            PTRACK_LSN_ARGS(follower.next)),
                  errhint("Give max_slot_wal_keep_size at least twice max_wal_size: each release costs a save "
                          "of the whole map.")));
}

/*
 * On SIGTERM: saves what was applied (once: if that save raises an ERROR,
 * the handler comes back here and the process exits without it; the saved
 * map and the slot then still cover everything up to the previous save),
 * releases the slot and exits with code 1 (the postmaster restarts the
 * follower unless the server is shutting down).  Never returns.
 */
void exit_follower()
{
    static bool exit_save_tried = false;
    if (!exit_save_tried) {
        exit_save_tried = true;
        note_slot_release();
        if (follower.started && follower.next > follower.saved)
            save_now();
    }
    if (MyReplicationSlot != NULL)
        ReplicationSlotRelease();
    proc_exit(1);
}

/* --- the main loop -------------------------------------------------------------- */

void sleep_until_woken()
{
    (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kIdlePollMs, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    /*
     * Absorb procsignal barriers: CREATE/DROP DATABASE (and their redo on a
     * standby) wait until every process has released its smgr handles; a
     * follower that only slept would stall them, and on a standby replay.
     */
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
        ConfigReloadPending = false;
        ProcessConfigFile(PGC_SIGHUP);
    }
}

/* After an ERROR while reading: tracking restarts where the slot can keep the WAL from now on. */
void restart_after_read_error()
{
    const Lsn lost_from = follower.next;
    const Lsn start = reserve_wal();
    archive_fallback_until(0); /* from now on the slot keeps what is read */
    char reason[160];
    snprintf(reason, sizeof(reason), "the WAL follower could not read the WAL from %X/%X (see the error above)",
             PTRACK_LSN_ARGS(lost_from));
    /* Truncations in the lost WAL never reached the size table: start it over. */
    forget_restored_start();
    start_fresh(start, lost_from);
    /* After start_fresh(): the WARNING names the LSN ptrack_init_lsn() now returns (>= both). */
    restart_tracking_at(init_lsn(), reason);
    publish(&shared->follower.applied_lsn, follower.next);
}

void follow()
{
    sigjmp_buf local_sigjmp_buf;
    if (sigsetjmp(local_sigjmp_buf, 1) != 0) {
        error_context_stack = NULL;
        HOLD_INTERRUPTS();
        EmitErrorReport();
        if (!follower.started) {
            /* Not in ErrorContext, which FlushErrorState() resets. */
            MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
            ErrorData* edata = CopyErrorData();
            MemoryContextSwitchTo(old);
            record_start_error(edata);
            FreeErrorData(edata);
        }
        /* What an auxiliary process releases after an ERROR: locks, waits, files, scans. */
        LWLockReleaseAll();
        ConditionVariableCancelSleep();
        pgstat_report_wait_end();
        AtEOXact_Files(false);
        AtEOXact_HashTables(false);
        const bool was_reading = follower.reading;
        follower.reading = false;
        close_reader();
        FlushErrorState();
        RESUME_INTERRUPTS();
        /*
         * A stop request is obeyed before anything is retried (retrying first
         * spun on a persistent error).  An ERROR the stop caused (a shutdown
         * kills a running restore_command with the follower's process group,
         * wal_archive.h) is no reason to restart tracking: exit_follower()
         * saves what was applied, and the next start resumes there.
         */
        if (shutdown_requested)
            exit_follower();
        if (was_reading && follower.started) {
            restart_after_read_error();
            error_backoff_s = 1;
        }
        /* Never spin on a persistent error (1 s, doubling up to 30 s; barriers absorbed while waiting). */
        for (int i = 0; i < error_backoff_s * 20 && !shutdown_requested; ++i)
            sleep_until_woken();
        error_backoff_s = Min(error_backoff_s * 2, 30);
    }
    PG_exception_stack = &local_sigjmp_buf;

    for (;;) {
        if (shutdown_requested)
            exit_follower();
        if (!follower.started) {
            establish_start();
            clear_start_error();
            publish(&shared->follower.applied_lsn, follower.next);
            error_backoff_s = 1;
        }
        follower.reading = true;
        const int applied = apply_available(1000);
        follower.reading = false;
        const uint64_t requested = shared->follower.walk_requested.load(Order::kAcquire);
        if (requested != shared->follower.walk_done.load(Order::kAcquire)) {
            (void) growth_walk(false);
            publish(&shared->follower.walk_done, requested);
        }
        if (follower.save_due && (follower.save_backoff_s == 0 || GetCurrentTimestamp() >= follower.save_retry_at))
            save_now();
        if (applied == 0)
            sleep_until_woken();
        else
            CHECK_FOR_INTERRUPTS();
    }
}

}  // namespace

void define_wal_follower_gucs()
{
    DefineCustomIntVariable("ptrack.wal_wait_timeout",
                            "How long ptrack's functions wait for the WAL follower to catch up.",
                            "With WAL capture, ptrack_get_pagemapset() and ptrack_get_change_stat() first wait "
                            "until the follower has applied the WAL flushed (or replayed) before the call.",
                            &wal_wait_timeout_ms, 60000, 100, INT_MAX / 2, PGC_USERSET, GUC_UNIT_MS, NULL, NULL,
                            NULL);
}

void remove_follower_slot(const char* why)
{
    char path[MAXPGPATH];
    snprintf(path, sizeof(path), "pg_replslot/%s", kFollowerSlotName);
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    if (!rmtree(path, true)) {
        ereport(WARNING, (errmsg("ptrack could not remove its replication slot directory \"%s\"", path),
                          errhint("Drop the slot with pg_drop_replication_slot('%s'): it keeps WAL from being "
                                  "recycled.",
                                  kFollowerSlotName)));
        return;
    }
    fsync_fname("pg_replslot", true);
    ereport(LOG, (errmsg("ptrack removed its replication slot \"%s\": %s", kFollowerSlotName, why)));
}

void register_wal_follower()
{
    BackgroundWorker worker;
    memset(&worker, 0, sizeof(worker));
    /* A connection to no database (shared catalogs only): it shows in pg_stat_activity, like other workers. */
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    worker.bgw_start_time = BgWorkerStart_ConsistentState;
    worker.bgw_restart_time = 1;
    snprintf(worker.bgw_library_name, BGW_MAXLEN, "ptrack");
    snprintf(worker.bgw_function_name, BGW_MAXLEN, "ptrack_wal_follower_main");
    snprintf(worker.bgw_name, BGW_MAXLEN, "ptrack WAL follower");
    snprintf(worker.bgw_type, BGW_MAXLEN, "ptrack WAL follower");
    RegisterBackgroundWorker(&worker);
    /*
     * RegisterBackgroundWorker() only LOGs when max_worker_processes is
     * used up, and the server would run without a follower: nothing tracked,
     * and the slot keeping WAL.  Refuse to start instead.
     */
    if (bgworker_is_registered("ptrack", "ptrack_wal_follower_main"))
        return;
    ereport(FATAL, (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                    errmsg("ptrack could not register its WAL follower: max_worker_processes (%d) background "
                           "workers are registered already",
                           max_worker_processes),
                    errhint("Increase max_worker_processes, or set ptrack.map_size = 0 to turn change tracking "
                            "off.")));
}

/*
 * The end of the last WAL record inserted before the call, flushed (primary),
 * or of the last record replayed (standby): what the follower must have
 * applied before an answer.  Not the flush position: the WAL writer flushes
 * whole pages, so the flush position may lie inside a record (one that
 * crosses a page boundary), and the follower, which applies whole records,
 * stops before it.  Nothing else need flush that record soon (a record of a
 * transaction without an xid that aborts, such as the page pruning of a
 * cancelled query, sets no asynchronous-commit LSN): the caller then waited
 * until the next running-transactions record (15 s) had it flushed.  A
 * flush costs one fsync when there is WAL to flush, none otherwise.
 */
Lsn freshness_target()
{
    if (RecoveryInProgress())
        return GetXLogReplayRecPtr(NULL);
    /* The insert position is the start of the next record: a record boundary. */
    Lsn end = GetXLogInsertRecPtr();
    /*
     * At the start of a page, it points past the page header, which may not
     * exist yet (after a WAL switch: XLogFlush() of it raises "xlog flush
     * request ... is not satisfied"); a record that ends at the page
     * boundary ends before the header (its EndRecPtr, as the follower
     * publishes it).
     */
    const uint64_t in_segment = XLogSegmentOffset(end, wal_segment_size);
    if (in_segment == SizeOfXLogLongPHD)
        end -= SizeOfXLogLongPHD;
    else if (end % XLOG_BLCKSZ == SizeOfXLogShortPHD && in_segment > XLOG_BLCKSZ)
        end -= SizeOfXLogShortPHD;
    XLogFlush(end);
    return end;
}

namespace {

/*
 * The reason the follower cannot start (FollowerStartError), copied under
 * its spinlock into `message` and `hint` (sizeof the fields): the time of
 * that ERROR, 0 if none (both left unset then).
 */
TimestampTz read_start_error(char* message, char* hint)
{
    FollowerStartError& e = shared->follower_start_error;
    SpinLockAcquire(&e.mutex);
    const TimestampTz since = e.time;
    memcpy(message, e.message, sizeof(e.message));
    memcpy(hint, e.hint, sizeof(e.hint));
    SpinLockRelease(&e.mutex);
    message[sizeof(e.message) - 1] = '\0';
    hint[sizeof(e.hint) - 1] = '\0';
    return since;
}

/* If the follower is failing to start: an ERROR saying why, with its hint (the follower keeps retrying). */
void fail_if_follower_cannot_start()
{
    char message[sizeof(FollowerStartError::message)];
    char hint[sizeof(FollowerStartError::hint)];
    if (read_start_error(message, hint) == 0)
        return;
    /* The follower's own hint names the fix (ReplicationSlotCreate(): "Free one or increase max_replication_slots."). */
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("ptrack's WAL follower cannot start: %s", message),
                    errdetail("Change tracking is not running. The follower retries at least every 30 s and "
                              "tracking starts once it succeeds (ptrack_status() shows the reason meanwhile)."),
                    hint[0] != '\0' ? errhint("%s", hint)
                                    : errhint("See the errors of the \"ptrack WAL follower\" process in the server "
                                              "log.")));
}

/* ptrack_status(): why the follower cannot start (it keeps retrying), in `buf`; nullptr if nothing stops it. */
const char* wal_not_running(char* buf, size_t len)
{
    char message[sizeof(FollowerStartError::message)];
    char hint[sizeof(FollowerStartError::hint)];
    const TimestampTz since = read_start_error(message, hint);
    if (since == 0)
        return nullptr;
    snprintf(buf, len, "the WAL follower cannot start (retrying; last error at %s): %s", timestamptz_to_str(since),
             message);
    return buf;
}

/* ptrack_status(): the follower's columns, from FollowerProgress (never waits for it). */
bool wal_status(SourceStatus* out)
{
    const FollowerProgress& f = shared->follower;
    out->follower_pid = f.pid.load(Order::kAcquire);
    out->slot_releases = f.slot_releases.load(Order::kAcquire);
    out->follower_timeline = f.timeline.load(Order::kAcquire);
    /* The position the follower aims at first, then where it is: the lag is never negative. */
    const Lsn target = RecoveryInProgress() ? GetXLogReplayRecPtr(NULL) : GetFlushRecPtr(NULL);
    const Lsn applied = f.applied_lsn.load(Order::kAcquire);
    const TimestampTz caught_up = f.caught_up_time.load(Order::kAcquire);
    out->follower_lsn = applied;
    out->have_lag_seconds = false;
    if (applied != 0) {
        const uint64_t lag = target > applied ? target - applied : 0;
        out->follower_lag_bytes = lag;
        if (lag == 0 || caught_up != 0) {
            /* WAL still to apply was written after the follower last had applied everything. */
            const TimestampTz now = GetCurrentTimestamp();
            out->have_lag_seconds = true;
            out->follower_lag_seconds =
                lag == 0 || now <= caught_up ? 0.0 : static_cast<double>(now - caught_up) / USECS_PER_SEC;
        }
    }
    return true;
}

}  // namespace

void wait_for_follower()
{
    fail_if_follower_cannot_start();
    const Lsn target = freshness_target();
    /* A size walk that starts after this point sees every extension made before the call. */
    const uint64_t walk = shared->follower.walk_requested.add(1, Order::kAcqRel);
    const TimestampTz start = GetCurrentTimestamp();
    for (;;) {
        const Lsn applied = shared->follower.applied_lsn.load(Order::kAcquire);
        const Lsn init = shared->init_lsn.load(Order::kAcquire);
        const uint64_t walked = shared->follower.walk_done.load(Order::kAcquire);
        if (init != 0 && applied >= target && walked >= walk)
            return;
        if (void* latch = shared->follower.latch.load(Order::kAcquire))
            SetLatch(static_cast<Latch*>(latch));
        /* A follower (a restarted one too) that fails to start meanwhile: say so now, not after the timeout. */
        fail_if_follower_cannot_start();
        if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), wal_wait_timeout_ms))
            ereport(ERROR,
                    (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                     errmsg("ptrack's WAL follower has not caught up with the WAL within ptrack.wal_wait_timeout "
                            "(%d ms)",
                            wal_wait_timeout_ms),
                     errdetail("It has applied the WAL up to %X/%X; the answer needs %X/%X%s.",
                               PTRACK_LSN_ARGS(applied), PTRACK_LSN_ARGS(target),
                               init == 0 ? ", and it has not started yet" : ""),
                     errhint("Check the server log for errors of the \"ptrack WAL follower\" process, or raise "
                             "ptrack.wal_wait_timeout.")));
        (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
}

const CaptureSourceOps kWalSource = {
    "wal",
    {CaptureSourceId::kWal, "ptrack_init_lsn() is set where the WAL follower starts reading.",
     "Backups are not affected yet: the changes are tracked in memory, and the WAL since ptrack's last successful "
     "save is kept (replication slot \"ptrack_wal_follower\") so that tracking survives a restart; pg_wal grows "
     "until a save succeeds. The WAL follower retries with a growing pause.",
     "Make the data directory and ptrack's files in it (ptrack.map*, ptrack.limits*, ptrack.sizes*) writable by "
     "the server's user, and free disk space.",
     wal_before_load, wal_start_fresh, wal_continue_loaded},
    false,
    register_wal_follower,
    nullptr,
    wal_save_prepare,
    wal_save_covered_lsn,
    [](Lsn covered) { return growth_prepare_save(covered); },
    true,
    wal_save_point,
    wal_save_done,
    wait_for_follower,
    wait_for_follower,
    false,
    wal_not_running,
    wal_status,
};

}  // namespace ptrack::pg

using namespace ptrack::pg;
using ptrack::Order;

/* ptrack_status() shows no follower PID once it has exited, however it exits; nobody sets its latch. */
static void clear_follower_pid(int, Datum)
{
    shared->follower.pid.store(0, Order::kRelease);
    /* The latch is in this process's PGPROC, which another process gets next: waiters must not set it. */
    shared->follower.latch.store(nullptr, Order::kRelease);
}

void ptrack_wal_follower_main(Datum)
{
    pqsignal(SIGTERM, follower_sigterm);
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    /* A cancel must not abort a read (that would restart tracking); only SIGTERM stops the follower. */
    pqsignal(SIGINT, SIG_IGN);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(NULL, NULL, 0);
    follower.cxt = AllocSetContextCreate(TopMemoryContext, "ptrack WAL follower", ALLOCSET_DEFAULT_SIZES);
    growth_create();
    follower.next = InvalidXLogRecPtr;
    publish(&shared->follower.applied_lsn, 0);
    shared->follower.latch.store(static_cast<void*>(MyLatch), Order::kRelease);
    shared->follower.pid.store(static_cast<int32_t>(MyProcPid), Order::kRelease);
    before_shmem_exit(clear_follower_pid, 0);
    follow();
}
