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
 * Two readers feed the same loop body (apply_record()) with the same
 * record view (wal_record_view.h).  In the steady state of a primary (its
 * insert timeline, follower.next the end of a record applied) the in-place
 * reader (inplace_reader.h) reads the segment files below the flush
 * position, unless ptrack.wal_reader = xlogreader; everything else, and any
 * record the in-place reader does not handle, goes through xlogreader,
 * from that record on.  ptrack.wal_reader = compare reads every record of
 * the steady state with both and raises an ERROR at the first difference.
 *
 * An ERROR here means WAL could not be read: the main loop
 * (follower_main.cpp) restarts tracking where its slot keeps the WAL.
 */
extern "C" {
#include "postgres.h"

#include "access/rmgr.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "catalog/pg_control.h"
#include "utils/timestamp.h"
}

#include "capture/capture.h"
#include "capture/file_growth.h"
#include "capture/wal/follower.h"
#include "capture/wal/growth_watch.h"
#include "capture/wal/inplace_reader.h"
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

bool is_checkpoint_record(const WalRecordView& record)
{
    if (record.rmid != RM_XLOG_ID)
        return false;
    const uint8 info = record.info & ~XLR_INFO_MASK;
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

/* The record being applied: one view, filled by either reader (no C++ object with a destructor in the loop). */
WalRecordView record_view;
/* In compare mode: xlogreader's view of the same record. */
WalRecordView compared_view;

/*
 * Applies `record`, read from a segment file of timeline `tli`: its changes
 * go to the set, and the follower moves past it.  False if it is not
 * applied because a cut must be written first (the record is read again
 * after it).
 */
bool apply_record(const WalRecordView& record, TimeLineID tli)
{
    /* A checkpoint's redo LSN reached: the summary ends there, before this record if it ends at or after it. */
    if (checkpoint_redo_record(record.rmid, record.info) && note_redo(record.start))
        return false;
    if (cut_before_record(record.end))
        return false;
    summaries.refused = false;
    summaries.cut_soon = false;
    summaries.gap_count = 0;
    if (summaries.scan_tli != 0)
        guard_scan_chain(record.end, tli);
    if (const char* reason = capture_wal_record(record, follower_sink)) {
        restart_tracking_at(record.end, reason);
        summaries_after_restart(record.end);
    }
    if (is_checkpoint_record(record))
        follower.save_due = true;
    follower.next = record.end;
    follower.next_is_record_end = true;
    summaries.last_start = record.start;
    summaries.last_end = record.end;
    publish(&shared->follower.applied_lsn, follower.next);
    cut_after_record();
    return true;
}

/*
 * The follower's steady state, where the in-place reader serves
 * (inplace_reader.h): a primary, its insert timeline, follower.next the end
 * of the record that begins at summaries.last_start.  Everything else (a
 * standby, recovery, a historical timeline, a start position, the record
 * before one) is xlogreader's.  *limit: the WAL flushed, *tli: the timeline.
 */
bool inplace_serves(Lsn* limit, TimeLineID* tli)
{
    if (wal_reader_mode == kWalReaderXlogreader || RecoveryInProgress())
        return false;
    if (!follower.next_is_record_end || follower.read_record_ending_at_next || summaries.scan_tli != 0 ||
        summaries.last_start == InvalidXLogRecPtr || summaries.last_end != follower.next)
        return false;
    *limit = GetFlushRecPtr(tli);
    return true;
}

/*
 * ptrack.wal_reader = compare: xlogreader reads the record the in-place
 * reader just read (it stands at the record before), and the two views must
 * be equal; an ERROR names the record and the first difference.
 */
void compare_with_xlogreader(const WalRecordView& record)
{
    char* errormsg = NULL;
    if (XLogReadRecord(follower.reader, &errormsg) == NULL)
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("ptrack's WAL readers differ at %X/%X: xlogreader could not read the record the "
                               "in-place reader read: %s",
                               PTRACK_LSN_ARGS(record.start),
                               errormsg != NULL ? errormsg
                                                : (follower.page->end_of_wal ? "end of WAL" : "no reason given"))));
    view_of_reader(follower.reader, &compared_view);
    char difference[256];
    if (describe_view_difference(record, compared_view, difference, sizeof(difference)))
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("ptrack's WAL readers differ at %X/%X: in-place %s (xlogreader second)",
                               PTRACK_LSN_ARGS(record.start), difference)));
}

/*
 * Applies up to `budget` records with the in-place reader, from
 * follower.next below `limit` on timeline `tli`; returns how many.  Stops
 * at the end of the WAL flushed (follower.at_end), before a cut, or at a
 * record the reader does not handle (*fall_back: xlogreader reads on from
 * follower.next, that record).
 */
int apply_in_place(int budget, Lsn limit, TimeLineID tli, bool* fall_back)
{
    const bool compare = wal_reader_mode == kWalReaderCompare;
    inplace_begin(follower.next, summaries.last_start, tli, GetSystemIdentifier(), static_cast<uint32>(wal_segment_size));
    if (compare) {
        follower.page->end_of_wal = false;
        XLogBeginRead(follower.reader, follower.next);
    }
    int applied = 0;
    while (applied < budget && summaries.cut.at == 0 && !summaries_held()) {
        const InplaceRead read = inplace_read(limit, &record_view);
        if (read == InplaceRead::kEnd) {
            /* More may have been flushed while this batch ran: read on before sleeping. */
            const Lsn flushed = GetFlushRecPtr(NULL);
            if (flushed > limit) {
                limit = flushed;
                continue;
            }
            publish_caught_up(tli);
            follower.at_end = true;
            break;
        }
        if (read == InplaceRead::kNotHandled) {
            /* A segment file that could not be read is worth a LOG: xlogreader's read of it may fail too. */
            ereport(compare || inplace_read_failed() ? LOG : DEBUG1,
                    (errmsg("ptrack reads the WAL from %X/%X with xlogreader: the in-place reader does not handle "
                            "it (%s)",
                            PTRACK_LSN_ARGS(follower.next), inplace_why())));
            *fall_back = true;
            break;
        }
        if (compare)
            compare_with_xlogreader(record_view);
        if (!apply_record(record_view, tli))
            break;
        ++applied;
    }
    if (compare && applied > 0)
        ereport(LOG, (errmsg("ptrack read %d WAL records in place, equal to xlogreader's, up to %X/%X", applied,
                             PTRACK_LSN_ARGS(follower.next))));
    return applied;
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
    int applied = 0;
    Lsn limit = InvalidXLogRecPtr;
    TimeLineID tli = 0;
    if (inplace_serves(&limit, &tli)) {
        bool fall_back = false;
        applied = apply_in_place(budget, limit, tli, &fall_back);
        if (!fall_back)
            return applied;
        follower.page->end_of_wal = false;
    }
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
        view_of_reader(reader, &record_view);
        if (!apply_record(record_view, reader->seg.ws_tli))
            break;
        ++applied;
    }
    return applied;
}

}  // namespace ptrack::pg::wal_follower
