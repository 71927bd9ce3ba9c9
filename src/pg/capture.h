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
 * Marks one block of a permanent relation fork as written at `lsn` (never
 * smaller than the LSN of the change written).  The write path: lock-free, no
 * allocation, no error.  Does nothing when tracking is off.
 */
__attribute__((always_inline)) inline void capture_block(const RelFork& rel, BlockNumber block, Lsn lsn) noexcept
{
    if (!map.attached())
        return;
    RelHashCache& cache = rel_hash_cache;
    if (!(cache.rel == rel)) {
        cache.rel = rel;
        cache.hash = hash_rel(rel);
    }
    map.mark_hashed(cache.hash, block, lsn);
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
