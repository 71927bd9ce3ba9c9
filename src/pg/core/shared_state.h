/*
 * shared_state.h -- the process-wide view of ptrack's shared memory.
 *
 * src/pg/ptrack.cpp creates the shared state at postmaster start and every
 * backend inherits these globals (defined in shared_state.cpp, the bottom of
 * src/pg: every other file includes this one, and it includes none of them).  When tracking is off (ptrack.map_size = 0)
 * or the library was not loaded through shared_preload_libraries, `map` is
 * not attached and capture does nothing; the SQL functions raise an error
 * (require_tracking()).
 */
#ifndef PTRACK_PG_SHARED_STATE_H
#define PTRACK_PG_SHARED_STATE_H

extern "C" {
#include "access/xlog.h" /* GetXLogInsertRecPtr(); includers include postgres.h first */
#include "storage/spin.h"
}

#include "core/boundary.h"
#include "ptrack/atomic.h"
#include "ptrack/limit_table.h"
#include "ptrack/map.h"
#include "ptrack/map_file.h"

/*
 * The two halves of an LSN for a "%X/%X" format.  PostgreSQL's
 * LSN_FORMAT_ARGS relies on __builtin_types_compatible_p, which C++ lacks.
 */
#define PTRACK_LSN_ARGS(lsn) static_cast<uint32_t>((lsn) >> 32), static_cast<uint32_t>(lsn)

