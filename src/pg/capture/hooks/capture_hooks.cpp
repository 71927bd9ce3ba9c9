/*
 * capture_hooks.cpp -- the hooks capture source: the core patch's
 * storage-manager hooks (patches/), chained to any hook installed before us.
 *
 * One ptrack.so serves a patched and a stock server: the hook variables are
 * looked up by name in the running server when the library is loaded
 * (dlsym on the global symbol table: the postgres binary exports its symbols
 * to loadable modules), never referenced at link time, so a stock server
 * loads the library and simply reports that it has no hooks
 * (hooks_available()).  The hook types are declared here with the names and
 * signatures of the ptrack 2.x core-patch interface, since a stock server's
 * headers lack them.
 *
 * The write path is ptrack_mdwritev (or ptrack_mdwrite) / ptrack_mdextend ->
 * capture_pages_written() or capture_blocks_written() ->
 * Map::mark_in_segment(), all inlined into the hook: no lock, no
 * allocation, no error.  Temporary relations are skipped: they never
 * survive a restart and no backup copies them.
 *
 * Blocks removed by truncation need no capture: a backup tool takes every
 * file's current length, and re-extension goes through mdextend.
 *
 * Which LSN a write is marked with.  A mark must be at least the LSN of the
 * last change the written image holds.  The insert position at the moment
 * of the write always is; but a checkpoint writes the pages that last
 * changed before its redo LSN after that LSN, so every page dirty when a
 * backup starts would read as changed in the next incremental.  The page's
 * own LSN (pd_lsn: the end of the last WAL record applied to it) is the
 * tight mark, used where every change that matters to a backup moves it,
 * i.e. for a write that passes all of these tests (docs/design.md 3.2):
 *
 *  - it comes through mdwritev_hook (this project's core patch passes the
 *    pages) with skipFsync false: the buffer manager writing a shared buffer
 *    (FlushBuffer() in bufmgr.c; localbuf.c also passes false, for the
 *    temporary relations skipped here).  A change to a shared buffer whose
 *    WAL record precedes a checkpoint's redo LSN is on disk before that
 *    checkpoint completes (the buffer is dirty when BufferSync() looks), so
 *    a backup starting at that redo LSN holds it, and a later change sets
 *    pd_lsn past it.  A writer that bypasses shared buffers (bulk_write.c,
 *    nbtsort.c, RelationCopyStorage(): skipFsync true) WAL-logs a page and
 *    writes it later, maybe after the next redo LSN, where a backup may not
 *    find it although its pd_lsn lies before its start; those writes, and
 *    every extension (mdextend, mdzeroextend), keep the insert position;
 *  - the main fork.  The FSM is never WAL-logged, and a heap change that
 *    clears a visibility-map bit leaves the VM page's LSN alone
 *    (visibilitymap_clear()).  Unlogged relations' main forks are never
 *    listed (their pd_lsn may be 0 or a fake LSN);
 *  - wal_level >= replica (XLogIsNeeded()).  With minimal, a relation
 *    created or rewritten in the current transaction writes no WAL
 *    (RelationNeedsWAL()): its pages keep pd_lsn 0, the source's LSN
 *    (RelationCopyStorage() without WAL) or GiST's fake ones;
 *  - data checksums or wal_log_hints (XLogHintBitIsNeeded()).  Without them
 *    visibilitymap_set() sets PD_ALL_VISIBLE on a heap page without moving
 *    its LSN (visibilitymap.c, and heap_xlog_visible() in replay): a backup
 *    holding the older heap page with the newer VM page keeps a VM bit the
 *    heap page does not show, heap_insert() and heap_delete() then leave
 *    the bit set (they test PageIsAllVisible()), and index-only scans
 *    return wrong rows.  With them, visibilitymap_set() sets the heap page's
 *    LSN to its record's, and MarkBufferDirtyHint() WAL-logs a full-page
 *    image for the first hint-bit change after a checkpoint's redo LSN and
 *    sets pd_lsn to it (XLogSaveBufferForHint() in xloginsert.c); a later
 *    hint-only change finds pd_lsn already past that redo LSN.  nextval()
 *    does the same for the steps it does not log (sequence.c: a new record
 *    once pd_lsn <= GetRedoRecPtr()).  So a change after a backup's start
 *    leaves pd_lsn at or after it.  A hint bit set while the buffer is
 *    already dirty may be logged without pd_lsn moving: hint bits may go
 *    either way (docs/design.md section 1);
 *  - pd_lsn is not 0: a new page is marked with the insert position.
 *
 * Recovery is no different: replay sets pd_lsn to the record it applies
 * (XLogReadBufferForRedoExtended()), a restartpoint writes every buffer dirty
 * at its redo LSN as a checkpoint does, and the standby's own
 * XLogHintBitIsNeeded() decides whether heap_xlog_visible() moves the heap
 * page's LSN.  The stored value is at least the mark floor (capture.h),
 * which keeps the one assumption persistence makes about marks, that a mark
 * made after a save point holds a value the next delta collects; a pd_lsn
 * beyond the insert position (WAL reset) only lists the block more often.
 *
 * The fifth hook, mdimmedsync_hook, is optional (a server carrying only the
 * published ptrack 2.x patch lacks it): it makes the marks of a fork written
 * outside shared buffers durable before its writer commits (bypass_journal_io.h).
 * Without it that crash window stays open, and the postmaster says so.
 * mdwritev_hook is optional too: without it writes are marked through
 * mdwrite_hook with the insert position.
 */
