/*
 * capture.h -- how the hooks' writes reach the map, and how any source
 * restarts tracking.
 *
 * The storage-manager hooks of the core patch (hooks/capture_hooks.cpp)
 * mark each block as it is written (capture_blocks_written(), or
 * capture_pages_written() with the page's own LSN where that is safe) and
 * the blocks of a directory copied whole (capture_relation_files());
 * neither the map nor the SQL layer marks anything itself.  The WAL
 * follower of unpatched servers (wal/follower.h) marks no map: it keeps
 * exact change summaries, and comes here only to restart tracking.
 *
 * INTERFACE: capture_blocks_written(), capture_pages_written(),
 * capture_relation_files(), restart_tracking(), restart_tracking_at(); for a
 * map save, wait_for_marks_in_progress().
 */
#ifndef PTRACK_PG_CAPTURE_H
#define PTRACK_PG_CAPTURE_H

extern "C" {
#include "storage/bufpage.h" /* PageHeaderData; includers include postgres.h first */
}

#include "core/boundary.h"
#include "ptrack/map.h"
#include "core/shared_state.h"

namespace ptrack::pg {

/* A page's pd_lsn, read from its header (the Page type differs between versions). */
__attribute__((always_inline)) inline Lsn page_header_lsn(const void* page) noexcept
{
    return PageXLogRecPtrGet(static_cast<const PageHeaderData*>(page)->pd_lsn);
}

PTRACK_FRAME_SAFE(RelFork, Map::SegmentRef);
PTRACK_ENGINE_NOEXCEPT(&Map::attached, &Map::segment_ref, &Map::mark_in_segment, &hash_rel);

/*
 * What this process last marked: the two most recently written relation
 * forks, each with its hash and the summary slot of the segment written
 * last (Map::SegmentRef).  Consecutive writes usually hit a relation written
 * just before (a checkpoint writes in file order, an extension appends, an
 * update evicts a table page and then an index page), and the two hashes
 * are most of a mark's cost.  Per process, so no synchronisation.
 */
struct MarkCacheEntry {
    RelFork rel; /* fork 0xFF, which no write carries, while empty */
    Map::SegmentRef segment;
};
struct MarkCache {
    MarkCacheEntry entries[2];
    uint32_t victim; /* the entry a miss replaces: the one used less recently */
};
inline MarkCache mark_cache{{{RelFork{0, 0, 0, 0xFF}, {}}, {RelFork{0, 0, 0, 0xFF}, {}}}, 0};

/* The SegmentRef of `block` of `rel`, from mark_cache or computed into it. */
__attribute__((always_inline)) inline const Map::SegmentRef& cached_segment_ref(const RelFork& rel,
                                                                                BlockNumber block) noexcept
{
    /* The map's geometry is always built with RELSEG_SIZE (ptrack.cpp), a constant: no division. */
    const uint32_t segno = block / static_cast<BlockNumber>(RELSEG_SIZE);
    MarkCache& cache = mark_cache;
    MarkCacheEntry* entry = &cache.entries[0];
    if (entry->rel == rel) {
        cache.victim = 1;
    } else if (entry = &cache.entries[1], entry->rel == rel) {
        cache.victim = 0;
    } else {
        entry = &cache.entries[cache.victim];
        cache.victim ^= 1;
        entry->rel = rel;
        entry->segment = map.segment_ref(hash_rel(rel), segno);
        return entry->segment;
    }
    if (unlikely(entry->segment.segno != segno))
        entry->segment = map.segment_ref(entry->segment.rel_hash, segno);
    return entry->segment;
}

/*
 * Marks in progress.  A mark reads its LSN, then stores it: a map flush that
 * copies the map between the two would save neither the old nor the new
 * value, and the next incremental flush only looks for slots >= the LSN read
 * when this flush began (map_delta.h).  So each process announces a mark in
 * its own cache line (odd = in progress, the generation in the other bits)
 * before reading the LSN, and a flush waits for the marks it sees in progress
 * after reading its start LSN (wait_for_marks_in_progress()).  A mark that
 * announces itself later reads an LSN >= the flush's start LSN.
 */
struct alignas(64) MarkAnnouncement {
    Atomic<uint64_t> state; /* written only by its process: odd while a mark is in progress */
};
extern MarkAnnouncement* announcements; /* in shared memory, one per PGPROC; none with the wal source (ptrack.cpp) */
extern uint32_t announcement_count;
inline MarkAnnouncement* my_announcement = nullptr; /* this process's line, set by attach */
inline uint64_t my_generation = 0;

/* Finds this process's announcement line (MyProc's pgprocno); cold path. */
MarkAnnouncement* attach_announcement() noexcept;

/* In a map flush, after reading its start LSN: returns once every mark then in progress has ended. */
void wait_for_marks_in_progress() noexcept;

/* Announces a mark in progress (above), before the mark reads its LSN or the mark floor. */
__attribute__((always_inline)) inline MarkAnnouncement* announce_mark() noexcept
{
    MarkAnnouncement* announcement = my_announcement;
    if (unlikely(announcement == nullptr))
        announcement = attach_announcement();
    /* Full barrier: the announcement is visible before the LSN is read. */
    announcement->state.store(my_generation | 1, Order::kSeqCst);
    return announcement;
}

/* Ends the mark announce_mark() began, once its slots are stored. */
__attribute__((always_inline)) inline void end_mark(MarkAnnouncement* announcement) noexcept
{
    my_generation += 2;
    announcement->state.store(my_generation, Order::kRelease);
}

/* cached_segment_ref() where a run of blocks enters its next segment: rare, kept out of the loops below. */
__attribute__((noinline)) inline const Map::SegmentRef& next_segment_ref(const RelFork& rel,
                                                                         BlockNumber block) noexcept
{
    return cached_segment_ref(rel, block);
}

/*
 * mark_blocks() for more than one block, out of line.  The segment is looked
 * up once, not per block (md.c writes a vector within one segment), and a
 * relation's hash only when the cache misses: a loop around
 * cached_segment_ref() would let the compiler compute it before the loop.
 */
template <typename LsnOf>
__attribute__((noinline)) void mark_block_run(const RelFork& rel, BlockNumber first, uint32_t nblocks,
                                              LsnOf lsn_of) noexcept
{
    const Map::SegmentRef* segment = &cached_segment_ref(rel, first);
    for (uint32_t i = 0; i < nblocks; ++i) {
        const BlockNumber block = first + i;
        if (unlikely(block / static_cast<BlockNumber>(RELSEG_SIZE) != segment->segno))
            segment = &next_segment_ref(rel, block);
        map.mark_in_segment(*segment, block, lsn_of(i));
    }
}

/*
 * Stores lsn_of(i) into the slots of block `first + i` of `rel`, for i in
 * [0, nblocks), nblocks >= 1.  One block inline (the buffer manager writes
 * one at a time), a run out of line.
 */
template <typename LsnOf>
__attribute__((always_inline)) inline void mark_blocks(const RelFork& rel, BlockNumber first, uint32_t nblocks,
                                                      LsnOf lsn_of) noexcept
{
    if (likely(nblocks == 1))
        map.mark_in_segment(cached_segment_ref(rel, first), first, lsn_of(0));
    else
        mark_block_run(rel, first, nblocks, lsn_of);
}

/*
 * Marks blocks `first` .. `first + nblocks - 1` (nblocks >= 1) of a permanent relation
 * fork as written now (at an LSN never smaller than the LSN of the change
 * written): one announcement and one read of the current LSN for them all.
 * The write path: lock-free, no allocation, no error.  Does nothing when
 * tracking is off.
 */
__attribute__((always_inline)) inline void capture_blocks_written(const RelFork& rel, BlockNumber first,
                                                                 uint32_t nblocks) noexcept
{
    if (!map.attached())
        return;
    MarkAnnouncement* announcement = announce_mark();
    const Lsn lsn = current_mark_lsn();
    mark_blocks(rel, first, nblocks, [lsn](uint32_t) { return lsn; });
    end_mark(announcement);
}

/*
 * Marks the blocks `first` .. `first + nblocks - 1` of `rel` that were
 * written from `pages` with each page's own LSN (pd_lsn), where the caller
 * has proven that every change that matters to a backup moves that LSN
 * (capture_hooks.cpp, docs/design.md section 3.2).  A page whose LSN is 0
 * (a new page) is marked as written now.
 *
 * Every value stored is at least the mark floor (SharedState::mark_floor),
 * which the checkpointer raises to the threshold of the next delta at each
 * save point before it waits for the marks in progress: as with an LSN read
 * now, a mark the save did not see in progress stores a value the next
 * delta collects (ptrack/map_delta.h).  The floor is read after the
 * announcement, the save stores it before scanning the announcements, both
 * sequentially consistent, so one of the two sees the other.
 */
__attribute__((always_inline)) inline void capture_pages_written(const RelFork& rel, BlockNumber first,
                                                                const void* const* pages,
                                                                uint32_t nblocks) noexcept
{
    if (!map.attached())
        return;
    MarkAnnouncement* announcement = announce_mark();
    const Lsn floor = shared->mark_floor.load(Order::kSeqCst);
    mark_blocks(rel, first, nblocks, [pages, floor](uint32_t i) {
        const Lsn lsn = page_header_lsn(pages[i]);
        if (unlikely(lsn == 0))
            return current_mark_lsn();
        return lsn > floor ? lsn : floor;
    });
    end_mark(announcement);
}

/*
 * Marks every block of every permanent relation file directly inside `dir`
 * (a path relative to the data directory such as "base/16390"), as written
 * now: for directories copied wholesale (CREATE DATABASE ... STRATEGY
 * FILE_COPY, ALTER DATABASE ... SET TABLESPACE).  If `dir` is not a database
 * directory, the blocks cannot be attributed, so tracking restarts instead
 * (restart_tracking()).  May raise an ERROR (unreadable directory).
 */
void capture_relation_files(const char* dir);

/*
 * Tracking can no longer prove it saw every change: move ptrack_init_lsn()
 * forward to now, so the next backup tool run is told to take a full backup,
 * and log a WARNING with `reason`.
 */
void restart_tracking(const char* reason);

/* The same, with ptrack_init_lsn() moved forward to `lsn` (the WAL follower: the end of a record). */
void restart_tracking_at(Lsn lsn, const char* reason);

}  // namespace ptrack::pg

#endif
