/*
 * follower_main.cpp -- the WAL follower process: its entry point
 * (ptrack_wal_follower_main(), found by name by the postmaster), its main
 * loop (follow()), and what it does on an ERROR and on SIGTERM.
 *
 * Each turn of the loop: obey a stop request; establish the start if not
 * done (follower_slot_start.cpp); finish a held step on the summary files
 * or a cut waiting to be written before anything else (the slot keeps the
 * WAL meanwhile); note the latest checkpoint's redo LSN; apply a batch of
 * records (follower_read.cpp); drain the file watch's events; serve the
 * backends' requests for a walk and a cut; cut a full set; save when a
 * checkpoint record was applied (at most once a second); mark a summary a
 * redo LSN was learnt at the end of; run a retention pass; sleep when idle.
 *
 * Errors: the main loop catches a PostgreSQL ERROR (sigsetjmp, as every
 * auxiliary process does), reports it, frees what the attempt allocated and
 * starts over after a pause (1 s, doubling up to 30 s): a persistent error
 * (no free replication slot, max_replication_slots) costs two log lines per
 * pause, never a spin.  An ERROR while reading the WAL restarts tracking,
 * since changes may be missing.  An ERROR before the start is established
 * is published (FollowerStartError, shared_state.h): ptrack_status() shows
 * it as off_reason, and the SQL functions fail at once with it; one raised
 * half-way through establishing it makes the whole start run again.  So is
 * the reason the summaries are held (their directory unusable): the
 * follower then applies nothing until they can be kept.  SIGTERM (shutdown,
 * or the checkpointer releasing the slot) is obeyed at the top of every
 * loop and after every ERROR, before anything is retried: the follower
 * saves what it applied and exits.  No C++ object with a destructor lives
 * in these frames.
 */
