/*
 * scan_summary_writer.cpp -- the restored backup's startup scan written as
 * change summaries (scan_summary_writer.h).  The set lives in the
 * postmaster's private memory for the length of the scan and is freed
 * before the postmaster forks anyone; the summaries are written exactly as
 * the follower writes its own (persist/summary_write.cpp).
 */
extern "C" {
#include "postgres.h"
}

#include <new>

#include "capture/wal/scan_summary_writer.h"
#include "persist/summary_io.h"

namespace ptrack::pg {

namespace {

/* The scan's set: one scan at a time, in the postmaster. */
alignas(ChangeSet) unsigned char set_storage[sizeof(ChangeSet)];

PTRACK_ENGINE_NOEXCEPT(&ChangeSet::add_block, &ChangeSet::add_limit, &ChangeSet::add_database, &ChangeSet::clear,
                       &ChangeSet::reset, &ChangeSet::open_cursor, &ChangeSet::close_cursor);
PTRACK_FRAME_SAFE(SummaryHeader);

}  // namespace

void ScanSummaryWriter::begin(Lsn first_proven) noexcept
{
    /* A data directory copied with its pg_wal (a file-system snapshot) may bring summaries: never trust them. */
    const bool cleared = summary_remove_all("the data directory was restored from a base backup");
    set_ = new (set_storage) ChangeSet(wal_summary_budget_bytes());
    chain_start_ = set_start_ = first_proven;
    if (!cleared)
        give_up("the summaries already in pg_wal/ptrack could not be removed");
}

void ScanSummaryWriter::note(AddResult r) noexcept
{
    if (r == AddResult::kRefused)
        refused_ = true;
    else if (r == AddResult::kCutSoon)
        cut_soon_ = true;
}

void ScanSummaryWriter::block(const RelFork& rel, BlockNumber block, Lsn, bool) noexcept
{
    if (!failed_)
        note(set_->add_block(rel, block));
}

void ScanSummaryWriter::relation_limit(const RelFork& rel, BlockNumber limit, Lsn) noexcept
{
    if (!failed_)
        note(set_->add_limit(rel, limit));
}

/* Every file of the database directory: its copy or removal is replayed before the follower exists. */
void ScanSummaryWriter::database(uint32_t spc, uint32_t db, Lsn) noexcept
{
    if (!failed_)
        note(set_->add_database(spc, db));
}

bool ScanSummaryWriter::write_until(Lsn end) noexcept
{
    ChangeCursor* cursor = set_->open_cursor();
    if (cursor == nullptr) {
        give_up("out of memory for the index of its change set");
        return false;
    }
    SummaryHeader written;
    const bool ok = summary_write_durably(*cursor, set_start_, end, timeline_, 0, &written);
    set_->close_cursor(cursor);
    if (!ok) {
        give_up("a summary file could not be written");
        return false;
    }
    set_->clear();
    set_start_ = end;
    records_in_set_ = 0;
    return true;
}

bool ScanSummaryWriter::record_done(Lsn end) noexcept
{
    if (failed_)
        return true;
    if (refused_) {
        refused_ = false;
        cut_soon_ = false;
        /* The set is full before this record: cut before it (it counts at `end`), and take it again. */
        if (records_in_set_ == 0 || end <= set_start_) {
            give_up("one WAL record's changes do not fit in ptrack.wal_summary_memory");
            return true;
        }
        return !write_until(end);
    }
    ++records_in_set_;
    /* Never an empty range: the first record read may end just before the first LSN proven. */
    if (cut_soon_ && end + 1 > set_start_) {
        cut_soon_ = false;
        (void) write_until(end + 1);
    }
    return true;
}

void ScanSummaryWriter::give_up(const char* why) noexcept
{
    ereport(LOG, (errmsg("ptrack could not record the WAL read before recovery as change summaries: %s", why),
                  errdetail("Answers from the summaries start where the WAL follower starts reading.")));
    failed_ = true;
}

ScanChain ScanSummaryWriter::finish(Lsn scan_end) noexcept
{
    ScanChain chain{0, 0};
    if (set_ == nullptr)
        return chain;
    if (!failed_ && write_until(scan_end + 1))
        chain = ScanChain{chain_start_, scan_end + 1};
    set_->reset();
    set_ = nullptr;
    if (chain.end_lsn == 0) {
        summary_remove_all("the WAL read before recovery could not be recorded whole");
        return chain;
    }
    ereport(LOG, (errmsg("ptrack recorded the changes of the WAL from %X/%X to %X/%X as change summaries",
                         PTRACK_LSN_ARGS(chain.start_lsn), PTRACK_LSN_ARGS(chain.end_lsn))));
    return chain;
}

void ScanSummaryWriter::abandon() noexcept
{
    if (set_ == nullptr)
        return;
    set_->reset();
    set_ = nullptr;
    summary_remove_all("the WAL read before recovery proves nothing");
}

}  // namespace ptrack::pg
