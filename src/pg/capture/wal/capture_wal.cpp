/*
 * capture_wal.cpp -- the wal capture source as the rest of the server sees
 * it (docs/design.md section 4): its parameters, the registration of its
 * background worker, the WAL follower (follower.h and the follower_*.cpp
 * files), and what a backend does before an answer: wait until the
 * follower has applied the WAL written before the call
 * (wait_for_follower()), ask it for a cut (wal_summaries(), the handshake
 * of FollowerProgress in shared_state.h), and fail at once, with the
 * follower's own reason, when it cannot start or cannot write its
 * summaries.  kWalSource, the source's table of operations
 * (capture_source.h), is here.
 *
 * Everything here runs in backends or in the postmaster; the follower's own
 * process runs follower_main.cpp.  The two meet only in shared memory.
 */
extern "C" {
#include "postgres.h"

#include <sys/stat.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
#include "common/file_utils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include "capture/capture_source.h"
#include "capture/file_growth.h"
#include "capture/wal/capture_wal.h"
#include "capture/wal/follower.h"
#include "capture/wal/growth_watch.h"
#include "capture/wal/map_migration.h"
#include "capture/wal/wal_load.h"
#include "persist/summary_io.h"
#include "core/shared_state.h"
#include "compat/compat.h"

namespace ptrack::pg {

using namespace wal_follower;

namespace {

/* ptrack.wal_wait_timeout, in ms: how long the SQL functions wait for the follower. */
int wal_wait_timeout_ms = 60000;

/*
 * The bounds of ptrack.wal_summary_memory (wal_summary_memory_mb, in MB,
 * persist/summary_io.h): the engine's smallest budget, and 1 TB (private memory, taken
 * as the set grows: a sanity cap, well inside a 64-bit address space; a
 * 32-bit size_t holds 1 GB).
 */
constexpr int kMinSummaryMemoryMb = static_cast<int>(ChangeSet::kMinBudget >> 20);
constexpr int kMaxSummaryMemoryMb = sizeof(size_t) >= 8 ? 1024 * 1024 : 1024;

const config_enum_entry wal_reader_options[] = {
    {"xlogreader", wal_follower::kWalReaderXlogreader, false},
    {"inplace", wal_follower::kWalReaderInplace, false},
    {"compare", wal_follower::kWalReaderCompare, false},
    {NULL, 0, false},
};

}  // namespace

void define_wal_follower_gucs()
{
    define_growth_watch_guc();
    DefineCustomIntVariable("ptrack.wal_wait_timeout",
                            "How long ptrack's functions wait for the WAL follower to catch up.",
                            "With WAL capture, ptrack_get_pagemapset() and ptrack_get_change_stat() first wait "
                            "until the follower has applied the WAL flushed (or replayed) before the call.",
                            &wal_wait_timeout_ms, 60000, 100, INT_MAX / 2, PGC_USERSET, GUC_UNIT_MS, NULL, NULL,
                            NULL);
    DefineCustomIntVariable("ptrack.wal_summary_memory",
                            "Memory the WAL follower's exact change set may use before it writes a summary.",
                            "With WAL capture, the follower records every change exactly and writes it as a summary "
                            "file (pg_wal/ptrack) at each save, at checkpoints' redo LSNs, on request, and "
                            "whenever the set reaches this size. A change takes effect with the next summary.",
                            &wal_summary_memory_mb, 64, kMinSummaryMemoryMb, kMaxSummaryMemoryMb, PGC_SIGHUP,
                            GUC_UNIT_MB, NULL, NULL, NULL);
    DefineCustomIntVariable("ptrack.wal_batch_delay",
                            "Pause of the WAL follower after each batch of WAL it applied (developer option).",
                            "Keeps the follower behind the WAL for tests; 0 (the default) in production.",
                            &wal_batch_delay_ms, 0, 0, 60000, PGC_SIGHUP, GUC_UNIT_MS | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
                            NULL, NULL, NULL);
    DefineCustomEnumVariable("ptrack.wal_reader",
                             "The WAL follower's reader on a primary, once it follows the WAL (developer option).",
                             "inplace (the default): ptrack's own reader, which parses records where they lie in "
                             "its reads of the segment files; xlogreader: PostgreSQL's WAL reader; compare: both, "
                             "with an ERROR at the first record they read differently. Start positions, standbys and "
                             "other timelines always use xlogreader.",
                             &wal_follower::wal_reader_mode, wal_follower::kWalReaderInplace, wal_reader_options,
                             PGC_SIGHUP, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
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
    /*
     * Not the insert position itself: at the start of a page it points past
     * the page header, which may not exist yet (after a WAL switch, XLogFlush()
     * of it raises "xlog flush request ... is not satisfied").
     */
    const Lsn end = last_inserted_record_end();
    XLogFlush(end);
    return end;
}

namespace {

TimestampTz read_start_error(char* message, char* hint)
{
    return read_problem(shared->follower_start_error, message, hint);
}

/*
 * After ptrack.wal_wait_timeout: if the follower cannot write its change
 * summaries (it applies no WAL until it can), an ERROR saying so, with the
 * failure and what to do, instead of the timeout's generic one.
 */
void fail_if_summaries_unwritable()
{
    char message[sizeof(FollowerStartError::message)];
    char hint[sizeof(FollowerStartError::hint)];
    const TimestampTz since = read_problem(shared->summary_write_error, message, hint);
    if (since == 0)
        return;
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("ptrack's WAL follower cannot write its change summaries: %s", message),
                    errdetail("Its last attempt failed at %s; it retries, and applies no WAL until a summary is "
                              "written; nothing is lost meanwhile (its replication slot keeps the WAL).",
                              timestamptz_to_str(since)),
                    errhint("%s", hint)));
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
    TimestampTz since = read_start_error(message, hint);
    if (since != 0) {
        snprintf(buf, len, "the WAL follower cannot start (retrying; last error at %s): %s",
                 timestamptz_to_str(since), message);
        return buf;
    }
    since = read_problem(shared->summary_write_error, message, hint);
    if (since == 0)
        return nullptr;
    snprintf(buf, len, "the WAL follower cannot write its change summaries (retrying; last failure at %s): %s",
             timestamptz_to_str(since), message);
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
    /* The walk waits until the follower has applied the WAL up to the target (walk_for_calls()). */
    shared->follower.walk_target.store_max(target);
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
        if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), wal_wait_timeout_ms)) {
            fail_if_summaries_unwritable();
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
        }
        (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
}

