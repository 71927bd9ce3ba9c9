/*
 * follower_cuts.cpp -- where the WAL follower ends a summary (the rules at
 * struct Summaries, follower.h), and the writing of a cut.  A summary ends:
 * at a checkpoint's redo LSN, where a backup may start (learnt before the
 * follower gets there, or where it stands, or too late: note_redo(),
 * cut_before_record()); just past the last record applied, for a map save
 * (cut_for_save()), a backend's request (cut_on_request()) or a full set
 * (cut_after_record(), cut_when_full()), after first ending one at that
 * record's end (cut_at_last_record_end()); at the end of a record an add
 * refused, which is then read again into the new set.  perform_cut()
 * writes the summary and starts the next set; one that cannot be written
 * waits, and no WAL is applied until it is.
 *
 * The decisions themselves are pure and unit-tested in the engine
 * (ptrack/summary_cuts.h): this file asks them with the follower's state
 * (position()) and carries them out.  Every caller (the loop before and
 * after each record, the main loop between batches, the saves) goes
 * through here, since a cut is the one step that writes a file in the
 * middle of the follower's work.
 */
extern "C" {
#include "postgres.h"

#include "utils/timestamp.h"
}

#include "capture/wal/follower.h"
#include "capture/file_growth.h"
#include "capture/wal_records.h"
#include "persist/map_io.h"

namespace ptrack::pg::wal_follower {

namespace {

/* A record read again after a cut: its changes go to the new set only (the map has them). */
class SetOnlySink final : public WalChangeSink {
public:
    void block(const RelFork& rel, BlockNumber block, Lsn, bool) noexcept override
    {
        note_add(summaries.set->add_block(rel, block));
    }
    void relation_limit(const RelFork& rel, BlockNumber limit, Lsn) noexcept override
    {
        note_add(summaries.set->add_limit(rel, limit));
    }
    void database(uint32_t spc, uint32_t db, Lsn) noexcept override
    {
        note_add(summaries.set->add_database(spc, db));
    }
};
SetOnlySink set_only_sink;

/*
 * The same record again, coarse: every change as "every file of its
 * database" (one entry per database the record touches, a few bytes), for a
 * record whose changes do not fit in an empty set (readd_by_database()).
 */
class DatabaseOnlySink final : public WalChangeSink {
public:
    void block(const RelFork& rel, BlockNumber, Lsn, bool) noexcept override
    {
        note_add(summaries.set->add_database(rel.spc_oid, rel.db_oid));
    }
    void relation_limit(const RelFork& rel, BlockNumber, Lsn) noexcept override
    {
        note_add(summaries.set->add_database(rel.spc_oid, rel.db_oid));
    }
    void database(uint32_t spc, uint32_t db, Lsn) noexcept override
    {
        note_add(summaries.set->add_database(spc, db));
    }
};
DatabaseOnlySink database_only_sink;

/*
 * In perform_cut(), the set just emptied and the last record read again
 * into it, refused: its changes alone do not fit in the whole budget (one
 * transaction dropping or truncating tens of thousands of relations).  The
 * set holds nothing but that record
 * (no walk's growth is replayed into it yet), so it is cleared and takes the
 * record again as whole databases: an answer across the record lists every
 * file of those databases (extra blocks, never fewer; the dropped files are
 * gone anyway) instead of the summaries restarting.
 */
void readd_by_database()
{
    summaries.set->clear();
    summaries.refused = false;
    summaries.cut_soon = false;
    WalRecordView view;
    view_of_reader(follower.reader, &view);
    (void) capture_wal_record(view, database_only_sink);
    for (uint32_t i = 0; i < summaries.gap_count; ++i)
        note_add(summaries.set->add_database(summaries.gaps[i].rel.spc_oid, summaries.gaps[i].rel.db_oid));
    if (!summaries.refused)
        ereport(LOG, (errmsg("ptrack recorded the WAL record ending at %X/%X as whole databases: its changes do not "
                             "fit in ptrack.wal_summary_memory (%d MB)",
                             PTRACK_LSN_ARGS(follower.next), wal_summary_memory_mb),
                      errdetail("An incremental backup whose start LSN lies before it copies every file of those "
                                "databases."),
                      errhint("Raise ptrack.wal_summary_memory to keep such records exact.")));
}

void schedule_cut(Lsn at, bool readd, uint32_t flags)
{
    summaries.cut = SummaryCut{at, readd, flags};
}

/* Reads the last record applied (ending at follower.next) again; an ERROR is a read error (tracking restarts). */
void reread_last_record()
{
    if (follower.reader == NULL)
        open_reader();
    XLogReaderState* reader = follower.reader;
    follower.reading = true;
    char* errormsg = NULL;
    XLogBeginRead(reader, summaries.last_start);
    if (XLogReadRecord(reader, &errormsg) == NULL || reader->EndRecPtr != follower.next)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("ptrack could not read the WAL record at %X/%X again: %s",
                               PTRACK_LSN_ARGS(summaries.last_start),
                               errormsg != NULL ? errormsg : "it does not end where it ended before")));
    follower.reading = false;
}

bool cut_at_last_record_end();

