/*
 * ptrack/summary_answer.h -- answering "which blocks changed at or after L"
 * from summaries (ptrack/summary_file.h) and the follower's in-memory set
 * (ptrack/change_set.h), and combining old summaries into one.
 *
 * Which summaries answer L is ptrack/summary_chain.h's (chain_cover()): a
 * summary covering [start, end) holds changes recorded at LSNs in that
 * range; it is needed when end > L, and then contributes all it holds (it
 * knows no LSN inside; this is why the follower cuts summaries at
 * checkpoint redo LSNs, where backups start).
 *
 * The answer itself is the union (MergeCursor, ptrack/change_cursor.h) of
 * the selected summaries' cursors and the in-memory set's, read fork by fork;
 * SegmentPagemaps turns one fork's chunks into the page bitmaps of its
 * segment files (ptrack/pagemap.h), the rows of ptrack_get_pagemapset().
 * Limits and database entries need file sizes, which only the caller knows:
 * it lists every block from the fork's limit on (pagemap_set_from()) and
 * every block of the files of a listed database, and lists FSM forks whole.
 *
 * Combining (summary_combine()): N adjacent summaries become one covering
 * their whole range, so that retention keeps a call from opening thousands
 * of files.  The result lists each block once; what it loses is only the
 * boundaries inside its range (a query L inside it gets all of it).
 *
 * Nothing here allocates or throws; the caller provides every buffer.
 *
 * INTERFACE: SegmentPagemaps, ChangeCounts, count_changes(), summary_combine().
 */
#ifndef PTRACK_SUMMARY_ANSWER_H
#define PTRACK_SUMMARY_ANSWER_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/change_cursor.h"
#include "ptrack/summary_file.h"

namespace ptrack {

/*
 * The page bitmaps of one fork's segment files, from a cursor positioned on
 * the fork (after next_fork()).  Segment s holds the fork's blocks
 * [s * blocks_per_segment, (s + 1) * blocks_per_segment).
 */
class SegmentPagemaps {
public:
    /*
     * `scratch`: one chunk; `pagemap`: pagemap_bytes(blocks_per_segment)
     * bytes, all zero at construction and owned by this object from then on.
     */
    SegmentPagemaps(uint32_t blocks_per_segment, ChunkBits* scratch, uint8_t* pagemap) noexcept;

    /* Forgets the previous fork: call after each next_fork(). */
    void start_fork() noexcept;

    /*
     * The next segment of the fork with a changed block: its number, its
     * bitmap (in pagemap(), valid up to *length bytes, the last one non-zero)
     * and its number of changed blocks.  False when the fork has no more.
     */
    bool next(ChangeCursor& cursor, uint32_t* segno, size_t* length, uint32_t* count) noexcept;

    const uint8_t* pagemap() const noexcept { return pagemap_; }

private:
    bool load(ChangeCursor& cursor) noexcept;

    uint32_t blocks_per_segment_;
    ChunkBits* scratch_;
    uint8_t* pagemap_;
    size_t dirty_ = 0;        /* bytes of pagemap_ that may be non-zero */
    bool have_chunk_ = false; /* scratch_ holds a chunk not fully given out */
    uint64_t chunk_base_ = 0; /* its first block */
    uint32_t done_ = 0;       /* its blocks below done_ were given out */
};

/* Totals of a change set, for ptrack_get_change_stat() and the benchmarks. */
struct ChangeCounts {
    uint64_t forks;
    uint64_t chunks;
    uint64_t blocks;        /* in chunks (blocks from a limit on not counted: the caller knows the sizes) */
    uint64_t limited_forks; /* forks with a limit */
    uint64_t databases;
};

/* Reads the whole cursor (a fresh one) and counts. */
ChangeCounts count_changes(ChangeCursor& cursor, ChunkBits* scratch) noexcept;

/*
 * Combines `count` validated summaries, adjacent and in LSN order (each ends
 * where the next starts, same cluster and PostgreSQL version) into one
 * summary of [first start, last end), the last one's timeline and flags
 * (it ends where the last one ends, so kSummaryEndsAtRedo carries over; the
 * boundaries inside are lost, flagged or not), written to
 * `sink` as summary_write() does.  `cursors` and `states` are the caller's
 * room for `count` of each (up to a few dozen at a time; combine in steps
 * beyond).  kBadRange if the summaries are not adjacent.
 */
SummaryStatus summary_combine(const SummaryView* views, size_t count, SummaryCursor* cursors,
                              MergeCursor::State* states, Crc32cFn crc32c, Crc32cUpdateFn crc32c_update,
                              const SummaryWriteBuffers& buffers, FlushSink& sink, SummaryHeader* written) noexcept;

}  // namespace ptrack

#endif
