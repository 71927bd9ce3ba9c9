/*
 * status.cpp -- ptrack_status(): one row a monitoring system can poll, and
 * the reason tracking is off (docs/design.md section 6.1).
 *
 * It exists because a DBA must be able to see that tracking works without
 * reading the server log: which capture source runs, how full the map is
 * (and so how many extra blocks a backup copies), whether the map is being
 * saved, how far the WAL follower is behind, and whether tracking restarted
 * (the next backup is then full).  The references are Oracle's
 * V$BLOCK_CHANGE_TRACKING (status, file, size) and PostgreSQL 17's
 * pg_get_wal_summarizer_state() (timeline, LSN summarized, LSN read, PID).
 *
 * Everything comes from shared memory (shared_state.h) with atomic loads, a
 * sequence lock (the last save) or a spinlock (the last restart): the call
 * never waits for the follower, never walks the data directory, and works
 * with tracking off or the library not preloaded.  The one exception is
 * init_lsn when the change summaries answer (wal capture): it is what
 * ptrack_init_lsn() answers (answer_init_lsn(), from the summaries' file
 * names: one listing of pg_wal/ptrack, which retention keeps short), NULL
 * if that directory cannot be read (ptrack_init_lsn() fails then too).
 * The share of map slots in use is sampled (sampled_fill()), so the call
 * stays cheap on a 1 GB map; NULL, with its false positive rate, when the
 * running source marks no map (wal capture), and map_size is then the few
 * KB that map takes.
 *
 * The install script calls it once: during CREATE EXTENSION or ALTER
 * EXTENSION UPDATE it warns when tracking is off, with how to turn it on.
 *
 * C-style frames only (boundary.h): no object with a destructor.
 */
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(ptrack_status);
}

#include "core/boundary.h"
#include "capture/capture_source.h"
#include "core/shared_state.h"
#include "persist/map_persistence.h"
#include "persist/summary_io.h"
#include "sql/answer_start.h"

namespace ptrack::pg {

namespace {

PTRACK_ENGINE_NOEXCEPT(&Map::slots, &load_lsn);
PTRACK_FRAME_SAFE(SourceStatus);

/* At most this many 64-byte lines are read to estimate the fill: 4 MB, 524288 slots. */
constexpr uint64_t kFillSampleLines = 65536;

/*
 * The share of block slots that hold a mark (any LSN): every line when the
 * map has at most kFillSampleLines of them (maps up to ~4 MB), else that many
 * lines evenly spaced over the map.  Blocks are placed by hashing, so evenly
 * spaced lines are a fair sample; with 524288 slots the standard error is
 * below 0.07 percentage points.  Range summary slots are not counted.
 */
double sampled_fill()
{
    const uint64_t lines = map.geometry().line_count;
    const uint64_t sample = lines < kFillSampleLines ? lines : kFillSampleLines;
    if (sample == 0)
        return 0.0;
    const uint64_t* slots = map.slots();
    uint64_t used = 0;
    for (uint64_t i = 0; i < sample; ++i) {
        /* lines < 2^40 and i < 2^16: the product fits in 64 bits. */
        const uint64_t line = i * lines / sample;
        for (uint32_t k = 0; k < kSlotsPerLine; ++k)
            used += load_lsn(&slots[line * kSlotsPerLine + k]) != 0;
    }
    return static_cast<double>(used) / static_cast<double>(sample * kSlotsPerLine);
}

/* Why tracking is off, or nullptr when it is on; written into `buf`. */
const char* off_reason(char* buf, size_t len)
{
    if (!preloaded)
        return "ptrack is not in shared_preload_libraries";
    if (shared != nullptr)
        return nullptr;
    if (unknown_setting[0] != '\0')
        snprintf(buf, len, "ptrack.map_size is 0 (the configuration names an unknown parameter \"%s\": misspelt?)",
                 unknown_setting);
    else
        snprintf(buf, len, "ptrack.map_size is 0");
    return buf;
}

/* In CREATE/ALTER EXTENSION: a WARNING that tracking is off, with the fix. */
void warn_tracking_off(const char* reason)
{
    if (!preloaded)
        ereport(WARNING,
                (errmsg("ptrack change tracking is off: %s", reason),
                 errdetail("The functions of the extension raise an error until tracking is on, and no change "
                           "is recorded meanwhile."),
                 errhint("Add ptrack to shared_preload_libraries, set ptrack.map_size (for example 64MB) and "
                         "restart the server.")));
    else
        ereport(WARNING,
                (errmsg("ptrack change tracking is off: %s", reason),
                 errdetail("The functions of the extension raise an error until tracking is on, and no change "
                           "is recorded meanwhile."),
                 errhint("Set ptrack.map_size (for example 64MB) and restart the server.")));
}

enum StatusColumn {
    kCapture,
    kOffReason,
    kMapSize,
    kMapFill,
    kFalsePositiveRate,
    kInitLsn,
    kLastSaveLsn,
    kLastSaveTime,
    kLastSaveBytes,
    kLastSaveMs,
    kLastSaveFull,
    kSaves,
    kFailedSaves,
    kFollowerPid,
    kFollowerTimeline,
    kFollowerLsn,
    kFollowerLagBytes,
    kFollowerLagSeconds,
    kRestarts,
    kLastRestartTime,
    kLastRestartReason,
    kStatusColumns22, /* the columns of extension 2.2 end here */
    kFollowerSlotReleases = kStatusColumns22,
    kStatusColumns
};

}  // namespace

}  // namespace ptrack::pg

