/*
 * map_migration.cpp -- see map_migration.h.
 */
extern "C" {
#include "postgres.h"
}

#include <new>

#include "capture/wal/map_migration.h"
#include "core/boundary.h"
#include "core/map_answer.h"
#include "persist/limit_file_io.h"
#include "persist/state_files.h"
#include "persist/summary_io.h"
#include "ptrack/limit_file.h"

namespace ptrack::pg {

namespace {

PTRACK_ENGINE_NOEXCEPT(&ChangeSet::add_block, &ChangeSet::add_limit, &ChangeSet::reset, &ChangeSet::open_cursor,
                       &ChangeSet::close_cursor);

/* The migration's set, freed before the migration returns (an ERROR of the walk stops the postmaster). */
alignas(ChangeSet) unsigned char set_storage[sizeof(ChangeSet)];
ChangeSet* live_set = nullptr;
PTRACK_FRAME_SAFE(SummaryHeader);

/* One migration's walk (PagemapScan::caller). */
struct Migration {
    ChangeSet* set;
    bool coarse;         /* the set is nearly full: one limit per fork from now on */
    bool refused;        /* the set could not take a change: the migration fails */
    uint64_t blocks;     /* blocks added one by one */
    uint64_t limits;     /* forks added as a limit */
};
PTRACK_FRAME_SAFE(Migration);

/* The first set bit of a pagemap of `nblocks` bits, or nblocks. */
uint32_t first_listed(const uint8_t* pagemap, uint32_t nblocks)
{
    for (uint32_t b = 0; b < nblocks; ++b)
        if (pagemap_has(pagemap, b))
            return b;
    return nblocks;
}

void add_limit(Migration* m, const RelFork& rel, BlockNumber first)
{
    if (m->set->add_limit(rel, first) == AddResult::kRefused)
        m->refused = true;
    else
        ++m->limits;
}

/* Walk callback: the map's answer for one segment file into the set. */
void migrate_file(const RelationFile* file, void* arg)
{
    auto* scan = static_cast<PagemapScan*>(arg);
    auto* m = static_cast<Migration*>(scan->caller);
    if (m->refused || file_changes(file, scan) == 0)
        return;
    const RelFork& rel = file->segment.rel;
    const BlockNumber base = file->segment.segno * static_cast<BlockNumber>(RELSEG_SIZE);
    const uint32_t n = scan->nblocks;
    /* Listed whole anyway (FSM forks, a limit from block 0): one limit says it. */
    if (rel.fork == kFsmFork || m->coarse) {
        add_limit(m, rel, base + first_listed(scan->pagemap, n));
        return;
    }
    for (uint32_t b = 0; b < n; ++b) {
        if (!pagemap_has(scan->pagemap, b))
            continue;
        const AddResult r = m->set->add_block(rel, base + b);
        if (r == AddResult::kOk) {
            ++m->blocks;
            continue;
        }
        /* Nearly full (or full): the rest of this fork, and every later file, as limits. */
        m->coarse = true;
        add_limit(m, rel, r == AddResult::kCutSoon ? base + b + 1 : base + b);
        return;
    }
}

/*
 * The earlier version's ptrack.limits, which holds the truncations, creations
 * and drops its map cannot express, read into a limit table of private
 * memory that the map's answer reads (the global `limits`, shared_state.h)
 * until release_old_limits().  nullptr, or why it cannot be used
 * (completing "... because ..."); then no table stays attached.
 */
void* old_limits_region = nullptr;

const char* attach_old_limits(const ControlFileData* control, Lsn map_covered)
{
    static char text[256];
    if (control == nullptr)
        return "pg_control could not be verified";
    const size_t bytes = LimitTable::bytes(kDefaultLimitBuckets);
    old_limits_region = malloc(bytes + kLineBytes);
    if (old_limits_region == nullptr)
        return "there is not enough memory to read its limit table";
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(old_limits_region) + kLineBytes - 1) / kLineBytes * kLineBytes;
    limits = LimitTable(reinterpret_cast<void*>(aligned), kDefaultLimitBuckets);
    limits.clear();
    Lsn covered = 0;
    const char* why = load_limits(control->system_identifier, &covered);
    if (why == nullptr && covered >= map_covered)
        return nullptr;
    if (why == nullptr)
        snprintf(text, sizeof(text), "\"%s\" is complete only up to %X/%X, before the map's %X/%X",
                 state_file(StateFile::kLimits), PTRACK_LSN_ARGS(covered), PTRACK_LSN_ARGS(map_covered));
    else
        snprintf(text, sizeof(text), "\"%s\", saved with it, is not usable: %s", state_file(StateFile::kLimits), why);
    return text;
}

void release_old_limits()
{
    limits = LimitTable();
    free(old_limits_region);
    old_limits_region = nullptr;
}

/* The map's answer since `since` as the summary of [since, end) on `timeline` (map_migration.h); true if written. */
bool migrate_map_to_summary(Lsn since, Lsn end, uint32_t timeline)
{
    if (live_set != nullptr)
        live_set->reset();
    live_set = new (set_storage) ChangeSet(wal_summary_budget_bytes());
    ChangeSet& set = *live_set;
    Migration m{&set, false, false, 0, 0};
    PagemapScan scan;
    init_scan(&scan, since);
    scan.caller = &m;
    walk_data_directory(migrate_file, &scan, file_may_have_changed);
    pfree(scan.pagemap);
    bool ok = !m.refused;
    const char* why = "its change set is full (raise ptrack.wal_summary_memory)";
    if (ok) {
        ChangeCursor* cursor = set.open_cursor();
        SummaryHeader written;
        ok = cursor != nullptr && summary_write_durably(*cursor, since, end, timeline, 0, &written);
        if (cursor != nullptr)
            set.close_cursor(cursor);
        why = cursor == nullptr ? "out of memory for the index of its change set" : "the summary could not be written";
    }
    set.reset();
    live_set = nullptr;
    if (!ok) {
        ereport(WARNING, (errmsg("ptrack could not turn its map into the change summary of %X/%X-%X/%X: %s",
                                 PTRACK_LSN_ARGS(since), PTRACK_LSN_ARGS(end), why),
                          errdetail("The answers from the summaries start at %X/%X.", PTRACK_LSN_ARGS(end)),
                          errhint("Take a full backup: an incremental backup since an earlier start LSN is "
                                  "refused.")));
        return false;
    }
    ereport(LOG, (errmsg("ptrack turned its map into the change summary of %X/%X-%X/%X: %llu blocks, %llu forks "
                         "from a block on",
                         PTRACK_LSN_ARGS(since), PTRACK_LSN_ARGS(end), static_cast<unsigned long long>(m.blocks),
                         static_cast<unsigned long long>(m.limits)),
                  errdetail("The map came without summaries ending where it is complete (an upgrade from a "
                            "version of ptrack without them, or pg_wal/ptrack lost while the server was "
                            "stopped).")));
    return true;
}

}  // namespace

