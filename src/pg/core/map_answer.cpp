/*
 * map_answer.cpp -- see map_answer.h.
 */
extern "C" {
#include "postgres.h"
}

#include "core/boundary.h"
#include "core/map_answer.h"
#include "ptrack/pagemap.h"

namespace ptrack::pg {

PTRACK_ENGINE_NOEXCEPT(&Map::segment_pagemap, &Map::segment_may_have_changed, &pagemap_set_all, &pagemap_bytes,
                       &pagemap_set_from, &LimitTable::first_changed_block);

namespace {

/*
 * The first block of segment file `segment` that the limit table lists
 * (every block from it on changed at or after `since`), counted from the
 * segment's first block; RELSEG_SIZE if none (or no table is attached:
 * shared_state.h).  Segment s holds the relation fork's blocks
 * [s * RELSEG_SIZE, (s + 1) * RELSEG_SIZE).
 */
uint32_t limit_in_segment(const RelSegment& segment, Lsn since)
{
    if (!limits.attached())
        return RELSEG_SIZE;
    const uint32_t limit = limits.first_changed_block(segment.rel, since);
    const uint64_t start = uint64_t{segment.segno} * RELSEG_SIZE;
    if (limit == kNoLimit || limit >= start + RELSEG_SIZE)
        return RELSEG_SIZE;
    return limit <= start ? 0 : static_cast<uint32_t>(limit - start);
}

}  // namespace

/*
 * Fills state->pagemap for one file that file_may_have_changed() let
 * through; returns the number of changed blocks: the map's, and every block
 * from a limit on (truncations, created or dropped relations and databases,
 * ptrack/limit_table.h).  FSM forks are not WAL-logged, so every FSM block
 * is listed (docs/design.md section 1).
 */
uint32_t file_changes(const RelationFile* file, PagemapScan* state)
{
    uint64_t nblocks = (file->size_bytes + BLCKSZ - 1) / BLCKSZ;
    if (nblocks > RELSEG_SIZE)
        nblocks = RELSEG_SIZE; /* a segment file never holds more; be safe on odd sizes */
    const auto n = static_cast<uint32_t>(nblocks);
    state->nblocks = n;
    if (file->segment.rel.fork == kFsmFork)
        return pagemap_set_all(state->pagemap, n);
    uint32_t count = map.segment_pagemap(file->segment.rel, file->segment.segno, n, state->since, state->pagemap,
                                         use_segment_summary);
    /* The walk calls the filter just before, for the same file: reuse its lookup. */
    const bool same = file->segment.rel == state->limited.rel && file->segment.segno == state->limited.segno;
    const uint32_t first = same ? state->limit_first : limit_in_segment(file->segment, state->since);
    if (first < n)
        count += pagemap_set_from(state->pagemap, first, n);
    return count;
}

/*
 * Before a file's size is looked up: false if it has nothing to list, so
 * that unchanged files cost no stat().  Unlogged relations are not backed up
 * (only their init fork); FSM forks are always listed whole; a file that a
 * limit covers is listed whatever the map says.  One limit lookup per file
 * (relation and database bucket), kept for file_changes().
 */
bool file_may_have_changed(const RelSegment& segment, bool unlogged, void* arg)
{
    auto* state = static_cast<PagemapScan*>(arg);
    if (unlogged)
        return false;
    if (segment.rel.fork == kFsmFork)
        return true;
    state->limited = segment;
    state->limit_first = limit_in_segment(segment, state->since);
    if (state->limit_first < RELSEG_SIZE || !use_segment_summary)
        return true;
    return map.segment_may_have_changed(segment.rel, segment.segno, state->since);
}

void init_scan(PagemapScan* state, Lsn since)
{
    state->since = since;
    state->pagemap = static_cast<uint8_t*>(palloc(pagemap_bytes(RELSEG_SIZE)));
    state->nblocks = 0;
    state->tuplestore = NULL;
    state->tupdesc = NULL;
    state->files = 0;
    state->pages = 0;
    state->limited = RelSegment{RelFork{0, 0, 0, kDatabaseKeyFork}, 0, false}; /* matches no file */
    state->limit_first = RELSEG_SIZE;
    state->caller = nullptr;
}

}  // namespace ptrack::pg