/*
 * Writes the cut waiting in summaries.cut: the set as the summary
 * [set_start, cut.at), then an empty set from cut.at, the last record read
 * again into it if cut.readd, and the walks' growth the summary does not
 * hold at its date (growth_replay_pending()).  False if the summary could
 * not be written (WARNING logged): nothing changed, retried after a pause.
 */
bool perform_cut()
{
    if (summaries_held())
        return false; /* nothing is written before the files it no longer vouches for are gone */
    const Lsn end = summaries.cut.at;
    if (end <= summaries.set_start) {
        summaries.cut.at = 0; /* nothing to write: never scheduled so, but never an empty range */
        return true;
    }
    /* A cut just past the last record (a save's, a full set's): a summary ends at that record's end first. */
    if (cut_at_last_record_end_first(summaries.cut, follower.next)) {
        if (!cut_at_last_record_end())
            return false; /* that cut waits in summaries.cut; the caller asks for this one again */
        schedule_cut(end, false, 0);
    }
    /* Before anything changes: a record that cannot be read again must not leave the set half done. */
    if (summaries.cut.readd)
        reread_last_record();
    /* Every record ending before `end` is applied: the walks' growth dated before it goes in, past what the WAL dated. */
    growth_settle_pending(end, false);
    ChangeSet& set = *summaries.set;
    ChangeCursor* cursor = set.open_cursor();
    SummaryHeader written;
    bool ok = cursor != nullptr;
    if (ok) {
        ok = summary_write_durably(*cursor, summaries.set_start, end, current_timeline(), summaries.cut.flags,
                                   &written);
        set.close_cursor(cursor);
    } else {
        ereport(WARNING, (errcode(ERRCODE_OUT_OF_MEMORY),
                          errmsg("ptrack could not save its change summary: out of memory for its index")));
    }
    if (!ok) {
        save_stats_record_failure(); /* ptrack_status().failed_saves */
        publish_problem(shared->summary_write_error, ERRCODE_IO_ERROR,
                        cursor != nullptr ? last_save_failure() : "out of memory for its index",
                        persist_source->save_failure_hint);
        summaries.backoff_s = summaries.backoff_s == 0 ? 1 : Min(summaries.backoff_s * 2, 60);
        summaries.retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), summaries.backoff_s * 1000L);
        return false;
    }
    ereport(DEBUG1, (errmsg("ptrack wrote the change summary of %X/%X-%X/%X: %llu forks, %llu blocks, %u databases",
                            PTRACK_LSN_ARGS(summaries.set_start), PTRACK_LSN_ARGS(end),
                            static_cast<unsigned long long>(written.fork_count),
                            static_cast<unsigned long long>(written.block_count), written.database_count)));
    ++summaries.written;
    clear_problem(shared->summary_write_error); /* after failures: written again */
    const bool readd = summaries.cut.readd;
    summary_written(summaries.redo, summaries.set_start, summaries.cut);
    empty_set_from(end);
    if (readd) {
        /* The record ending at `end` belongs to the new summary (the map has it: the set only). */
        WalRecordView view;
        view_of_reader(follower.reader, &view);
        (void) capture_wal_record(view, set_only_sink);
        for (uint32_t i = 0; i < summaries.gap_count; ++i)
            add_block_range(summaries.gaps[i].rel, summaries.gaps[i].from, summaries.gaps[i].to);
        if (summaries.refused)
            readd_by_database(); /* the record alone is larger than the whole budget */
    }
    growth_replay_pending(end);
    publish(&shared->follower.summarized_lsn, end);
    if (summaries.refused)
        restart_summaries_after_overflow(); /* not even as whole databases */
    return true;
}

/*
 * Ends a summary at follower.next, the end of the last record applied, which
 * goes to the new set (read again): before a cut at follower.next + 1 (a
 * save's, a backend's request, a full set), so that a checkpoint's redo LSN
 * learnt after that cut, right at follower.next, still has a summary
 * starting there.  A checkpoint begun just after the one whose record the
 * follower has applied has its redo LSN exactly there (a backup's fast
 * checkpoint requested during a spread one), and the follower at the end of
 * the WAL may cut past it before that redo LSN is written: note_redo() then
 * finds it below set_start, and without a summary ending there a backup
 * starting at it would take the whole summary before, back to the previous
 * redo LSN.  The cost: a small summary more per such cut (retention
 * combines them).  True if the
 * summary was written or none was needed; false if it could not be (it
 * waits in summaries.cut).
 */
bool cut_at_last_record_end()
{
    if (!splits_at_last_record_end(position(), summaries.set_start))
        return true; /* a summary starts there already, or the last record is not known: nothing to split */
    schedule_cut(follower.next, true, 0);
    return perform_cut();
}

}  // namespace

/* The marking note_redo() asked for, between batches (before retention could combine the boundary). */
void mark_plain_summary()
{
    RedoWatch& redo = summaries.redo;
    if (redo.mark_end == 0 || summaries_held())
        return;
    if (!summary_mark_ends_at_redo(redo.mark_start, redo.mark_end))
        ereport(DEBUG1, (errmsg("ptrack could not mark the summary ending at redo LSN %X/%X as such",
                                PTRACK_LSN_ARGS(redo.mark_end))));
    redo.mark_start = redo.mark_end = 0;
}

