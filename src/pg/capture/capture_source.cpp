/*
 * capture_source.cpp -- the source that runs (capture_source.h), and the one
 * save sequence every source runs through its table of operations.
 *
 * The save order is a correctness rule, not a habit: the sizes of relation
 * files (file_growth.h) are written before the map, and the map only if
 * they were, so that a saved map is never ahead of the file it is loaded
 * with; the sizes file is promoted
 * after the map (growth_commit_save()), and only then may the source drop
 * what the saved map now covers (the hooks' bypass journal, the follower's
 * WAL).  docs/design.md section 2.
 */
extern "C" {
#include "postgres.h"
}

#include "capture/capture_source.h"
#include "capture/file_growth.h"
#include "persist/state_files.h"

namespace ptrack::pg {

namespace {

const CaptureSourceOps* running = nullptr;

}  // namespace

const CaptureSourceOps& running_source() noexcept
{
    Assert(running != nullptr);
    return *running;
}

void set_running_source(const CaptureSourceOps* source)
{
    running = source;
    init_lsn_on_first_use = source->init_lsn_on_first_use;
    use_source_persistence(&source->persistence);
}

bool save_map(const CaptureSourceOps& source)
{
    source.save_prepare();
    const Lsn covered = source.save_covered_lsn();
    if (!ensure_state_folder("its map") || !source.save_sizes(covered)) {
        save_stats_record_failure(); /* flush_map() counts its own */
        return false;
    }
    if (!flush_map(source.save_point(covered)))
        return false;
    growth_commit_save();
    source.save_done(covered);
    return true;
}

}  // namespace ptrack::pg
