/*
 * capture_hooks.cpp -- the hooks capture source: the core patch's
 * storage-manager hooks (patches/), chained to any hook installed before us.
 *
 * The write path is ptrack_mdwrite/ptrack_mdextend -> capture_write() ->
 * capture_block_written() -> Map::mark_in_segment(), all inlined into the
 * hook: no lock, no allocation, no error.  Temporary relations are skipped:
 * they never survive a restart and no backup copies them.
 *
 * Blocks removed by truncation need no capture: a backup tool takes every
 * file's current length, and re-extension goes through mdextend.
 */
extern "C" {
#include "postgres.h"

#include "storage/copydir.h"
#include "storage/md.h"
#include "storage/sync.h"
}

#include "capture.h"
#include "map_persistence.h"
#include "shared_state.h"

namespace ptrack::pg {

namespace {

mdwrite_hook_type prev_mdwrite_hook = nullptr;
mdextend_hook_type prev_mdextend_hook = nullptr;
copydir_hook_type prev_copydir_hook = nullptr;
ProcessSyncRequests_hook_type prev_ProcessSyncRequests_hook = nullptr;

__attribute__((always_inline)) inline void capture_write(const RelFileNodeBackend& rnode, ForkNumber forknum,
                                                        BlockNumber blocknum)
{
    if (RelFileNodeBackendIsTemp(rnode))
        return;
    const RelFork rel{rnode.node.spcNode, rnode.node.dbNode, rnode.node.relNode, static_cast<uint8_t>(forknum)};
    capture_block_written(rel, blocknum);
}

void ptrack_mdwrite(RelFileNodeBackend rnode, ForkNumber forknum, BlockNumber blocknum)
{
    if (prev_mdwrite_hook)
        prev_mdwrite_hook(rnode, forknum, blocknum);
    capture_write(rnode, forknum, blocknum);
}

void ptrack_mdextend(RelFileNodeBackend rnode, ForkNumber forknum, BlockNumber blocknum)
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

void ptrack_process_sync_requests()
{
    if (prev_ProcessSyncRequests_hook)
        prev_ProcessSyncRequests_hook();
    /* Every write before this checkpoint's redo LSN is marked by now: save the map. */
    flush_map();
}

}  // namespace

void install_capture_hooks()
{
    prev_mdwrite_hook = mdwrite_hook;
    mdwrite_hook = ptrack_mdwrite;
    prev_mdextend_hook = mdextend_hook;
    mdextend_hook = ptrack_mdextend;
    prev_copydir_hook = copydir_hook;
    copydir_hook = ptrack_copydir;
    prev_ProcessSyncRequests_hook = ProcessSyncRequests_hook;
    ProcessSyncRequests_hook = ptrack_process_sync_requests;
}

}  // namespace ptrack::pg