/* The main loop's retry of a cut that could not be written, once its pause has passed. */
bool retry_pending_cut()
{
    if (summaries.backoff_s != 0 && GetCurrentTimestamp() < summaries.retry_at)
        return false;
    return perform_cut();
}

/*
 * A checkpoint's redo LSN learnt (GetRedoRecPtr() before a batch, or the
 * CHECKPOINT_REDO record that starts at it): a backup may start there, so a
 * summary should end exactly there.  Ahead of the follower it joins the
 * targets cut_before_record() watches for (a queue: a follower behind the
 * WAL may learn the next redo LSN before it reaches this one); exactly where the follower stands
 * it is cut now with the last record (which ends at it) moved to the new
 * set; behind, it was learnt too late: the cut at the next save (after the
 * checkpoint record) is the fallback, whose summary an answer for it takes
 * whole (extra blocks, never fewer).  True if a cut is now waiting.
 */
bool note_redo(Lsn redo)
{
    if (!ptrack::note_redo(summaries.redo, redo, position(), summaries.set_start, summaries.cut.at != 0,
                           GetCurrentTimestamp()))
        return false;
    schedule_cut(redo, true, kSummaryEndsAtRedo);
    return true;
}

/*
 * Before applying a record ending at `end`: if it ends at or after the
 * oldest redo target, the summary ends at the target, before it (the record ending
 * exactly at a cut belongs to the later summary).  True if a cut now waits
 * (the record is not applied yet).
 */
bool cut_before_record(Lsn end)
{
    const Lsn target = ptrack::cut_before_record(summaries.redo.targets, end, follower.next, summaries.set_start);
    if (target == 0)
        return false;
    schedule_cut(target, false, kSummaryEndsAtRedo);
    return true;
}

/*
 * After applying a record: a refused add (the set is full; it may hold part
 * of the record) cuts at the record's end and reads it again into the new
 * set; a set near its budget cuts after the record.
 */
void cut_after_record()
{
    bool restart = false;
    const SummaryCut cut =
        ptrack::cut_after_record(summaries.refused, summaries.cut_soon, follower.next, summaries.set_start, &restart);
    if (restart)
        restart_summaries_after_overflow();
    else if (cut.at != 0)
        summaries.cut = cut;
}

/* Outside a record (a walk's growth filled the set): cut after what was applied. */
void cut_when_full()
{
    if (!summaries.cut_soon || summaries.cut.at != 0)
        return;
    summaries.cut_soon = false;
    if (const Lsn at = cut_point_now(position(), summaries.set_start))
        schedule_cut(at, false, 0);
}

/*
 * Before a map save complete up to follower.next (= C): the summaries end at
 * C + 1, so that the chain a restarted follower finds ends where its set
 * starts (summaries_resume()).  False if a summary could not be written,
 * or the summaries are held: the save is skipped, so that the map is never
 * ahead of the summaries.  Also false while the chain ends past C + 1 (a cut
 * at a redo LSN the follower has not reached yet, or the startup scan's
 * summaries of WAL it reads again): a save there would claim C with a chain
 * that a restart cuts back to C + 1 and finds broken, and the map, which
 * holds no marks, could not stand in for it (restarted tracking).  The save
 * waits until the follower has applied up to the chain's end (*deferred).
 */
bool cut_for_save(bool* deferred)
{
    *deferred = false;
    if (summaries_held())
        return false;
    if (summaries.cut.at != 0 && !perform_cut())
        return false;
    switch (save_cut(summaries.set_start, follower.next, init_lsn())) {
    case SaveCut::kDeferred:
        *deferred = true; /* the chain ends ahead: the save comes when the follower gets there */
        return false;
    case SaveCut::kNone:
        return true; /* a fresh set not reached yet, or the chain ends at next + 1 already */
    case SaveCut::kCut:
        break;
    }
    schedule_cut(follower.next + 1, false, 0);
    return perform_cut();
}

/*
 * A backend's request (FollowerProgress::cut_requested): everything applied
 * so far goes to the files, even an empty set (a summary says "nothing
 * changed" too).  True once written and summarized_lsn published.
 */
bool cut_on_request()
{
    if (summaries_held())
        return false;
    if (summaries.cut.at != 0 && !perform_cut())
        return false;
    /* First, so that the growth taken whole below goes to the summary ending at `at`, which every answer takes. */
    if (!cut_at_last_record_end())
        return false;
    const Lsn at = cut_point_now(position(), summaries.set_start);
    /* The growth walks found, whole where the follower has not applied the WAL up to its date. */
    growth_settle_pending(at, true);
    if (summaries.set->empty() && summaries.set_start > follower.next)
        return true; /* the files hold everything applied already */
    if (at == 0)
        return true; /* nothing applied is vouched for yet (a fresh set ahead of the follower) */
    schedule_cut(at, false, 0);
    return perform_cut();
}

}  // namespace ptrack::pg::wal_follower