namespace ptrack::pg {

/*
 * The WAL follower's progress (capture_wal.cpp), read by the SQL functions
 * (the freshness wait) and by monitoring.  No lock: every field is an
 * Atomic, written only by the follower (but walk_requested, which any
 * backend bumps, acquire-release), stored with release and loaded with
 * acquire.  Publication order: the marks of a record are stored in the map
 * before applied_lsn moves past it, and the marks of a walk before
 * walk_done; the latch before the pid when it starts, the pid before the
 * latch (both cleared) when it exits.
 */
struct FollowerProgress {
    Atomic<uint64_t> applied_lsn;    /* end of the last record whose changes are marked; 0 until it runs */
    Atomic<uint64_t> saved_lsn;      /* covered LSN of the last successful map save */
    Atomic<void*> latch;             /* the follower's Latch (in shared memory), to wake it; nullptr when not running */
    Atomic<uint64_t> walk_requested; /* bumped by a backend that needs a size walk (file_growth.h) */
    Atomic<uint64_t> walk_done;      /* the walk_requested value the last finished walk started after */
    Atomic<uint64_t> walk_target;    /* the highest freshness target of a walk request (raised before the
                                        request): the follower walks once it has applied that far */
    Atomic<int64_t> caught_up_time;  /* TimestampTz when it last had applied all the WAL then available */
    Atomic<uint32_t> timeline;       /* timeline of the WAL it reads */
    Atomic<int32_t> pid;             /* the follower's PID, 0 when not running */
    Atomic<uint64_t> slot_releases;  /* times the server stopped the follower to release its slot, which held
                                        more WAL than max_slot_wal_keep_size allows (it saved and resumed) */
    /* Summaries (persist/summary_io.h): a backend that needs the changes up to its call on disk asks for a cut. */
    Atomic<uint64_t> cut_requested;  /* bumped by such a backend, after its walk request */
    Atomic<uint64_t> cut_done;       /* the cut_requested value the last cut started after */
    Atomic<uint64_t> summarized_lsn; /* end LSN of the newest summary written: every change recorded at an LSN
                                        below it is in the summary files (before the first one: where the
                                        follower's set starts); 0 until the follower has started */
};

/*
 * Why the WAL follower cannot start (follower_main.cpp): the last ERROR it
 * raised before it established where reading starts, for ptrack_status()
 * (off_reason) and for the SQL functions, which fail at once with it instead
 * of waiting ptrack.wal_wait_timeout for a follower that is only retrying.
 * Cleared once the follower has started.  Written by the follower, read by
 * backends; guarded by `mutex`.
 */
struct FollowerStartError {
    slock_t mutex;
    int64_t time;         /* TimestampTz of the ERROR; 0: none (the follower runs, or has not failed yet) */
    int sqlerrcode;       /* its SQLSTATE */
    char message[256];    /* its message */
    char hint[256];       /* its hint, "" if none */
};

/*
 * The last map save and the save counters, for ptrack_status().  Written
 * only by the one process that saves in this server run (the checkpointer
 * or the WAL follower: capture/capture_source.h), as a sequence lock:
 * `sequence` is odd while a write is under way (its writer makes it odd,
 * then a release fence, then relaxed stores of the fields, then a release
 * store of the next even value), and a reader retries until it reads the
 * same even value (acquire) before and after copying the fields (relaxed,
 * then an acquire fence): save_stats_read().
 */
struct SaveStats {
    Atomic<uint64_t> sequence;
    Atomic<uint64_t> saves;       /* successful saves since the server started */
    Atomic<uint64_t> failures;    /* failed saves since the server started */
    Atomic<uint64_t> lsn;         /* covered LSN of the last successful save */
    Atomic<int64_t> time;         /* TimestampTz when it ended */
    Atomic<uint64_t> bytes;       /* bytes it wrote (map or delta) */
    Atomic<uint64_t> duration_us; /* how long it took */
    Atomic<uint64_t> full;        /* 1: the whole map, 0: a delta */
};

/* A consistent copy of SaveStats (save_stats_read()), in a reader's frame. */
struct SaveRecord {
    uint64_t saves;
    uint64_t failures;
    Lsn lsn;
    int64_t time;
    uint64_t bytes;
    uint64_t duration_us;
    bool full;
};

/*
 * The last tracking restart (restart_tracking_at()), for ptrack_status():
 * any process may restart tracking, rarely; guarded by `mutex`.
 */
struct RestartInfo {
    slock_t mutex;
    int64_t time;       /* TimestampTz; 0 if none since the server started */
    uint64_t lsn;       /* the new ptrack_init_lsn() it set */
    char reason[256];
};

/*
 * The header of ptrack's shared memory; the map region follows, 64-byte
 * aligned.  What protects each group of fields, and in which order a writer
 * publishes them (a reader that sees the later store with an acquire load
 * sees the earlier ones):
 *
 *  - fixed at start: geometry and fresh_init_floor.  Written by the
 *    postmaster in load_map() (persist/map_load.cpp, with the source's
 *    steps: capture/capture_source.h) before any other process exists;
 *    fork() publishes them; read-only afterwards.  No lock.
 *  - the resume point: loaded_covered_lsn, loaded_timeline,
 *    presized_redo_lsn, restored_scan_from, restored_scan_end,
 *    resume_at_scan_end, restored_summary_from, restored_summary_end.  Written by the postmaster at start; afterwards
 *    written and read only by the process that saves the map (wal: the
 *    follower, which clears the scan fields at its first save after a fresh
 *    start, or when tracking restarts, and resumes from the others when it
 *    restarts; hooks: the checkpointer reads
 *    loaded_covered_lsn and never writes it).  One process at a time, so
 *    plain loads and stores.
 *  - init_lsn: any process, an Atomic: it goes from 0 to a value once
 *    (compare_exchange(), init_lsn() and the follower's fresh start) and
 *    otherwise only forward (store_max(), restart_tracking_at()).  Release
 *    on every store, acquire on every load (relaxed in the postmaster's
 *    load_map(), before any other process exists).
 *  - restart_count (relaxed atomic counter) and last_restart (its spinlock
 *    `mutex`): any process that restarts tracking, counter first.
 *  - follower: FollowerProgress, one writer (the follower); the marks of a
 *    record are stored before applied_lsn is published past it, and the
 *    marks of a walk before walk_done (release stores), so a backend that
 *    reads either with an acquire load finds those marks in the map.
 *  - save_stats: SaveStats, a sequence lock with one writer (below).
 *  - mark_floor (hooks): written only by the checkpointer, at each save
 *    point, before it waits for the marks in progress; read by every mark
 *    that uses a page's own LSN, after its announcement.  Both sequentially
 *    consistent: the store-load pattern of capture.h's announcements.
 */
struct SharedState {
    Atomic<uint64_t> init_lsn; /* LSN from which tracking is complete, 0 until established */
    Atomic<uint64_t> mark_floor; /* hooks: a mark with a page's LSN stores at least this (capture.h); 0 until
                                    the first save point */
    MapGeometry geometry;
    Lsn loaded_covered_lsn;    /* covered LSN of the map loaded at startup or, wal, of the follower's
                                  latest save (where a restarted follower resumes); 0 for a fresh map */
    uint32_t loaded_timeline;  /* timeline of that save */
    Lsn fresh_init_floor;      /* wal: a fresh map's init_lsn is at least this (wal_load.cpp) */
    Lsn presized_redo_lsn;     /* wal: ptrack.sizes holds the file sizes from before recovery, which starts
                                  at this redo LSN; 0 if not (wal_load.cpp, follower_slot_start.cpp) */
    Lsn restored_scan_from;    /* wal, a restored backup: the map holds every change from this LSN ... */
    Lsn restored_scan_end;     /* ... to this one, read before recovery; 0 if not (wal_load.cpp) */
    bool resume_at_scan_end;   /* the follower may start reading at restored_scan_end (a restored primary) */
    Lsn restored_summary_from; /* wal, a restored backup: the scan's range written as change summaries, */
    Lsn restored_summary_end;  /* [from, end); 0 if not (capture/wal/scan_summary_writer.h) */
    uint32_t restored_summary_timeline; /* the timeline that WAL was read on */
    Atomic<uint64_t> restart_count; /* tracking restarts since the server started */
    FollowerProgress follower;
    SaveStats save_stats;
    RestartInfo last_restart;
    FollowerStartError follower_start_error;
    /*
     * wal: the last change summary the follower could not write (message and
     * hint; time 0: the last one was written).  The follower stops applying
     * the WAL until one is written, so ptrack_status().off_reason and the
     * functions' timeout errors say why (capture_wal.cpp).
     */
    FollowerStartError summary_write_error;
};

extern SharedState* shared; /* nullptr when tracking is off */
extern Map map;             /* attached iff shared != nullptr */
/*
 * "Every block from B on changed" (ptrack/limit_table.h), read by the map's
 * answer (core/map_answer.h).  Nothing in this version writes one: it is
 * attached, to private memory, only in the postmaster while it migrates a
 * map of an earlier version with that version's ptrack.limits
 * (capture/wal/map_migration.h); detached otherwise.
 */
extern LimitTable limits;
extern bool preloaded;      /* loaded through shared_preload_libraries */
extern int map_size_mb;     /* the ptrack.map_size GUC, in MB */
extern bool use_segment_summary; /* developer GUC ptrack.use_segment_summary */
extern char unknown_setting[128]; /* the first unknown ptrack.* name configured, "" if none (ptrack.cpp) */

/*
 * ptrack_init_lsn() of a fresh map is established by its first reader
 * (init_lsn()) rather than by the source: a property of the source that runs
 * (capture/capture_source.h), set with it in _PG_init.
 */
extern bool init_lsn_on_first_use;

PTRACK_FRAME_SAFE(SharedState, Map, MapGeometry, SaveStats, SaveRecord, FollowerStartError);

/* After a map save, by the saving process (map_save.cpp): updates SaveStats. */
void save_stats_record_success(Lsn covered_lsn, uint64_t bytes, uint64_t duration_us, bool full) noexcept;
void save_stats_record_failure() noexcept;

/* A consistent copy of SaveStats (retries while the saver writes). */
void save_stats_read(SaveRecord* out) noexcept;

/* Set once this process has seen recovery over (it never comes back). */
inline bool recovery_seen_over = false;

/* current_mark_lsn() while this process may still be in recovery (shared_state.cpp). */
Lsn current_mark_lsn_in_recovery() noexcept;

/*
 * The LSN every mark made from now on is at least, and that is never smaller
 * than the LSN of a change already made: the insert position on a primary,
 * the end of the WAL record being replayed during recovery.  On the write
 * path: the common case is inline.
 */
inline Lsn current_mark_lsn() noexcept
{
    if (likely(recovery_seen_over))
        return GetXLogInsertRecPtr();
    return current_mark_lsn_in_recovery();
}

/*
 * The end of the last WAL record inserted, on a primary: the insert position
 * (GetXLogInsertRecPtr(), where the next record begins) less the page header
 * it points past at the start of a page (after a WAL switch, or when a
 * record ends at a page boundary: xlog.c, XLogBytePosToRecPtr()).  A record
 * ending at the boundary ends before that header (its EndRecPtr, as a WAL
 * reader reports it), and the header may not be written yet; so a reader that
 * has applied every record inserted so far stands exactly here.
 */
Lsn last_inserted_record_end() noexcept;

/*
 * ptrack_init_lsn().  With init_lsn_on_first_use (hooks): established on
 * first use as current_mark_lsn(), since the map has recorded every write
 * since this process's postmaster created it; never 0 once returned.
 * Otherwise (wal): set by the follower where it starts reading; 0 until then
 * (the SQL functions wait for it).  Requires an attached map.
 */
Lsn init_lsn() noexcept;

/* Raises an ERROR with a hint unless the map is attached. Call from C-style frames only. */
void require_tracking();

}  // namespace ptrack::pg

#endif
