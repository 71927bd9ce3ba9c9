/*
 * follower_read.cpp -- the WAL follower's reading loop: the records
 * available from follower.next, applied in batches (apply_available()).
 * Each record is first checked against the cut decisions (a checkpoint's
 * redo LSN reached: follower_cuts.cpp), then its changes go to the change
 * set and the file growth watch through FollowerSink (the record decoding
 * itself is wal_records.cpp's), then the follower moves past it.  The first
 * read of a start position finds the first record there, and, for a
 * catch-up from a base backup's redo LSN, the record ending exactly at it.
 *
 * An ERROR here means WAL could not be read: the main loop
 * (follower_main.cpp) restarts tracking where its slot keeps the WAL.
 */
extern "C" {
#include "postgres.h"

#include "access/rmgr.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "catalog/pg_control.h"
#include "utils/timestamp.h"
}

#include "capture/capture.h"
#include "capture/file_growth.h"
#include "capture/wal/follower.h"
#include "capture/wal/growth_watch.h"
#include "capture/wal_records.h"
#include "compat/compat.h"

namespace ptrack::pg::wal_follower {

namespace {

/*
 * The follower's changes go to the file growth watch and, for records
 * ending at or after set_start, to the change set.
 */
class FollowerSink final : public WalChangeSink {
public:
    void block(const RelFork& rel, BlockNumber block, Lsn lsn, bool referenced) noexcept override
    {
        const bool record = lsn >= summaries.set_start;
        /* A named block existed before the record: date the extension of those before it. */
        if (referenced) {
            const BlockNumber gap = growth_block_referenced(rel, block, lsn);
            if (gap < block) {
                if (record && summaries.gap_count < lengthof(summaries.gaps))
                    summaries.gaps[summaries.gap_count++] = {rel, gap, block};
                else if (record)
                    summaries.refused = true; /* never: one per block reference; re-read it whole */
                /*
                 * Before set_start too: a restored standby reads again the
                 * WAL whose summaries the startup scan wrote
                 * (summaries_continue_scan()), which dated no extension; the
                 * growth watch now knows these blocks, so no walk will find
                 * them.  The set holds them, later than they came: safe.
                 */
                add_block_range(rel, gap, block);
            }
        }
        if (record)
            note_add(summaries.set->add_block(rel, block));
    }
    void relation_limit(const RelFork& rel, BlockNumber limit, Lsn lsn) noexcept override
    {
        /*
         * Regrowth past the cut must show as growth (file_growth.h; a lookup,
         * never an allocation).  For a file created or dropped (limit 0) that
         * is enough: every block it gets afterwards is either named by a
         * record or found by a walk as growth from size 0, each marked no
         * earlier than it was added.
         */
        growth_truncated(rel, limit);
        watch_note_lowered(rel, limit); /* the next walk looks at the file again, as a full walk would */
        if (lsn >= summaries.set_start)
            note_add(summaries.set->add_limit(rel, limit));
    }
    void database(uint32_t spc, uint32_t db, Lsn lsn) noexcept override
    {
        growth_database_replaced(spc, db);
        watch_note_database(spc, db);
        if (lsn >= summaries.set_start)
            note_add(summaries.set->add_database(spc, db));
    }
};
FollowerSink follower_sink;

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

}  // namespace

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
    follower.at_end = false;
    /* A start position (a redo LSN, a saved covered LSN) is looked up once; after that, reading goes on. */
    Lsn first = follower.next;
    if (!follower.next_is_record_end) {
        first = XLogFindNextRecord(reader, follower.next);
        if (first == InvalidXLogRecPtr) {
            if (follower.page->end_of_wal) {
                publish_caught_up(reader->currTLI);
                follower.at_end = true;
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
                follower.at_end = true;
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
    while (applied < budget && summaries.cut.at == 0 && !summaries_held()) {
        char* errormsg = NULL;
        if (XLogReadRecord(reader, &errormsg) == NULL) {
            if (follower.page->end_of_wal) {
                publish_caught_up(reader->currTLI);
                follower.at_end = true;
                break;
            }
            ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                            errmsg("ptrack could not read the WAL at %X/%X: %s", PTRACK_LSN_ARGS(reader->EndRecPtr),
                                   errormsg != NULL ? errormsg : "no reason given")));
        }
        /* A checkpoint's redo LSN reached: the summary ends there, before this record if it ends at or after it. */
        if (checkpoint_redo_record(reader) && note_redo(reader->ReadRecPtr))
            break;
        if (cut_before_record(reader->EndRecPtr))
            break;
        summaries.refused = false;
        summaries.cut_soon = false;
        summaries.gap_count = 0;
        if (summaries.scan_tli != 0)
            guard_scan_chain(reader);
        if (const char* reason = capture_wal_record(reader, follower_sink)) {
            restart_tracking_at(reader->EndRecPtr, reason);
            summaries_after_restart(reader->EndRecPtr);
        }
        if (is_checkpoint_record(reader))
            follower.save_due = true;
        follower.next = reader->EndRecPtr;
        follower.next_is_record_end = true;
        summaries.last_start = reader->ReadRecPtr;
        summaries.last_end = reader->EndRecPtr;
        publish(&shared->follower.applied_lsn, follower.next);
        ++applied;
        cut_after_record();
    }
    return applied;
}

}  // namespace ptrack::pg::wal_follower
