/*
 * scan_summary_writer.h -- a restored backup's WAL, read by the postmaster's
 * startup scan before recovery (wal_load.cpp, capture/startup_scan.h),
 * recorded as change summaries too (persist/summary_io.h), so that the
 * summaries start where the map's fresh start does: at the backup's redo
 * LSN.
 *
 * Why: recovery replays the backup's WAL before the WAL follower exists,
 * and a restored primary's follower starts reading after it, at the scan's
 * end.  Without these summaries the chain would begin there, and
 * ptrack_init_lsn(), answered from the summaries, would come after the
 * backup's start LSN: the restored backup could not be the parent of the
 * next incremental one (docs/design.md section 4.7).
 */
#ifndef PTRACK_PG_SCAN_SUMMARY_WRITER_H
#define PTRACK_PG_SCAN_SUMMARY_WRITER_H

#include "capture/startup_scan.h"
#include "ptrack/change_set.h"

namespace ptrack::pg {

/* The chain of summaries the scan wrote, [start_lsn, end_lsn); both 0 if none. */
struct ScanChain {
    Lsn start_lsn;
    Lsn end_lsn;
};
PTRACK_FRAME_SAFE(ScanChain);

/*
 * Records what the scan reads in a change set (budget
 * ptrack.wal_summary_memory, private memory of the postmaster) and writes it
 * as summaries of timeline `timeline` under pg_wal/ptrack, cutting where the
 * set fills up (the cut rule of docs/design.md section 4.5: a record counts
 * at its end LSN, and the record ending exactly at a cut belongs to the
 * later summary).  The postmaster's only: raises no ERROR.
 */
class ScanSummaryWriter final : public ScanRecorder {
public:
    explicit ScanSummaryWriter(TimeLineID timeline) noexcept : timeline_(timeline) {}

    void begin(Lsn first_proven) noexcept override;
    bool record_done(Lsn end) noexcept override;
    void block(const RelFork& rel, BlockNumber block, Lsn lsn, bool referenced) noexcept override;
    void relation_limit(const RelFork& rel, BlockNumber limit, Lsn lsn) noexcept override;
    void database(uint32_t spc, uint32_t db, Lsn lsn) noexcept override;

    /*
     * After a scan that proved its range (scan_wal_at_startup() returned
     * nullptr) whose last record ends at `scan_end`: writes the last summary,
     * up to scan_end + 1, and returns the chain; {0, 0} after a LOG if any
     * part of it could not be written (nothing is left behind).  Frees the
     * set.
     */
    ScanChain finish(Lsn scan_end) noexcept;

    /* The scan proved nothing: removes what was written, frees the set. */
    void abandon() noexcept;

private:
    void note(AddResult r) noexcept;
    bool write_until(Lsn end) noexcept;
    void give_up(const char* why) noexcept;

    TimeLineID timeline_;
    ChangeSet* set_ = nullptr;
    Lsn chain_start_ = 0;
    Lsn set_start_ = 0;
    uint64_t records_in_set_ = 0;
    bool refused_ = false;
    bool cut_soon_ = false;
    bool failed_ = false;
};
PTRACK_FRAME_SAFE(ScanSummaryWriter);

}  // namespace ptrack::pg

#endif