extern "C" {
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "storage/condition_variable.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include "capture/capture.h"
#include "capture/file_growth.h"
#include "capture/wal/capture_wal.h"
#include "capture/wal/follower.h"
#include "capture/wal/growth_watch.h"
#include "capture/wal_archive.h"
#include "persist/summary_io.h"
#include "compat/compat.h"

namespace ptrack::pg::wal_follower {

namespace {

/*
 * A save (after a checkpoint record) comes at most this often, in ms: a
 * storm of checkpoints (hundreds a second) would otherwise cost a walk and
 * a map flush each and leave the follower behind the WAL.
 * A later save only keeps the WAL a little longer (the slot advances at
 * each save) and a restarted follower reads a little more again.
 */
constexpr int kMinSaveIntervalMs = 1000;

/*
 * How long the follower sleeps when it has read all the WAL there is, unless
 * woken (ms).  A backend that needs it caught up sets its latch
 * (wait_for_follower()), so the pause delays no answer; each wake-up costs
 * a context switch and the last page read again, and under a steady load
 * the follower would otherwise wake for every few records.
 */
constexpr long kIdlePollMs = 200;

volatile sig_atomic_t shutdown_requested = false;

/* Seconds the follower waits after an ERROR before it tries again (grows while errors repeat). */
int error_backoff_s = 1;
/*
 * Where the last read error was: the same WAL unreadable again (a fresh
 * start reads from the slot's position, before it, until a checkpoint moves
 * that past it) keeps the back-off growing.
 */
Lsn last_read_error_lsn = InvalidXLogRecPtr;

void follower_sigterm(SIGNAL_ARGS)
{
    const int save_errno = errno;
    shutdown_requested = true;
    SetLatch(MyLatch);
    errno = save_errno;
}

/*
 * Publishes `edata`, an ERROR raised before the start was established, as
 * the reason the follower cannot start (shared_state.h).
 */
void record_start_error(const ErrorData* edata)
{
    record_start_reason(edata->sqlerrcode, edata->message != NULL ? edata->message : "no message",
                        edata->hint != NULL ? edata->hint : "");
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

/* ptrack.wal_batch_delay (developer option): a pause after a batch, during which nothing is applied. */
void batch_delay()
{
    const TimestampTz began = GetCurrentTimestamp();
    while (wal_batch_delay_ms > 0 && !shutdown_requested &&
           !TimestampDifferenceExceeds(began, GetCurrentTimestamp(), wal_batch_delay_ms))
        sleep_until_woken();
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

/*
 * The walk the calls waiting in wait_for_follower() asked for, once the
 * follower has applied the WAL inserted before each of them
 * (FollowerProgress::walk_target).  A record may lower a remembered size
 * (a truncation, a drop: growth_truncated()), and a file truncated by it
 * and grown again without WAL before the call shows that growth only to a
 * walk made after the record was applied: a walk made earlier in the same
 * call (the follower applies at most 1000 records between two looks at the
 * requests) would see the regrown file against the size from before the
 * truncation and find nothing.  The walk is watched when the file watch vouches for
 * the files it does not look at (growth_watch.h), else full.
 */
void walk_for_calls()
{
    const uint64_t requested = shared->follower.walk_requested.load(Order::kAcquire);
    if (requested == shared->follower.walk_done.load(Order::kAcquire))
        return;
    /* Loaded after `requested`: no smaller than the target of any request it counts. */
    const Lsn needed = shared->follower.walk_target.load(Order::kAcquire);
    if (shared->follower.applied_lsn.load(Order::kAcquire) < needed)
        return;
    (void) watch_walk_for_call();
    publish(&shared->follower.walk_done, requested);
}

void follow()
{
    sigjmp_buf local_sigjmp_buf;
    if (sigsetjmp(local_sigjmp_buf, 1) != 0) {
        error_context_stack = NULL;
        HOLD_INTERRUPTS();
        EmitErrorReport();
        /* Half established (the summaries not set up, say): not started, it is all done again. */
        if (follower.establishing) {
            follower.establishing = false;
            follower.started = false;
        }
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
         * would spin on a persistent error).  An ERROR the stop caused (a shutdown
         * kills a running restore_command with the follower's process group,
         * wal_archive.h) is no reason to restart tracking: exit_follower()
         * saves what was applied, and the next start resumes there.
         */
        if (shutdown_requested)
            exit_follower();
        if (was_reading && follower.started) {
            const Lsn lost_from = follower.next;
            restart_after_read_error();
            if (lost_from != last_read_error_lsn)
                error_backoff_s = 1;
            last_read_error_lsn = lost_from;
        }
        /*
         * Never spin on a persistent error (1 s, doubling up to 30 s; barriers
         * absorbed while waiting).  By the clock: a backend waiting for the
         * follower sets its latch, which ends each sleep early.
         */
        const TimestampTz resume_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), error_backoff_s * 1000L);
        while (!shutdown_requested && GetCurrentTimestamp() < resume_at)
            sleep_until_woken();
        error_backoff_s = Min(error_backoff_s * 2, 30);
    }
    PG_exception_stack = &local_sigjmp_buf;

    for (;;) {
        if (shutdown_requested)
            exit_follower();
        if (!follower.started) {
            follower.establishing = true;
            establish_start();
            follower.establishing = false;
            if (!summaries_held())
                clear_start_error(); /* else the reason stays until the summaries can be kept */
            publish(&shared->follower.applied_lsn, follower.next);
            error_backoff_s = 1;
        }
        /* Summaries that cannot be kept come first: nothing is applied, cut or saved until they can. */
        if (summaries_held() && !retry_held_step()) {
            sleep_until_woken();
            continue;
        }
        /* A cut waiting to be written comes first: no WAL is applied until it is (the slot keeps it). */
        if (summaries.cut.at != 0 && !retry_pending_cut()) {
            sleep_until_woken();
            continue;
        }
        /* On a primary the follower usually learns a checkpoint's redo LSN before it reaches it. */
        if (!RecoveryInProgress() && note_redo(GetRedoRecPtr()))
            continue;
        /* A backend's request for a cut, seen before this batch (shared_state.h). */
        const uint64_t cut_requested = shared->follower.cut_requested.load(Order::kAcquire);
        const bool cut_wanted = cut_requested != shared->follower.cut_done.load(Order::kAcquire);
        follower.reading = true;
        const int applied = apply_available(1000);
        follower.reading = false;
        if (applied > 0 && wal_batch_delay_ms > 0)
            batch_delay();
        /* The file watch's events, read often so that its queue seldom overflows (growth_watch.h). */
        watch_drain();
        if (cut_wanted && follower.at_end && summaries.cut.at == 0) {
            /*
             * Caught up with the WAL written before the request, and the
             * growth of a walk that started after every walk request made
             * before it: a backend asks for a walk (wait_for_follower())
             * before it asks for a cut, so once walk_done reaches the walk
             * requests seen now, the growth found since the backend's call
             * began is in the set already (record_walk_growth()) and no
             * second walk is needed.
             */
            walk_for_calls();
            if (cut_on_request())
                publish(&shared->follower.cut_done, cut_requested);
        }
        walk_for_calls();
        cut_when_full();
        if (follower.save_due && (follower.save_backoff_s == 0 || GetCurrentTimestamp() >= follower.save_retry_at) &&
            TimestampDifferenceExceeds(follower.saved_at, GetCurrentTimestamp(), kMinSaveIntervalMs))
            save_now();
        mark_plain_summary();
        /* Expired and combinable summaries (a few files' work at most; nothing when nothing is new). */
        summary_retention_pass();
        /* At the end of the WAL available, wait for more rather than read again at once for a few records. */
        if ((applied == 0 || follower.at_end) && summaries.cut.at == 0)
            sleep_until_woken();
        else
            CHECK_FOR_INTERRUPTS(); /* more WAL, or a cut to write first */
    }
}

/* ptrack_status() shows no follower PID once it has exited, however it exits; nobody sets its latch. */
void clear_follower_pid(int, Datum)
{
    shared->follower.pid.store(0, Order::kRelease);
    /* The latch is in this process's PGPROC, which another process gets next: waiters must not set it. */
    shared->follower.latch.store(nullptr, Order::kRelease);
}

}  // namespace

}  // namespace ptrack::pg::wal_follower

using namespace ptrack::pg;
using namespace ptrack::pg::wal_follower;
using ptrack::Order;

void ptrack_wal_follower_main(Datum)
{
    pqsignal(SIGTERM, follower_sigterm);
    archive_stop_waiting_on(&shutdown_requested);
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    /* A cancel must not abort a read (that would restart tracking); only SIGTERM stops the follower. */
    pqsignal(SIGINT, SIG_IGN);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(NULL, NULL, 0);
    follower.cxt = AllocSetContextCreate(TopMemoryContext, "ptrack WAL follower", ALLOCSET_DEFAULT_SIZES);
    growth_create();
    watch_create();
    /* Private memory (malloc), no destructor: never a C++ object across an ereport. */
    build_set();
    summaries.set_start = UINT64_MAX; /* nothing is recorded until the start is established */
    growth_set_recorder(record_walk_growth);
    growth_set_marks_map(false); /* the map keeps only the resume point (capture_source.h) */
    follower.next = InvalidXLogRecPtr;
    publish(&shared->follower.applied_lsn, 0);
    shared->follower.latch.store(static_cast<void*>(MyLatch), Order::kRelease);
    shared->follower.pid.store(static_cast<int32_t>(MyProcPid), Order::kRelease);
    before_shmem_exit(clear_follower_pid, 0);
    follow();
}