using namespace ptrack::pg;
using ptrack::Order;

extern "C" PGDLLEXPORT Datum ptrack_status(PG_FUNCTION_ARGS)
{
    TupleDesc tupdesc;
    if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("function returning record called in context that cannot accept type record")));
    /* Extension 2.2 (not yet updated) lacks the last column: serve it what it declares. */
    if (tupdesc->natts != kStatusColumns && tupdesc->natts != kStatusColumns22)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("ptrack_status() of the installed extension does not match the loaded library"),
                        errhint("Run ALTER EXTENSION ptrack UPDATE.")));
    tupdesc = BlessTupleDesc(tupdesc);

    Datum values[kStatusColumns];
    bool nulls[kStatusColumns];
    for (int i = 0; i < kStatusColumns; ++i) {
        values[i] = (Datum) 0;
        nulls[i] = true;
    }

    char reason_buf[256];
    const char* reason = off_reason(reason_buf, sizeof(reason_buf));
    if (reason != nullptr && creating_extension)
        warn_tracking_off(reason);

    nulls[kCapture] = false;
    values[kCapture] = CStringGetTextDatum(reason != nullptr ? "off" : running_source().name);
    /* The shared memory the map takes: ptrack.map_size's, or the few KB of a map that is not marked (wal). */
    nulls[kMapSize] = false;
    values[kMapSize] = Int64GetDatum(reason != nullptr                      ? 0
                                     : persist_source->marks_map()          ? static_cast<int64>(map_size_mb) * 1024 * 1024
                                                                            : static_cast<int64>(shared->geometry.region_bytes()));
    nulls[kRestarts] = false;
    values[kRestarts] = Int64GetDatum(0);
    nulls[kSaves] = false;
    values[kSaves] = Int64GetDatum(0);
    nulls[kFailedSaves] = false;
    values[kFailedSaves] = Int64GetDatum(0);
    if (reason != nullptr) {
        nulls[kOffReason] = false;
        values[kOffReason] = CStringGetTextDatum(reason);
        PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
    }
    /* Tracking is on but does not run: the WAL follower cannot start (capture stays "wal"). */
    const CaptureSourceOps& source = running_source();
    char follower_buf[sizeof(reason_buf) + 128];
    if (const char* not_running = source.not_running(follower_buf, sizeof(follower_buf))) {
        nulls[kOffReason] = false;
        values[kOffReason] = CStringGetTextDatum(not_running);
    }

    /* NULL when the map is not marked (wal capture: the exact summaries answer, docs/design.md section 4.8). */
    if (persist_source->marks_map()) {
        const double fill = sampled_fill();
        nulls[kMapFill] = false;
        values[kMapFill] = Float8GetDatum(fill);
        /* An unchanged block is listed when both its slots hold a mark at or after start_lsn. */
        nulls[kFalsePositiveRate] = false;
        values[kFalsePositiveRate] = Float8GetDatum(fill * fill);
    }

    /*
     * What ptrack_init_lsn() answers (without its wait): with the summaries,
     * their start if later than where tracking (re)started; NULL if their
     * directory cannot be read (the function fails then).
     */
    uint64_t init = shared->init_lsn.load(Order::kAcquire);
    ptrack::Lsn summarized = 0;
    if (init != 0 && source.summaries(false, &summarized)) {
        char dir_problem[256];
        init = summary_dir_problem(dir_problem, sizeof(dir_problem)) != nullptr ? 0 : answer_init_lsn();
    }
    if (init != 0) {
        nulls[kInitLsn] = false;
        values[kInitLsn] = LSNGetDatum(init);
    }

    SaveRecord saves;
    save_stats_read(&saves);
    values[kSaves] = Int64GetDatum(static_cast<int64>(saves.saves));
    values[kFailedSaves] = Int64GetDatum(static_cast<int64>(saves.failures));
    if (saves.saves > 0) {
        nulls[kLastSaveLsn] = nulls[kLastSaveTime] = nulls[kLastSaveBytes] = nulls[kLastSaveMs] =
            nulls[kLastSaveFull] = false;
        values[kLastSaveLsn] = LSNGetDatum(saves.lsn);
        values[kLastSaveTime] = TimestampTzGetDatum(saves.time);
        values[kLastSaveBytes] = Int64GetDatum(static_cast<int64>(saves.bytes));
        values[kLastSaveMs] = Float8GetDatum(static_cast<double>(saves.duration_us) / 1000.0);
        values[kLastSaveFull] = BoolGetDatum(saves.full);
    }

    SourceStatus own{};
    if (source.status(&own)) {
        if (own.follower_pid != 0) {
            nulls[kFollowerPid] = false;
            values[kFollowerPid] = Int32GetDatum(own.follower_pid);
        }
        nulls[kFollowerSlotReleases] = false;
        values[kFollowerSlotReleases] = Int64GetDatum(static_cast<int64>(own.slot_releases));
        if (own.follower_timeline != 0) {
            nulls[kFollowerTimeline] = false;
            values[kFollowerTimeline] = Int32GetDatum(static_cast<int32>(own.follower_timeline));
        }
        if (own.follower_lsn != 0) {
            nulls[kFollowerLsn] = nulls[kFollowerLagBytes] = false;
            values[kFollowerLsn] = LSNGetDatum(own.follower_lsn);
            values[kFollowerLagBytes] = Int64GetDatum(static_cast<int64>(own.follower_lag_bytes));
        }
        if (own.have_lag_seconds) {
            nulls[kFollowerLagSeconds] = false;
            values[kFollowerLagSeconds] = Float8GetDatum(own.follower_lag_seconds);
        }
    }

    values[kRestarts] = Int64GetDatum(static_cast<int64>(shared->restart_count.load(Order::kAcquire)));
    RestartInfo& last = shared->last_restart;
    char restart_reason[sizeof(last.reason)];
    SpinLockAcquire(&last.mutex);
    const TimestampTz restart_time = last.time;
    memcpy(restart_reason, last.reason, sizeof(restart_reason));
    SpinLockRelease(&last.mutex);
    if (restart_time != 0) {
        nulls[kLastRestartTime] = nulls[kLastRestartReason] = false;
        values[kLastRestartTime] = TimestampTzGetDatum(restart_time);
        restart_reason[sizeof(restart_reason) - 1] = '\0';
        values[kLastRestartReason] = CStringGetTextDatum(restart_reason);
    }
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
