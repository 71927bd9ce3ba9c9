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
 * The write path is ptrack_mdwrite/ptrack_mdextend -> capture_write() ->
 * capture_block_written() -> Map::mark_in_segment(), all inlined into the
 * hook: no lock, no allocation, no error.  Temporary relations are skipped:
 * they never survive a restart and no backup copies them.
 *
 * Blocks removed by truncation need no capture: a backup tool takes every
 * file's current length, and re-extension goes through mdextend.
 *
 * The fifth hook, mdimmedsync_hook, is optional (a server carrying only the
 * published ptrack 2.x patch lacks it): it makes the marks of a fork written
 * outside shared buffers durable before its writer commits (bypass_journal_io.h).
 * Without it that crash window stays open, and the postmaster says so.
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

/* Addresses of the server's hook variables, nullptr on a stock server. */
struct ServerHooks {
    mdextend_hook_fn* mdextend;
    mdwrite_hook_fn* mdwrite;
    copydir_hook_fn* copydir;
    sync_requests_hook_fn* process_sync_requests;
    mdimmedsync_hook_fn* mdimmedsync; /* optional: this project's fifth hook */
};

ServerHooks server_hooks;
bool hooks_looked_up = false;

mdwrite_hook_fn prev_mdwrite_hook = nullptr;
mdextend_hook_fn prev_mdextend_hook = nullptr;
copydir_hook_fn prev_copydir_hook = nullptr;
sync_requests_hook_fn prev_sync_requests_hook = nullptr;
mdimmedsync_hook_fn prev_mdimmedsync_hook = nullptr;

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
}

__attribute__((always_inline)) inline void capture_write(const PgRelIdBackend& rnode, ForkNumber forknum,
                                                        BlockNumber blocknum)
{
    if (rel_is_temp(rnode))
        return;
    const RelFork rel = rel_fork(rnode, forknum);
    capture_block_written(rel, blocknum);
}

void ptrack_mdwrite(PgRelIdBackend rnode, ForkNumber forknum, BlockNumber blocknum)
{
    if (prev_mdwrite_hook)
        prev_mdwrite_hook(rnode, forknum, blocknum);
    capture_write(rnode, forknum, blocknum);
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
     * Every mark announced from now on stores a value >= next_threshold; the
     * marks already in progress may hold an older LSN, so let them finish
     * before the map is copied.
     */
    point.next_threshold = current_mark_lsn();
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
    prev_mdwrite_hook = *server_hooks.mdwrite;
    *server_hooks.mdwrite = ptrack_mdwrite;
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