void wal_migrate_loaded(const ControlFileData* control, const MapFileHeader& header, const Map& old_map)
{
    const Lsn covered = header.covered_lsn;
    const Lsn init = header.init_lsn;
    char buf[256];
    Lsn kept = 0;
    if (const char* problem = summary_dir_problem(buf, sizeof(buf))) {
        ereport(LOG, (errmsg("ptrack cannot look at its change summaries at startup: %s", problem),
                      errdetail("The WAL follower resumes from the saved map once it can.")));
        return;
    }
    if (!summary_keep_chain_to(covered + 1, &kept) || kept != 0 || init == 0 || init > covered)
        return;
    if (const char* why = attach_old_limits(control, covered)) {
        release_old_limits();
        ereport(WARNING, (errmsg("ptrack could not turn its map into the change summary of %X/%X-%X/%X: %s",
                                 PTRACK_LSN_ARGS(init), PTRACK_LSN_ARGS(covered + 1), why),
                          errdetail("The WAL follower restarts change tracking at %X/%X when it resumes.",
                                    PTRACK_LSN_ARGS(covered + 1)),
                          errhint("Take a full backup: an incremental backup since an earlier start LSN is "
                                  "refused.")));
        return;
    }
    /*
     * The answer is the map's and the limit table's: file_changes()
     * (core/map_answer.h) reads the global map, not attached yet here, and
     * the global limit table, attached above.
     */
    const Map shared_map = map;
    map = old_map;
    (void) migrate_map_to_summary(init, covered + 1, header.timeline);
    map = shared_map;
    release_old_limits();
}

}  // namespace ptrack::pg
