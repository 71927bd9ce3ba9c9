/*
 * capture.h -- the one door through which changes reach the map.
 *
 * Every capture source calls these functions and nothing else: today the
 * storage-manager hooks of the core patch (capture_hooks.cpp); later a WAL
 * follower for unpatched servers, which will mark the block references of
 * each record with the record's LSN.  Neither the map nor the SQL layer knows
 * which source is running.
 */
#ifndef PTRACK_PG_CAPTURE_H
#define PTRACK_PG_CAPTURE_H

#include "ptrack/map.h"
#include "shared_state.h"

namespace ptrack::pg {

/*
 * The relation hash of the last captured write, per process: consecutive
 * writes usually hit the same relation (a checkpoint writes in file order,
 * an extension appends), and the hash is most of a mark's cost.
 */
struct RelHashCache {
    RelFork rel; /* starts as fork 0xFF, which no write carries */
    uint64_t hash;
};
inline RelHashCache rel_hash_cache{RelFork{0, 0, 0, 0xFF}, 0};

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
    uint64_t state;
};
extern MarkAnnouncement* announcements; /* in shared memory, one per PGPROC */
extern uint32_t announcement_count;
inline MarkAnnouncement* my_announcement = nullptr; /* this process's line, set by attach */
inline uint64_t my_generation = 0;

/* Finds this process's announcement line (MyProc's pgprocno); cold path. */
MarkAnnouncement* attach_announcement() noexcept;

/* In a map flush, after reading its start LSN: returns once every mark then in progress has ended. */
void wait_for_marks_in_progress() noexcept;

/*
 * Marks one block of a permanent relation fork as written now (at an LSN
 * never smaller than the LSN of the change written).  The write path:
 * lock-free, no allocation, no error.  Does nothing when tracking is off.
 */
__attribute__((always_inline)) inline void capture_block_written(const RelFork& rel, BlockNumber block) noexcept
{
    if (!map.attached())
        return;
    MarkAnnouncement* announcement = my_announcement;
    if (unlikely(announcement == nullptr))
        announcement = attach_announcement();
    /* Full barrier: the announcement is visible before the LSN is read. */
    __atomic_store_n(&announcement->state, my_generation | 1, __ATOMIC_SEQ_CST);
    const Lsn lsn = current_mark_lsn();
    RelHashCache& cache = rel_hash_cache;
    if (!(cache.rel == rel)) {
        cache.rel = rel;
        cache.hash = hash_rel(rel);
    }
    map.mark_hashed(cache.hash, block, lsn);
    my_generation += 2;
    __atomic_store_n(&announcement->state, my_generation, __ATOMIC_RELEASE);
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

/* Installs the storage-manager hooks of the core patch (capture_hooks.cpp). */
void install_capture_hooks();

}  // namespace ptrack::pg

#endif
