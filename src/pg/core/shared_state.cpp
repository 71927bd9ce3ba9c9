/*
 * shared_state.cpp -- the process-wide globals of shared_state.h and their
 * accessors: what every other file of src/pg reads (the map, the shared
 * state, init_lsn(), require_tracking()).
 *
 * They live apart from the module entry point (ptrack.cpp), which only
 * registers things and writes these globals once, in _PG_init and the shared
 * memory startup hook: every file includes and calls downward, to here, and
 * nothing here calls back up (docs/design.md section 7.1).
 */
extern "C" {
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
}

#include "core/shared_state.h"

namespace ptrack::pg {

SharedState* shared = nullptr;
Map map;
LimitTable limits;
bool preloaded = false;
int map_size_mb = 0;
bool use_segment_summary = true;
bool init_lsn_on_first_use = false;
char unknown_setting[128] = "";

Lsn current_mark_lsn_in_recovery() noexcept
{
    /*
     * During recovery the insert position is not yet meaningful; the replay
     * position of the record being applied (set before its redo runs, see
     * ApplyWalRecord() in xlogrecovery.c) bounds every change replayed so far.
     * Recovery can end between the two calls, hence the max.  Once a process
     * has seen recovery over, it never comes back (as RecoveryInProgress()'s
     * own local cache), so later calls take the inline path.
     */
    if (RecoveryInProgress())
        return Max(GetCurrentReplayRecPtr(NULL), GetXLogInsertRecPtr());
    recovery_seen_over = true;
    return GetXLogInsertRecPtr();
}

Lsn last_inserted_record_end() noexcept
{
    const Lsn insert = GetXLogInsertRecPtr();
    const uint64_t in_segment = XLogSegmentOffset(insert, wal_segment_size);
    /* The first page of a segment has the long header; the others the short one. */
    if (in_segment == SizeOfXLogLongPHD)
        return insert - SizeOfXLogLongPHD;
    if (in_segment > XLOG_BLCKSZ && insert % XLOG_BLCKSZ == SizeOfXLogShortPHD)
        return insert - SizeOfXLogShortPHD;
    return insert;
}

Lsn init_lsn() noexcept
{
    const uint64_t lsn = shared->init_lsn.load(Order::kAcquire);
    if (lsn != 0 || !init_lsn_on_first_use)
        return lsn;
    uint64_t expected = 0;
    const uint64_t now = Max(current_mark_lsn(), Lsn{1});
    if (shared->init_lsn.compare_exchange(&expected, now))
        return now;
    return expected; /* another process established it first */
}

void require_tracking()
{
    if (!preloaded)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("ptrack is not loaded through shared_preload_libraries"),
                        errhint("Add ptrack to shared_preload_libraries, set ptrack.map_size and restart "
                                "the server.")));
    if (shared == nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("ptrack change tracking is disabled"),
                        errhint("Set ptrack.map_size to a size in MB greater than 0 and restart the "
                                "server.")));
}

}  // namespace ptrack::pg