extern "C" {
#include "postgres.h"

#include <dlfcn.h>

#include "access/xlog.h"
}

#include "capture/hooks/bypass_journal_io.h"
#include "capture/capture.h"
#include "capture/file_growth.h"
#include "capture/capture_source.h"
#include "capture/hooks/hooks_load.h"
#include "compat/compat.h"
#include "persist/map_persistence.h"
#include "core/shared_state.h"

namespace ptrack::pg {

namespace {

/*
 * The core patch's hook types (storage/md.h, storage/copydir.h, storage/sync.h
 * of a patched server): a RelFileNodeBackend on 15, a RelFileLocatorBackend
 * (the same three OIDs and backend number) from 16 on, as in the published
 * patches.
 */
using mdextend_hook_fn = void (*)(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber blocknum);
using mdwrite_hook_fn = void (*)(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber blocknum);
using copydir_hook_fn = void (*)(const char* path);
using sync_requests_hook_fn = void (*)();
using mdimmedsync_hook_fn = void (*)(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber nblocks);
using mdwritev_hook_fn = void (*)(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber blocknum,
                                  const void** buffers, BlockNumber nblocks, bool skip_fsync);

/* Addresses of the server's hook variables, nullptr on a stock server. */
struct ServerHooks {
    mdextend_hook_fn* mdextend;
    mdwrite_hook_fn* mdwrite;
    copydir_hook_fn* copydir;
    sync_requests_hook_fn* process_sync_requests;
    mdimmedsync_hook_fn* mdimmedsync; /* optional: this project's fifth hook */
    mdwritev_hook_fn* mdwritev;       /* optional: this project's, mdwrite_hook with the pages */
};

ServerHooks server_hooks;
bool hooks_looked_up = false;

mdwrite_hook_fn prev_mdwrite_hook = nullptr;
mdextend_hook_fn prev_mdextend_hook = nullptr;
copydir_hook_fn prev_copydir_hook = nullptr;
sync_requests_hook_fn prev_sync_requests_hook = nullptr;
mdimmedsync_hook_fn prev_mdimmedsync_hook = nullptr;
mdwritev_hook_fn prev_mdwritev_hook = nullptr;

/*
 * Whether a buffer-manager write of a main fork is marked with its pd_lsn
 * (the header's argument): wal_level >= replica, and data checksums or
 * wal_log_hints.  Fixed for the server's run; each process tests it once,
 * at its first such write (-1 until then).
 */
int page_lsn_marks = -1;

void look_up_hooks()
{
    if (hooks_looked_up)
        return;
    hooks_looked_up = true;
    server_hooks.mdextend = static_cast<mdextend_hook_fn*>(dlsym(RTLD_DEFAULT, "mdextend_hook"));
    server_hooks.mdwrite = static_cast<mdwrite_hook_fn*>(dlsym(RTLD_DEFAULT, "mdwrite_hook"));
    server_hooks.copydir = static_cast<copydir_hook_fn*>(dlsym(RTLD_DEFAULT, "copydir_hook"));
    server_hooks.process_sync_requests =
        static_cast<sync_requests_hook_fn*>(dlsym(RTLD_DEFAULT, "ProcessSyncRequests_hook"));
    server_hooks.mdimmedsync = static_cast<mdimmedsync_hook_fn*>(dlsym(RTLD_DEFAULT, "mdimmedsync_hook"));
    server_hooks.mdwritev = static_cast<mdwritev_hook_fn*>(dlsym(RTLD_DEFAULT, "mdwritev_hook"));
}

__attribute__((always_inline)) inline void capture_write(const PgRelIdBackend& rnode, ForkNumber forknum,
                                                        BlockNumber blocknum)
{
    if (rel_is_temp(rnode))
        return;
    const RelFork rel = rel_fork(rnode, forknum);
    capture_blocks_written(rel, blocknum, 1);
}

void ptrack_mdwrite(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber blocknum)
{
    if (prev_mdwrite_hook)
        prev_mdwrite_hook(rnode, forknum, blocknum);
    capture_write(rnode, forknum, blocknum);
}

/* A process's first buffer-manager write of a main fork: decides page_lsn_marks. */
__attribute__((noinline, cold)) bool page_lsn_marks_first_test()
{
    page_lsn_marks = XLogIsNeeded() && XLogHintBitIsNeeded() ? 1 : 0;
    return page_lsn_marks == 1;
}

/* The marks of one mdwritev_hook call: with the pages' LSNs where the header's rule allows. */
__attribute__((always_inline)) inline void mark_written(PgRelIdBackend rnode, ForkNumber forknum,
                                                       BlockNumber blocknum, const void** buffers,
                                                       BlockNumber nblocks, bool skip_fsync)
{
    if (rel_is_temp(rnode))
        return;
    const RelFork rel = rel_fork(rnode, forknum);
    if (forknum == MAIN_FORKNUM && !skip_fsync &&
        (likely(page_lsn_marks > 0) || (unlikely(page_lsn_marks < 0) && page_lsn_marks_first_test())))
        capture_pages_written(rel, blocknum, buffers, nblocks);
    else
        capture_blocks_written(rel, blocknum, nblocks);
}

/* ptrack_mdwritev() behind a hook installed before ours: that one first. */
__attribute__((noinline)) void ptrack_mdwritev_chained(PgRelIdBackend rnode, ForkNumber forknum,
                                                       BlockNumber blocknum, const void** buffers,
                                                       BlockNumber nblocks, bool skip_fsync)
{
    prev_mdwritev_hook(rnode, forknum, blocknum, buffers, nblocks, skip_fsync);
    mark_written(rnode, forknum, blocknum, buffers, nblocks, skip_fsync);
}

/*
 * The buffer manager's writes and bypass writes, with the pages (a server
 * whose patch has mdwritev_hook); md.c calls it with nblocks >= 1.
 */
void ptrack_mdwritev(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber blocknum, const void** buffers,
                     BlockNumber nblocks, bool skip_fsync)
{
    if (unlikely(prev_mdwritev_hook != nullptr)) {
        ptrack_mdwritev_chained(rnode, forknum, blocknum, buffers, nblocks, skip_fsync);
        return;
    }
    mark_written(rnode, forknum, blocknum, buffers, nblocks, skip_fsync);
}

void ptrack_mdextend(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber blocknum)
{
    if (prev_mdextend_hook)
        prev_mdextend_hook(rnode, forknum, blocknum);
    capture_write(rnode, forknum, blocknum);
}

void ptrack_copydir(const char* path)
{
    if (prev_copydir_hook)
        prev_copydir_hook(path);
    capture_relation_files(path);
}

/* Not on the per-block write path: once per fork synced by a bulk writer, before it commits. */
void ptrack_mdimmedsync(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber nblocks)
{
    if (prev_mdimmedsync_hook)
        prev_mdimmedsync_hook(rnode, forknum, nblocks);
    if (rel_is_temp(rnode))
        return;
    const RelFork rel = rel_fork(rnode, forknum);
    bypass_journal_append(rel, nblocks);
}

void ptrack_process_sync_requests()
{
    if (prev_sync_requests_hook)
        prev_sync_requests_hook();
    /*
     * Every write before this checkpoint's redo LSN is marked by now, and
     * crash recovery starts at or after it: the map is complete up to it.
     */
    (void) save_map(kHooksSource);
}

/*
 * The hooks' steps of save_map() (capture_source.h).  The bypass journal is
 * set aside first: each of its entries was appended after its blocks were
 * marked, so the save covers them, and it is retired once the save is done.
 */
void hooks_save_prepare()
{
    if (server_hooks.mdimmedsync != nullptr)
        bypass_journal_rotate();
}

Lsn hooks_save_covered_lsn()
{
    return GetRedoRecPtr();
}

/* The first walk takes the sizes saved with the map loaded at startup as its previous one (file_growth.h). */
bool hooks_save_sizes(Lsn covered)
{
    return growth_prepare_hooks_save(covered, shared->loaded_covered_lsn);
}

/* In the checkpointer at the end of a sync phase; waits for the marks in progress (capture.h). */
SavePoint hooks_save_point(Lsn covered)
{
    SavePoint point;
    /*
     * Every mark announced from now on stores a value >= next_threshold (the
     * insert position it reads, or the floor below); the marks already in
     * progress may hold an older LSN, so let them finish before the map is
     * copied.
     */
    point.next_threshold = current_mark_lsn();
    /* The marks with a page's LSN store at least this from now on (capture.h); it is published first. */
    shared->mark_floor.store(point.next_threshold, Order::kSeqCst);
    wait_for_marks_in_progress();
    point.covered_lsn = covered;
    return point;
}

void hooks_save_done(Lsn)
{
    if (server_hooks.mdimmedsync != nullptr)
        bypass_journal_retire();
}

void install_capture_hooks();

}  // namespace

bool hooks_available()
{
    look_up_hooks();
    return server_hooks.mdextend != nullptr && server_hooks.mdwrite != nullptr && server_hooks.copydir != nullptr &&
           server_hooks.process_sync_requests != nullptr;
}

namespace {

void install_capture_hooks()
{
    Assert(hooks_available());
    if (server_hooks.mdwritev != nullptr) {
        prev_mdwritev_hook = *server_hooks.mdwritev;
        *server_hooks.mdwritev = ptrack_mdwritev;
    } else {
        prev_mdwrite_hook = *server_hooks.mdwrite;
        *server_hooks.mdwrite = ptrack_mdwrite;
    }
    prev_mdextend_hook = *server_hooks.mdextend;
    *server_hooks.mdextend = ptrack_mdextend;
    prev_copydir_hook = *server_hooks.copydir;
    *server_hooks.copydir = ptrack_copydir;
    prev_sync_requests_hook = *server_hooks.process_sync_requests;
    *server_hooks.process_sync_requests = ptrack_process_sync_requests;
    if (server_hooks.mdimmedsync != nullptr) {
        prev_mdimmedsync_hook = *server_hooks.mdimmedsync;
        *server_hooks.mdimmedsync = ptrack_mdimmedsync;
    } else {
        ereport(LOG, (errmsg("ptrack: this server's core patch has no mdimmedsync_hook"),
                      errdetail("A crash right after an index build, CLUSTER, VACUUM FULL or ALTER TABLE ... SET "
                                "TABLESPACE that spanned a checkpoint can lose the marks of the blocks it wrote."),
                      errhint("Build the server with the core patch of this ptrack version (patches/pg%u-ptrack-hooks.patch).", kServerMajor)));
    }
}

}  // namespace

constexpr CaptureSourceOps kHooksSource = [] {
    CaptureSourceOps ops{};
    ops.name = "hooks";
    ops.persistence.id = CaptureSourceId::kHooks;
    ops.persistence.files_dir = ""; /* the data directory (persist/state_files.h) */
    ops.persistence.fresh_init_detail = "ptrack_init_lsn() is set when tracking is first used.";
    ops.persistence.save_failure_detail =
        "Backups are not affected while the server runs: the changes are tracked in memory. If the server stops or "
        "crashes before a later checkpoint saves the map, ptrack will not trust the map at the next start and the "
        "next backup must be a full backup.";
    ops.persistence.save_failure_hint =
        "Make the data directory and ptrack's files in it (ptrack.map*, ptrack.sizes*) writable by the server's "
        "user, and free disk space; the next checkpoint retries.";
    ops.persistence.before_load = [](const ControlFileData*, SharedState*) {};
    ops.persistence.start_fresh = hooks_start_fresh;
    ops.persistence.continue_loaded = hooks_continue_loaded;
    ops.persistence.marks_map = [] { return true; };
    ops.persistence.migrate_loaded = nullptr; /* the hooks' map is always of ptrack.map_size */
    ops.init_lsn_on_first_use = true;
    ops.install = install_capture_hooks;
    ops.drops_follower_slot = "this server captures changes with the hooks, not from the WAL";
    ops.save_prepare = hooks_save_prepare;
    ops.save_covered_lsn = hooks_save_covered_lsn;
    ops.save_sizes = hooks_save_sizes;
    ops.save_point = hooks_save_point;
    ops.save_done = hooks_save_done;
    ops.wait_until_fresh = [] {};
    ops.summaries = [](bool, Lsn*) { return false; };
    ops.wait_for_marks = wait_for_marks_in_progress;
    ops.verify_pauses_first = true;
    ops.not_running = [](char*, size_t) -> const char* { return nullptr; };
    ops.status = [](SourceStatus*) { return false; };
    return ops;
}();
static_assert(source_ops_complete(kHooksSource), "every entry of the hooks' table is set");

}  // namespace ptrack::pg