/*
 * The answers' source (CaptureSourceOps::summaries).  A cut, after
 * wait_for_follower(), which saw the follower apply the WAL written before
 * the call and finish a size walk started since: this bumps cut_requested;
 * the follower writes what it holds in memory as a summary, publishes
 * summarized_lsn and then cut_done.  The walk dates the growth it found at
 * the WAL position read after it, later than what the follower had applied
 * then; the follower puts it in every cut ending after that date, and in
 * the cut a backend asks for whatever its end (growth_settle_pending()).
 * This side does not rely on that alone: the target is
 * the WAL position now (freshness_target(), flushed: not before the walk's
 * date), and a cut that ends at or before it is asked for once more when
 * the follower has applied that far, so that summarized_lsn is past every
 * change made before the call by the files' own rule ([start, end) holds
 * what was recorded below end).  Same timeout and errors as
 * wait_for_follower().
 */
bool wal_summaries(bool cut, Lsn* summarized)
{
    FollowerProgress& f = shared->follower;
    if (!cut) {
        *summarized = f.summarized_lsn.load(Order::kAcquire);
        return true;
    }
    const Lsn target = freshness_target();
    uint64_t requested = f.cut_requested.add(1, Order::kAcqRel);
    const TimestampTz start = GetCurrentTimestamp();
    for (;;) {
        if (f.cut_done.load(Order::kAcquire) >= requested) {
            const Lsn now = f.summarized_lsn.load(Order::kAcquire);
            /* 0: no summary vouches for anything yet, and a cut cannot change that (summary_scan() says so). */
            if (now > target || now == 0) {
                *summarized = now;
                return true;
            }
            /* Once the follower has applied past the target, the next cut ends past it: one more request. */
            if (f.applied_lsn.load(Order::kAcquire) >= target)
                requested = f.cut_requested.add(1, Order::kAcqRel);
        }
        if (void* latch = f.latch.load(Order::kAcquire))
            SetLatch(static_cast<Latch*>(latch));
        fail_if_follower_cannot_start();
        if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), wal_wait_timeout_ms)) {
            fail_if_summaries_unwritable();
            const Lsn summarized_now = f.summarized_lsn.load(Order::kAcquire);
            ereport(ERROR,
                    (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                     errmsg("ptrack's WAL follower has not written its change summary within ptrack.wal_wait_timeout "
                            "(%d ms)",
                            wal_wait_timeout_ms),
                     errdetail("The newest summary ends at %X/%X; the answer needs one past %X/%X. The follower has "
                               "applied the WAL up to %X/%X.",
                               PTRACK_LSN_ARGS(summarized_now), PTRACK_LSN_ARGS(target),
                               PTRACK_LSN_ARGS(f.applied_lsn.load(Order::kAcquire))),
                     errhint("Check the server log for errors of the \"ptrack WAL follower\" process, or raise "
                             "ptrack.wal_wait_timeout.")));
        }
        (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
}

constexpr CaptureSourceOps kWalSource = [] {
    CaptureSourceOps ops{};
    ops.name = "wal";
    ops.persistence.id = CaptureSourceId::kWal;
    ops.persistence.files_dir = kSummaryDir; /* next to the summaries (persist/state_files.h) */
    ops.persistence.fresh_init_detail = "ptrack_init_lsn() is set where the WAL follower starts reading.";
    ops.persistence.save_failure_detail =
        "Backups are not affected yet: the changes are tracked in memory, and the WAL since ptrack's last successful "
        "save is kept (replication slot \"ptrack_wal_follower\") so that tracking survives a restart; pg_wal grows "
        "until a save succeeds. The WAL follower retries with a growing pause.";
    ops.persistence.save_failure_hint =
        "Make pg_wal/ptrack and ptrack's files in it (ptrack.map*, ptrack.sizes*, the change summaries) writable "
        "by the server's user, and free disk space.";
    ops.persistence.before_load = wal_before_load;
    ops.persistence.start_fresh = wal_start_fresh;
    ops.persistence.continue_loaded = wal_continue_loaded;
    ops.persistence.marks_map = [] { return false; };
    ops.persistence.migrate_loaded = wal_migrate_loaded;
    ops.init_lsn_on_first_use = false;
    ops.install = register_wal_follower;
    ops.drops_follower_slot = nullptr; /* the follower's own slot */
    ops.save_prepare = wal_save_prepare;
    ops.save_covered_lsn = wal_save_covered_lsn;
    ops.save_sizes = [](Lsn covered) { return growth_prepare_save(covered); };
    ops.save_point = wal_save_point;
    ops.save_done = wal_save_done;
    ops.wait_until_fresh = wait_for_follower;
    ops.summaries = wal_summaries;
    ops.wait_for_marks = wait_for_follower;
    ops.verify_pauses_first = false;
    ops.not_running = wal_not_running;
    ops.status = wal_status;
    return ops;
}();
static_assert(source_ops_complete(kWalSource), "every entry of the WAL follower's table is set");

}  // namespace ptrack::pg
