/*
 * capture_source.h -- which capture source runs, and what each source
 * owns: the LSN it dates a change with, the LSN up to which its saved state
 * is complete, and what triggers a save (docs/design.md section 2).
 *
 *   hooks  the core patch's storage-manager hooks (capture_hooks.cpp).
 *          Marks a map with the insert LSN (replay LSN in recovery); the map
 *          is saved by the checkpointer at the end of every sync phase,
 *          complete up to that checkpoint's redo LSN.
 *   wal    a background worker that follows the WAL (capture_wal.cpp).
 *          Records each change at its record's end LSN in a change set,
 *          written as summary files; it saves its resume point itself,
 *          complete up to the end of the last record it applied, and keeps
 *          the WAL after that point with a replication slot of its own.
 *
 * ptrack.capture = auto | hooks | wal (postmaster only) picks one at startup
 * (ptrack.cpp): auto takes hooks when the running server has them, else wal.
 *
 * Everything that differs between the two is an entry of CaptureSourceOps,
 * one instance per source (kHooksSource in capture_hooks.cpp, kWalSource in
 * capture_wal.cpp), so that no code outside capture/ branches on which
 * source runs: it calls running_source().  The write path (capture.h) calls
 * nothing through this table.
 *
 * INTERFACE: CaptureSourceOps, running_source(), set_running_source(),
 * save_map() (the one save sequence of every source), kHooksSource,
 * kWalSource, hooks_available().
 */
#ifndef PTRACK_PG_CAPTURE_SOURCE_H
#define PTRACK_PG_CAPTURE_SOURCE_H

#include "core/shared_state.h"
#include "persist/map_persistence.h"

namespace ptrack::pg {

/* The columns of ptrack_status() that belong to a source (the WAL follower's); 0: NULL. */
struct SourceStatus {
    int32_t follower_pid;
    uint32_t follower_timeline;
    Lsn follower_lsn;           /* 0 until the follower has applied something; then the lag too */
    uint64_t follower_lag_bytes;
    bool have_lag_seconds;
    double follower_lag_seconds;
    uint64_t slot_releases;
};

/*
 * One capture source's operations.  Entries are plain function pointers,
 * every one set (a source with nothing to do has a no-op), called only off
 * the write path.
 *
 * A table is a constant built field by field, each field named where it is
 * set, and checked by the compiler (C++17 has no designated initializers):
 *
 *     constexpr CaptureSourceOps kWalSource = [] {
 *         CaptureSourceOps ops{};
 *         ops.name = "wal";
 *         ...
 *         return ops;
 *     }();
 *     static_assert(source_ops_complete(kWalSource), "...");
 *
 * constexpr makes it a constant (initialised before any code runs, in
 * read-only memory), a misspelt field does not compile, and the
 * static_assert fails the build when an entry is left unset.
 */
struct CaptureSourceOps {
    const char* name;              /* SHOW ptrack.capture, ptrack_status().capture */
    SourcePersistence persistence; /* what persist/ needs: the source's id, its load steps, its save texts */
    bool init_lsn_on_first_use;    /* ptrack_init_lsn() is established by its first reader (core/shared_state.h) */

    /* In _PG_init: installs the source (the hooks, or the follower's registration). */
    void (*install)();
    /*
     * Why the WAL follower's replication slot, if a run with the wal source
     * left one (ptrack.capture changed, the data directory moved to a server
     * with the hooks), is removed at postmaster start: nobody would advance
     * it, and it would keep every WAL segment.  nullptr: this source uses it.
     */
    const char* drops_follower_slot;

    /*
     * The steps of save_map() that differ, in the order it runs them:
     * save_prepare (the bypass journal set aside; a size walk),
     * save_covered_lsn, save_sizes (ptrack.sizes.new for that LSN),
     * save_point (the threshold of the next delta; waits for the marks in
     * progress), then, after the map and the sizes are saved, save_done
     * (the bypass journal retired; the slot advanced).
     */
    void (*save_prepare)();
    Lsn (*save_covered_lsn)();
    bool (*save_sizes)(Lsn covered);
    SavePoint (*save_point)(Lsn covered);
    void (*save_done)(Lsn covered);

    /*
     * Freshness, in a backend before an answer of the SQL functions: every
     * change made before the call is marked once it returns (wal: the
     * follower has applied the WAL written before it; hooks: nothing, the
     * marks are made as the writes happen).  C-style frames; may ERROR.
     */
    void (*wait_until_fresh)();
    /*
     * Where the answers come from, in a backend after wait_until_fresh:
     * false, the map (hooks); true (wal), the summary files (persist/summary_io.h), and *summarized is the end
     * of the newest one (0: none yet).  With `cut`, first has the follower
     * write every change recorded so far into a summary, so that the files
     * hold every change made before the call (wal: the cut handshake of
     * FollowerProgress).  C-style frames; may ERROR.
     */
    bool (*summaries)(bool cut, Lsn* summarized);
    /*
     * ptrack_verify()'s re-check: the marks of writes already on disk have
     * arrived (hooks: the marks in progress have ended; wal: as above).
     * With `verify_pauses_first`, the first round of re-checks pauses before
     * it too (a hooks writer descheduled between its write and its mark).
     */
    void (*wait_for_marks)();
    bool verify_pauses_first;

    /* For ptrack_status(): why the source cannot run although tracking is on, in `buf`; nullptr if nothing. */
    const char* (*not_running)(char* buf, size_t len);
    /* For ptrack_status(): fills the source's own columns; false if it has none. */
    bool (*status)(SourceStatus* out);
};

/*
 * Every entry of `ops` is set, but those that may be nullptr by their
 * comment (drops_follower_slot, persistence.migrate_loaded): for the
 * static_assert after each table.
 */
constexpr bool source_ops_complete(const CaptureSourceOps& ops)
{
    const SourcePersistence& p = ops.persistence;
    return ops.name != nullptr && p.files_dir != nullptr && p.fresh_init_detail != nullptr && p.save_failure_detail != nullptr &&
           p.save_failure_hint != nullptr && p.before_load != nullptr && p.start_fresh != nullptr &&
           p.continue_loaded != nullptr && p.marks_map != nullptr && ops.install != nullptr &&
           ops.save_prepare != nullptr && ops.save_covered_lsn != nullptr && ops.save_sizes != nullptr &&
           ops.save_point != nullptr && ops.save_done != nullptr && ops.wait_until_fresh != nullptr &&
           ops.summaries != nullptr && ops.wait_for_marks != nullptr && ops.not_running != nullptr &&
           ops.status != nullptr;
}

extern const CaptureSourceOps kHooksSource; /* capture_hooks.cpp */
extern const CaptureSourceOps kWalSource;   /* capture_wal.cpp */

/* The source of this server run; set once in _PG_init.  Requires tracking on (require_tracking()). */
const CaptureSourceOps& running_source() noexcept;

/* In _PG_init, with tracking on: `source` runs (also hands its persistence part to persist/). */
void set_running_source(const CaptureSourceOps* source);

/*
 * The one save sequence of every source, in the process that saves (the
 * checkpointer, the follower): the sizes (file_growth.h) before the map, so
 * that a saved map is never ahead of them; the map (flush_map()); then the
 * sizes promoted and the source's own step after it.  True when the map was saved; on a failure the step
 * logged a WARNING, SaveStats counts it, and the previous save stays in
 * force.
 */
bool save_map(const CaptureSourceOps& source);

/* True when the running server exports the four hooks of the core patch (looked up by name). */
bool hooks_available();

}  // namespace ptrack::pg

#endif
